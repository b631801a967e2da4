"""scripts/preexecute.py: the build's notebook pages, executed several at once into the
cache that jupyter-book then reads (issue 32's budget).

A small book of its own: its pages executed by the script, then built by jupyter-book,
which must find every page in the cache and execute none (a cache key that did not
match myst-nb's would make every page of the real build run twice)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest

import preexecute

ROOT = Path(__file__).resolve().parents[2]
PAGE = """\
---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---

# {title}

Some prose, with $x^2$ and a fence:

:::{{note}}
A note.
:::

```{{code-cell}} ipython3
:tags: [hide-input]
import os
print({title!r}, os.getpid())
```

```{{code-cell}} ipython3
{code}
```
"""


def _book(tmp_path: Path, pages: dict[str, str]) -> Path:
    """A book in ``tmp_path``: ``pages`` maps a page's name to its last cell's code."""
    config = (ROOT / "_config.yml").read_text()
    keep = config[:config.index("# The PDF")]   # execution and MyST settings
    (tmp_path / "_config.yml").write_text(keep)
    toc = ["format: jb-book", "root: intro", "chapters:"]
    toc += [f"  - file: {name}" for name in pages]
    (tmp_path / "_toc.yml").write_text("\n".join(toc) + "\n")
    (tmp_path / "intro.md").write_text("# A small book\n\nProse only.\n")
    for name, code in pages.items():
        (tmp_path / f"{name}.md").write_text(PAGE.format(title=name, code=code))
    return tmp_path


def test_pages_that_share_a_run_run_in_one_worker(tmp_path):
    run = 'from lncourse.modes import shared_checkpoint\nshared_checkpoint("{}", None)'
    book = _book(tmp_path, {"a": "1", "b": run.format("x"), "c": "3",
                            "d": run.format("x"), "e": run.format("y-2")})
    groups, cached = preexecute.plan(book, book / "_build" / ".jupyter_cache")
    names = [[Path(p).stem for p in g] for g in groups]
    assert cached == 0
    # no times recorded yet: the toc's order, each group in it
    assert names == [["a"], ["b", "d"], ["c"], ["e"]], names
    assert "intro" not in str(groups)                  # prose only: not a notebook


def test_the_books_shared_runs_are_found(tmp_path):
    groups, _ = preexecute.plan(ROOT, tmp_path / "cache")
    chains = [[Path(p).stem for p in g] for g in groups if len(g) > 1]
    assert ["02_unselectable_keys", "02_unselectable_keys_replication"] in chains
    assert ["03_majority", "03_majority_replication"] in chains
    assert sum(map(len, groups)) == 12                 # every notebook page, once


def test_runs_shared_through_a_page_join_one_group():
    pages = {"a": 'shared_checkpoint("x")', "b": "none", "c": "shared_checkpoint( 'y')",
             "d": 'shared_checkpoint("x") + shared_checkpoint("y")',
             "e": 'shared_checkpoint("z", C)'}
    assert preexecute.shared_runs(pages) == [["a", "c", "d"], ["e"]]


BUSY = "import time\nt = time.process_time()\nwhile time.process_time() - t < 1: pass"


def test_the_build_finds_every_page_in_the_cache(tmp_path, capfd):
    book = _book(tmp_path, {"a": "x = 1\nx", "b": "import time\ntime.sleep(1)",
                            "c": BUSY + "\nprint('c')"})
    assert preexecute.main(["--root", str(book), "--jobs", "2"]) == 0
    # each page's line gives its kernel's CPU: c's second of work, not b's of sleep
    out, err = capfd.readouterr()
    cpu = dict(re.findall(r"\] (\w)\.md: [\d.]+ s, ([\d.]+) s of CPU", out))
    # the kernels speak over local sockets: no warning of plain-text TCP for a reader
    assert "Kernel is running over TCP" not in out + err, err[-2000:]
    assert sorted(cpu) == ["a", "b", "c"]
    assert float(cpu["c"]) - float(cpu["b"]) > 0.8, cpu
    groups, cached = preexecute.plan(book, book / "_build" / ".jupyter_cache")
    assert (groups, cached) == ([], 3)                 # run again, nothing to execute
    build = subprocess.run(
        [str(Path(sys.executable).parent / "jupyter-book"), "build", str(book),
         "--builder", "html"], capture_output=True, text=True, timeout=300,
        env={**os.environ, "IPYTHONDIR": str(tmp_path / "ipython")})
    log = build.stdout + build.stderr
    assert build.returncode == 0, log[-3000:]
    assert log.count("Using cached notebook") == 3, log[-3000:]
    assert "Executing notebook" not in log             # build_site.sh's check
    # MyST-NB's copy of a page it found in the cache has no outputs; written again
    executed = book / "_build" / "jupyter_execute"
    assert not nbformat.read(executed / "a.ipynb", 4).cells[-1].outputs
    assert preexecute.main(["--root", str(book), "--write-executed", str(executed)]) == 0
    for name, shown in [("a", "1"), ("c", "c\n")]:
        nb = nbformat.read(executed / f"{name}.ipynb", 4)
        first, last = [c for c in nb.cells if c.cell_type == "code"][-2:]
        assert first.outputs[0]["text"].startswith(f"{name} ")
        out = last.outputs[0]
        assert out.get("text", out.get("data", {}).get("text/plain")) == shown
        assert "kernelspec" in nb.metadata and "language_info" in nb.metadata


def test_pages_run_as_the_site_build_runs_them(tmp_path, monkeypatch):
    """The cache is the site's: a page executed without scripts/build_site.sh's
    environment (scripts/chapter.sh runs preexecute directly) still draws its figures
    with the phone's layout, as the site serves them."""
    monkeypatch.delenv("LNCOURSE_SITE_FIGURES", raising=False)
    book = _book(tmp_path, {"a": "import os\nprint(os.environ.get("
                                 "'LNCOURSE_SITE_FIGURES', 'unset'))"})
    assert preexecute.main(["--root", str(book), "--jobs", "1"]) == 0
    executed = book / "_build" / "jupyter_execute"
    assert preexecute.main(["--root", str(book), "--write-executed", str(executed)]) == 0
    last = [c for c in nbformat.read(executed / "a.ipynb", 4).cells
            if c.cell_type == "code"][-1]
    assert last.outputs[0]["text"] == "1\n"


def test_a_failing_page_fails_with_its_name(tmp_path, capsys):
    book = _book(tmp_path, {"good": "1", "bad": "raise ValueError('no such value')"})
    assert preexecute.main(["--root", str(book), "--jobs", "2"]) == 1
    out = capsys.readouterr().out
    assert "FAILED bad.md" in out and "no such value" in out
    groups, cached = preexecute.plan(book, book / "_build" / ".jupyter_cache")
    assert cached == 1 and [Path(g[0]).stem for g in groups] == ["bad"]


def test_jobs_must_be_positive(tmp_path):
    with pytest.raises(SystemExit):
        preexecute.main(["--root", str(tmp_path), "--jobs", "0"])
