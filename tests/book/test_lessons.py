"""Every lesson keeps the shape of a lesson (issue 36, item 8), read from its source.

For each chapter page of ``_toc.yml`` that is a lesson (``book/NN_topic.md``; a page
``book/NN_topic_replication.md`` is its appendix, not a lesson), the tests fail, naming
the page, when

- its prose exceeds ``WORD_BUDGET`` words (:func:`prose_words`: the words of the
  Markdown outside code cells, display maths, directive lines, MyST comments (``%``,
  as an exercise's ``% answer:`` fragments), the collapsed dropdowns of hints and
  solutions and the closing "Further reading" list; inline maths and roles count as
  one word each);
- it does not end with a "Further reading" section, or that section is more than a
  list of cited works: each entry one sentence with a citation, the whole at most
  ``READING_BUDGET`` words. The list is the chapter's bibliography annotated, as a
  textbook's end-of-chapter notes are, so it has a budget of its own rather than a
  share of the lesson's;
- it has no admonition of class ``key-idea`` before its first code cell;
- its first figure starts below the first screen at 1280 px: more than
  ``FIRST_SCREEN_LINES`` lines (:func:`lines_before_first_figure`) come between the
  title and the first figure cell.

How ``FIRST_SCREEN_LINES`` is chosen: a 1280 x 800 screen shows about 700 px of the
page below the browser's bars. The site's header, the title and the Colab/download
buttons take about 230 px, which leaves about 470 px. The column at 1280 px is 688 px
wide; a line of prose there is about 27 px high and holds about 90 characters, which is
one source line of the course's Markdown (wrapped at 88-90 characters). For the top
100 px of the figure to be on the first screen, at most (470 - 100) / 27, about 14,
lines may come before it. A collapsed code cell (``hide-input``) shows a one-line bar
and, below it, usually one line of output: 2 lines; an admonition's title bar is one
line; a cell whose input is removed from the page (``remove-input``) shows its output,
usually one line (the parameters cell has none); a cell removed from the page
(``remove-cell``) is none.

Lessons whose split into a lesson and a replication page has not landed yet (chapters 2
to 5 without their ``_replication.md``) are expected to fail (``xfail``, not strict):
they turn into ordinary checks, without an edit here, on the commit that adds their
replication page. Chapter 1 keeps its shape (no replication page): its word budget is
checked; its key-idea box and first-screen figure are expected failures until it gets
them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORD_BUDGET = 2500
READING_BUDGET = 160
READING = "## Further reading"
FIRST_SCREEN_LINES = 14
SPLIT_CHAPTERS = {2, 3, 4, 5}      # the chapters issue 36 splits into lesson + replication


def toc_pages(root: Path = ROOT) -> list[Path]:
    """The chapter pages of ``_toc.yml``, in order."""
    toc = yaml.safe_load((root / "_toc.yml").read_text(encoding="utf-8"))
    return [root / f"{c['file']}.md" for part in toc.get("parts", [])
            for c in part.get("chapters", []) if "file" in c]


def lessons(root: Path = ROOT) -> list[Path]:
    """The lesson pages: chapter sources ``book/NN_*.md`` of the table of contents that
    are not a replication page."""
    return [p for p in toc_pages(root)
            if re.fullmatch(r"\d\d_\w+", p.stem) and not p.stem.endswith("_replication")]


def replication_page(lesson: Path) -> Path:
    return lesson.with_name(f"{lesson.stem}_replication.md")


_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)


def blocks(text: str) -> list[tuple[str, str]]:
    """The source as ("md", text) and ("code", cell) blocks, front matter dropped."""
    text = re.sub(r"\A---\n.*?\n---\n", "", text, flags=re.S)
    out, pos = [], 0
    for m in _CELL.finditer(text):
        out += [("md", text[pos:m.start()]), ("code", m.group(1))]
        pos = m.end()
    return out + [("md", text[pos:])]


def _prose(md: str) -> list[str]:
    md = re.sub(r"^\$\$.*?^\$\$", " ", md, flags=re.M | re.S)
    md = re.sub(r"^```\{(dropdown|solution-start)\}.*?^```\{?", " ", md, flags=re.M | re.S)
    lines = [ln for ln in md.splitlines()
             if not re.match(r"\s*(```|:[\w-]+:|\([\w-]+\)=\s*$|#|%)", ln)]
    text = re.sub(r"\$[^$\n]+\$", " x ", "\n".join(lines))
    text = re.sub(r"\{[\w:-]+\}`[^`]*`", " x ", text)
    return re.findall(r"[A-Za-z0-9][\w'’.,%-]*", text)


def split_reading(text: str) -> tuple[str, str]:
    """The page before its closing "Further reading" section, and that section ("" if
    it has none). The section runs to the end of the page."""
    head, sep, tail = text.partition("\n" + READING + "\n")
    return (head, tail) if sep else (text, "")


def prose_words(text: str) -> int:
    """The words a reader reads on the page (see the module docstring), the closing
    further-reading list apart."""
    body = split_reading(text)[0]
    return sum(len(_prose(t)) for kind, t in blocks(body) if kind == "md")


def reading_problems(text: str) -> list[str]:
    """What keeps the page's "Further reading" from being an annotated list of cited
    works: missing, not last, an entry without a citation or of more than one
    sentence, or over ``READING_BUDGET`` words."""
    _, reading = split_reading(text)
    if not reading.strip():
        return [f"no closing {READING!r} section"]
    problems = []
    if re.search(r"^#{1,2} ", reading, re.M) or "```{code-cell}" in reading:
        problems.append("the further-reading section is not the page's last")
    entries = re.split(r"^- ", reading.strip(), flags=re.M)
    intro, entries = entries[0], entries[1:]
    if intro.strip() or not entries:
        problems.append("the section holds prose outside its list of entries")
    for e in entries:
        flat = " ".join(e.split())
        if not re.search(r"\{cite:[tp]\}`", flat):
            problems.append(f"an entry without a citation: {flat[:60]!r}")
        if len(re.findall(r"[.!?](?:\s|$)", re.sub(r"\b(al|e\.g|i\.e|vs)\.", "", flat))) > 1:
            problems.append(f"an entry of more than one sentence: {flat[:60]!r}")
    words = len(_prose(reading))
    if words > READING_BUDGET:
        problems.append(f"{words} words, over its budget of {READING_BUDGET}")
    return problems


def _tags(cell: str) -> set[str]:
    m = re.search(r"^(?::tags:|tags:)\s*\[([^\]]*)\]", cell, re.M)
    return {t.strip() for t in m.group(1).split(",")} if m else set()


def _is_figure(kind: str, t: str) -> bool:
    if kind == "code":
        return bool(re.search(r"^mystnb:\s*\n\s+figure:", t, re.M))
    return bool(re.search(r"^```\{figure\}|^!\[", t, re.M))


def has_key_idea_first(text: str) -> bool:
    """An admonition of class key-idea before the first code cell."""
    first_md = next(t for kind, t in blocks(text) if kind == "md")
    return bool(re.search(r"^```\{admonition\}[^\n]*\n(:[\w-]+:[^\n]*\n)*"
                          r":class:[^\n]*\bkey-idea\b", first_md, re.M))


def lines_before_first_figure(text: str) -> int | None:
    """Screen lines between the title and the first figure (None: no figure)."""
    lines, titled = 0, False
    for kind, t in blocks(text):
        if kind == "md" and _is_figure(kind, t):
            t = re.split(r"^```\{figure\}|^!\[", t, flags=re.M)[0]
        if kind == "code":
            if _is_figure(kind, t):
                return lines
            tags = _tags(t)
            if "remove-cell" in tags:
                continue
            if "remove-input" in tags:
                lines += 0 if "parameters" in tags else 1   # its output, if any
            elif tags & {"hide-input", "hide-cell"}:
                lines += 2
            else:
                body = re.sub(r"\A---\n.*?\n---\n|\A(:[\w-]+:[^\n]*\n)+", "", t, flags=re.S)
                lines += len([ln for ln in body.splitlines() if ln.strip()]) + 1
            continue
        for ln in t.splitlines():
            if not titled:
                titled = ln.startswith("# ")
                continue
            s = ln.strip()
            if not s or re.match(r"(:[\w-]+:|\([\w-]+\)=$|```$)", s):
                continue
            lines += 1
        if _is_figure("md", t):
            return lines
    return None


def _expected_failure(page: Path, what: str) -> None:
    n = int(page.stem[:2])
    if n in SPLIT_CHAPTERS and not replication_page(page).exists():
        pytest.xfail(f"{page.name}: its split into lesson and replication page has not "
                     f"landed ({replication_page(page).name} does not exist yet)")
    if n not in SPLIT_CHAPTERS and what != "words":
        pytest.xfail(f"{page.name} keeps its shape (issue 36): no {what} check yet")


LESSONS = lessons()


def test_the_lessons_are_found():
    assert [p.stem[:2] for p in LESSONS] == ["01", "02", "03", "04", "05"]


@pytest.mark.parametrize("page", LESSONS, ids=lambda p: p.stem)
def test_lesson_prose_within_budget(page):
    words = prose_words(page.read_text(encoding="utf-8"))
    if words > WORD_BUDGET:
        _expected_failure(page, "words")
    assert words <= WORD_BUDGET, (f"{page.name}: {words} words of prose, over the "
                                  f"lesson's budget of {WORD_BUDGET}; move replication "
                                  f"to {replication_page(page).name}")


@pytest.mark.parametrize("page", LESSONS, ids=lambda p: p.stem)
def test_lesson_ends_with_annotated_further_reading(page):
    problems = reading_problems(page.read_text(encoding="utf-8"))
    assert not problems, f"{page.name}: " + "; ".join(problems)


def test_the_further_reading_measure():
    good = ("Body words here.\n\n## Further reading\n\n- {cite:t}`a` adds one "
            "thing.\n- {cite:t}`b` and\n  {cite:t}`c` add another.\n")
    assert prose_words(good) == 3 and reading_problems(good) == []
    assert reading_problems("Body.\n") == ["no closing '## Further reading' section"]
    uncited = good.replace("{cite:t}`a`", "Someone")
    assert any("without a citation" in p for p in reading_problems(uncited))
    long = good.replace("one thing.", "one thing. And then it goes on.")
    assert any("more than one sentence" in p for p in reading_problems(long))
    padded = good.replace("one thing.", "one " + "very " * 200 + "thing.")
    assert any("over its budget" in p for p in reading_problems(padded))
    notlast = good + "\n## Summary\n\nMore.\n"
    assert any("not the page's last" in p for p in reading_problems(notlast))
    essay = good.replace("## Further reading\n\n", "## Further reading\n\nAn essay.\n\n")
    assert any("outside its list" in p for p in reading_problems(essay))


@pytest.mark.parametrize("page", LESSONS, ids=lambda p: p.stem)
def test_lesson_opens_with_a_key_idea(page):
    ok = has_key_idea_first(page.read_text(encoding="utf-8"))
    if not ok:
        _expected_failure(page, "key-idea")
    assert ok, (f"{page.name}: no admonition with ':class: key-idea' before the first "
                "code cell")


@pytest.mark.parametrize("page", LESSONS, ids=lambda p: p.stem)
def test_lesson_first_figure_on_the_first_screen(page):
    lines = lines_before_first_figure(page.read_text(encoding="utf-8"))
    ok = lines is not None and lines <= FIRST_SCREEN_LINES
    if not ok:
        _expected_failure(page, "first-screen figure")
    assert ok, (f"{page.name}: the first figure comes after {lines} lines, below the "
                f"first screen at 1280 px (at most {FIRST_SCREEN_LINES})")


# The measures themselves, on small pages: a wrong count would let a page through.
_PAGE = """---
jupytext: {}
---

(ch-x)=
# Title

```{admonition} Key idea
:class: key-idea
One two three.
```

```{code-cell} ipython3
:tags: [parameters, hide-input]

FULL = False
```

```{code-cell} ipython3
---
mystnb:
  figure:
    caption: |
      A figure.
    name: fig-x
---
fig
```

Words $x^2$ here {numref}`fig-x`.

$$
a + b + c + d
$$

```{dropdown} Hint
hidden words do not count
```
"""


def test_the_measures_on_a_small_page():
    assert prose_words(_PAGE) == 3 + 4     # the box's sentence; "Words x here x"
    assert has_key_idea_first(_PAGE)
    assert lines_before_first_figure(_PAGE) == 2 + 2     # box (title + line), one bar
    no_box = _PAGE.replace(":class: key-idea", ":class: note")
    assert not has_key_idea_first(no_box)
    late = _PAGE.replace("One two three.", "\n".join(["A line."] * 20))
    assert lines_before_first_figure(late) > FIRST_SCREEN_LINES
    shown = _PAGE.replace(":tags: [parameters, hide-input]", ":tags: [parameters]")
    assert lines_before_first_figure(shown) == 2 + 2


def test_a_pending_split_is_keyed_on_its_replication_page(tmp_path):
    (tmp_path / "book").mkdir()
    (tmp_path / "_toc.yml").write_text(
        "parts:\n  - chapters:\n      - file: book/03_x\n      - file: book/03_x_replication\n"
        "      - file: book/04_y\n")
    assert [p.name for p in lessons(tmp_path)] == ["03_x.md", "04_y.md"]
    assert replication_page(tmp_path / "book" / "04_y.md").name == "04_y_replication.md"


_EXERCISE_TIME = re.compile(r"\*\*Difficulty:\*\*[^\n]*\*\*Time:\*\*\s+about\s+(\d+)\s+minutes")
_WORDS_PER_MINUTE = 200


def stated_minutes(text: str) -> float | None:
    """The chapter's stated time, from its overview's "**Time:** about ..." (the first one
    not on an exercise's Difficulty line): "about N minutes", "about an hour", "about 1
    hour 30 minutes"."""
    for m in re.finditer(r"\*\*Time:\*\*\s+about\s+([^.(:]*)", text):
        if "Difficulty" in text[text.rfind("\n", 0, m.start()) + 1:m.start()]:
            continue
        words = " ".join(m.group(1).split())
        hours = re.match(r"(an|1|one) hour(?:\s+(\d+) minutes)?", words)
        if hours:
            return 60 + float(hours.group(2) or 0)
        minutes = re.match(r"(\d+) minutes", words)
        return float(minutes.group(1)) if minutes else None
    return None


def honest_minutes(text: str) -> float:
    """Issue 36, item 6: the prose at 200 words a minute plus the exercises' stated times."""
    return prose_words(text) / _WORDS_PER_MINUTE + sum(
        int(t) for t in _EXERCISE_TIME.findall(text))


@pytest.mark.parametrize("page", lessons(), ids=lambda p: p.stem)
def test_lesson_states_an_honest_time(page):
    """The overview's time is the prose read at 200 words a minute plus the exercises'
    stated times, within 15% or 8 minutes (the stated time is rounded to a friendly
    figure: "about an hour"). Chapter 4 stated 50 minutes after its ★★★ exercise took it
    to 67: this fails on that."""
    text = page.read_text(encoding="utf-8")
    stated, honest = stated_minutes(text), honest_minutes(text)
    assert stated is not None, f"{page.name}: no '**Time:** about ...' in its overview"
    assert abs(stated - honest) <= max(8.0, 0.15 * honest), (
        f"{page.name} states about {stated:.0f} minutes; its prose ({prose_words(text)} "
        f"words at {_WORDS_PER_MINUTE} a minute) and exercises take {honest:.0f}")


def test_the_time_measure_reads_the_forms_in_use():
    text = "**Time:** about an\nhour: 13 minutes\n**Difficulty:** ★☆☆ · **Time:** about 5 minutes"
    assert stated_minutes(text) == 60 and honest_minutes(text) > 5
    assert stated_minutes("x. **Time:** about 1 hour 30 minutes with the exercises") == 90
    assert stated_minutes("**Time:** about 70\nminutes (the prose about 13)") == 70
    assert stated_minutes("**Difficulty:** ★ · **Time:** about 5 minutes") is None



def test_the_course_asks_for_predictions_and_hard_exercises():
    """Issue 36, item 5: every lesson asks the reader to predict first at least once, and
    the course has at least two ★★★ exercises (chapter 1's backward pass on MiniLM,
    chapter 4's cross-fitted calibration of the stored probes)."""
    texts = {p.name: p.read_text(encoding="utf-8") for p in lessons()}
    no_prediction = [n for n, t in texts.items() if not re.search(r"[Pp]redict first", t)]
    assert not no_prediction, f"no predict-first prompt: {no_prediction}"
    hard = sum(len(re.findall(r"\*\*Difficulty:\*\* ★★★", t)) for t in texts.values())
    assert hard >= 2, f"{hard} ★★★ exercise(s) in the course"
