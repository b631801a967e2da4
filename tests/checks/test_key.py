"""The teacher's key to the checks (lncourse.checks.key) stays the teacher's: no check
module holds a reference or a known mistake, the published wheel leaves the key out, the
stored outputs the checks judge the visible inputs against are the key's own (recomputed
here), and without the key a check says that its teacher-only inputs need it.

The right and wrong answers of ``tests/answers.py`` on the visible inputs, from the
stored outputs alone, are run by ``test_exercises.py`` (its ``without_key`` fixture)."""

from __future__ import annotations

import ast
import importlib
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from answers import RIGHT
from lncourse.checks import _core
from lncourse.checks._compare import compare
from lncourse.checks.key import store
from lncourse.tolerance import record

ROOT = Path(__file__).resolve().parents[2]
CHECKS = ROOT / "lncourse" / "checks"
KEY = CHECKS / "key"
# helpers that build inputs and that the key's functions use too: not answers
SHARED = {"_truth"}


# ------------------------------------------------------------------ what a body is
def _bodies(source: str) -> dict[str, str]:
    """{the normalised body of every function and lambda in ``source``: its name}. A
    body is its AST with the parameters renamed by position (``lambda x, a, g, b`` and
    ``def _dyt(x, alpha, gamma, beta)`` compare alike) and a lone ``return e`` as ``e``."""
    found = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.Lambda)):
            continue
        name = getattr(node, "name", "<lambda>")
        if name in SHARED:
            continue
        args = node.args
        params = [a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]]
        body = node.body if isinstance(node, ast.FunctionDef) else [node.body]
        if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            body = body[1:]                                     # the docstring
        if len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value is not None:
            body = [body[0].value]
        text = "\n".join(ast.dump(b, annotate_fields=False) for b in body)
        for i, p in enumerate(params):
            text = text.replace(f"Name('{p}',", f"Name('_{i}',")
        found[text] = f"{name} (line {node.lineno})"
    return found


def _key_bodies() -> dict[str, str]:
    found = {}
    for path in sorted(KEY.glob("*.py")):
        if path.name not in ("__init__.py", "store.py"):
            found.update({b: f"key/{path.name}: {n}" for b, n in _bodies(
                path.read_text(encoding="utf-8")).items()})
    return found


def _answers_in(files: dict[str, str]) -> list[str]:
    """Where a check module (name -> source) holds a body of the key's, or defines a
    name that the key defines (``_dyt``, ``_DYT_MISTAKES``)."""
    key, found = _key_bodies(), []
    key_names = set()
    for path in KEY.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        key_names |= {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        key_names |= {t.id for n in tree.body if isinstance(n, ast.Assign)
                      for t in n.targets if isinstance(t, ast.Name)}
    key_names -= SHARED | {"REFERENCES", "MISTAKES", "_DESIGN4"}
    for name, source in files.items():
        for body, where in _bodies(source).items():
            if body in key:
                found.append(f"{name}: {where} is the key's {key[body]}")
        tree = ast.parse(source)
        defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        defined |= {t.id for n in tree.body if isinstance(n, ast.Assign)
                    for t in n.targets if isinstance(t, ast.Name)}
        found += [f"{name}: defines the key's {n}" for n in sorted(defined & key_names)]
    return found


def _check_sources() -> dict[str, str]:
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(CHECKS.glob("*.py"))}


def test_no_check_module_holds_a_reference_or_a_mistake():
    assert _key_bodies(), "no function found in the key"
    found = _answers_in(_check_sources())
    assert not found, found


def test_the_search_for_answers_bites():
    """``_dyt`` put back into checks/norms.py under another name, a mistake's lambda
    written into a check, and ``_dyt`` itself: each is found."""
    norms = (CHECKS / "norms.py").read_text(encoding="utf-8")
    renamed = norms + ("\n\ndef _tanh_gain(x, a, g, b):\n"
                       "    return g * torch.tanh(a * x) + b\n")
    assert any("_tanh_gain" in f for f in _answers_in({"norms.py": renamed}))
    lam = norms + "\n_M = [lambda x, a, g, b: g * a * torch.tanh(x) + b]\n"
    assert any("<lambda>" in f for f in _answers_in({"norms.py": lam}))
    named = norms + "\n\ndef _dyt(x, alpha, gamma, beta):\n    return torch.tanh(x)\n"
    assert any("defines the key's _dyt" in f for f in _answers_in({"norms.py": named}))


# ------------------------------------------------------- what a check's text says
def _declared() -> dict[str, list[str]]:
    """Every exercise's telltale fragments of its answer (label -> the ``% answer:``
    lines of its lesson page), as ``tests/book/test_editions.py`` reads them."""
    from editions import declared_answers
    found: dict[str, list[str]] = {}
    for page in sorted((ROOT / "book").glob("0[1-5]_*.md")):
        if not page.stem.endswith("_replication"):
            found.update(declared_answers(page))
    return found


def _stated(files: dict[str, str], declared: dict[str, list[str]]) -> list[str]:
    """Where a shipped check module (name -> source) states an exercise's answer: a
    declared fragment in its text (code, docstring or comment), whitespace and notation
    normalised as the editions' answer test does (``editions.telltale``)."""
    from editions import telltale
    found = []
    for name, source in files.items():
        lines = [telltale(line) for line in source.splitlines()]
        whole = telltale(source)
        for label, fragments in declared.items():
            for fragment in fragments:
                tell = telltale(fragment)
                if tell not in whole:
                    continue
                where = next((f"line {i}" for i, line in enumerate(lines, 1) if tell in line),
                             "across lines")
                found.append(f"{name} ({where}) states {label}'s answer {fragment!r}")
    return found


def _shipped_checks(tmp_path: Path) -> dict[str, str]:
    """The check modules as the published tree holds them (the key left out)."""
    import publish
    tree = publish.package_tree(ROOT / "lncourse", tmp_path / "lncourse")
    return {p.name: p.read_text(encoding="utf-8") for p in sorted((tree / "checks").glob("*.py"))}


def test_no_shipped_check_module_states_an_answer(tmp_path):
    """A learner reads the installed check modules (``help(checks.check_dyt)``, or the
    file itself): their docstrings and comments say what a function is called with and
    returns, never the answer (issue 60, item 5). No declared ``% answer:`` fragment of
    any exercise appears in any of them; the formulas are in the key, beside the
    references."""
    declared = _declared()
    assert sum(map(len, declared.values())) >= 32, "the lesson pages' fragments not found"
    files = _shipped_checks(tmp_path)
    assert {"norms.py", "_core.py", "_compare.py"} <= set(files), sorted(files)
    found = _stated(files, declared)
    assert not found, "\n".join(found)


# the docstrings and comments the checks shipped with before (issue 60, item 5): each
# gave its exercise's answer away
OLD_TEXT = {
    "ex-dyt": ("norms.py", "check_dyt", '"""dyt(x, alpha, gamma, beta): (..., d) -> '
               '(..., d), gamma * tanh(alpha * x) + beta."""'),
    "ex-peak-ratio": ("norms.py", "check_peak_ratio", '"""peak_ratio(h): (..., d) -> (...), '
                      'per vector max|h| / median|h| over its d entries."""'),
    "ex-qk-logit-bound": ("norms.py", "check_qk_logit_bound",
                          '"""qk_logit_bound(g_q, g_k): gains (..., dh) -> (...), the '
                          'largest attention logit a\n    QK-normed head can produce, '
                          '√dh · max_i |g_q,i g_k,i|."""'),
    "ex-fraction-along-ones": ("norms.py", "check_fraction_along_ones",
                               '"""fraction_along_ones(h): (..., d) -> (...), '
                               '||proj_1 h||² / ||h||² = cos²(h, 1)."""'),
    "ex-chance-abs-cos": ("norms.py", "check_chance_abs_cos",
                          '"""chance_abs_cos(d)."""\n    # the Gamma functions (or a Beta '
                          'function) lose a few hundred epsilons at large d'),
    "ex-centering-matrix": ("layernorm.py", "check_centering_matrix",
                            '"""The d x d centring (projection) matrix P = I - 1 1^T / d, '
                            'in float64."""'),
    "ex-rms-norm": ("layernorm.py", "check_rms_norm_gain",
                    '"""RMSNorm: x / sqrt(mean(x^2) + eps) * gain."""'),
}


def _with_docstring(source: str, function: str, text: str) -> str:
    """``source`` with ``function``'s docstring replaced by ``text``."""
    node = next(n for n in ast.walk(ast.parse(source))
                if isinstance(n, ast.FunctionDef) and n.name == function)
    doc = node.body[0]
    assert isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant), function
    lines = source.splitlines()
    return "\n".join(lines[:doc.lineno - 1] + ["    " + text] + lines[doc.end_lineno:])


@pytest.mark.parametrize("label", sorted(OLD_TEXT))
def test_an_old_docstring_that_states_the_answer_is_found(label, tmp_path):
    """One of the old docstrings put back into its check: the test names the module
    and the exercise whose answer it states."""
    name, function, text = OLD_TEXT[label]
    files = _shipped_checks(tmp_path)
    declared = _declared()
    assert not _stated({name: files[name]}, declared)
    old = _with_docstring(files[name], function, text)
    ast.parse(old)
    found = _stated({name: old}, declared)
    assert found and all(f.startswith(f"{name} (") for f in found), found
    assert any(f"states {label}'s answer" in f for f in found), found


def test_the_shared_modules_are_read_too():
    """The machinery's modules ship as well: the comparator's ``masked_fill(`` and a
    comment naming ``torch.log(counts)`` (both there before) are found, spaced
    otherwise than the fragments are (the search normalises as ``editions.telltale``)."""
    declared = _declared()
    found = _stated({"_compare.py": "diff = d.abs().masked_fill (same, 0.0)\n",
                     "_core.py": "# (``torch.log( counts )`` is float32)\n"}, declared)
    assert found == ["_compare.py (line 1) states ex-masked-attention's answer 'masked_fill('",
                     "_core.py (line 1) states ex-attend-counts's answer 'torch.log(counts'"]


# ------------------------------------------------------------------ the published copy
def test_the_published_tree_leaves_the_key_out(tmp_path):
    import publish
    tree = publish.package_tree(ROOT / "lncourse", tmp_path / "lncourse")
    assert (tree / "checks" / "norms.py").exists()
    assert not (tree / "checks" / "key").exists(), "the key is in the published tree"
    assert {p.name for p in (tree / "checks" / "expected").glob("*.pt")} == {
        f"{m}.pt" for m in store.MODULES}


@pytest.mark.stored_files("builds the published wheel and lists its files; compares no "
                          "stored number")
def test_the_published_wheel_holds_no_answer(tmp_path):
    """The wheel scripts/publish.py builds: the checks and their stored outputs, and
    nothing of the key, by path or by content."""
    import publish
    wheel = publish.code_wheel(tmp_path, "0" * 40, "file:///results", {}, ROOT)
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        checks = {Path(n).name: z.read(n).decode() for n in names
                  if n.startswith("lncourse/checks/") and n.endswith(".py")}
    assert not [n for n in names if "checks/key" in n], "the key is in the wheel"
    assert {f"lncourse/checks/expected/{m}.pt" for m in store.MODULES} <= set(names)
    assert "norms.py" in checks and not _answers_in(checks)


# ------------------------------------------------------------------ the stored outputs
def _dtypes(value):
    if isinstance(value, (tuple, list)):
        return tuple(_dtypes(v) for v in value)
    return value.dtype if isinstance(value, torch.Tensor) else type(value)


def _same(stored, stored_tol, fresh, fresh_tol, where: str) -> None:
    """A stored output agrees with the key's, within the tolerance the check applies;
    and so does the stored tolerance, within a factor of two (it is the estimate of
    how far rounding moves the answer, made from perturbed inputs)."""
    assert _dtypes(stored) == _dtypes(fresh), f"{where}: another kind of output"
    ok, diff, why = compare(stored, fresh, fresh_tol, torch.bfloat16)
    assert ok, f"{where}: the stored output differs from the key's: {why}"

    def leaves(t):
        return [x for v in t for x in leaves(v)] if isinstance(t, (tuple, list)) else [t]
    for s, f in zip(leaves(stored_tol), leaves(fresh_tol)):
        s, f = torch.as_tensor(s, dtype=torch.float64), torch.as_tensor(f, dtype=torch.float64)
        assert s.shape == f.shape and bool(((s <= 2 * f) & (f <= 2 * s)).all()), (
            f"{where}: the stored tolerance {s.max():.3g} is not the key's {f.max():.3g}")
    if diff > 0 and diff < float("inf"):
        tol = min(float(torch.as_tensor(t).min()) for t in leaves(fresh_tol))
        record("array", diff, tol)


def _recompute(stored: dict, fresh: dict) -> None:
    """The stored answers of one module (``expected/<module>.pt``) against the key's."""
    assert sorted(stored) == sorted(fresh)
    for function, f in fresh.items():
        s = stored[function]
        assert s["calls"] == f["calls"], f"{function}: other inputs"
        assert s["messages"] == f["messages"], f"{function}: other mistakes"
        for k, (sc, fc) in enumerate(zip(s["cases"], f["cases"], strict=True), 1):
            where = f"{function}, visible input {k}"
            if fc["expected"] is None:
                assert sc["expected"] is None, f"{where}: a property, with an output"
            else:
                _same(sc["expected"], sc["tol"], fc["expected"], fc["tol"], where)
            for message, sm, fm in zip(f["messages"], sc["mistakes"], fc["mistakes"],
                                       strict=True):
                assert (sm is None) == (fm is None), f"{where}: {message}: applies?"
                if fm is not None:
                    _same(sm[0], sm[1], fm[0], fm[1], f"{where}, mistake {message!r}")


@pytest.mark.replay
@pytest.mark.parametrize("module", store.MODULES)
def test_stored_outputs_recompute_from_the_key(module):
    """Every stored output, of a reference and of each known mistake, on every visible
    input: recomputed from the key, it agrees at the check's own tolerance; the inputs,
    the messages and which mistakes apply are the same. Out of date after a change to
    a check, its key or its inputs: python -m lncourse.checks.key.store."""
    stored = torch.load(CHECKS / "expected" / f"{module}.pt", weights_only=True)
    _recompute(stored, store.record(module))


def _edited(stored: dict, edit) -> dict:
    copy = {f: {**v, "messages": list(v["messages"]),
                "cases": [{**c, "mistakes": list(c["mistakes"]),
                           "expected": c["expected"].clone()
                           if isinstance(c["expected"], torch.Tensor) else c["expected"]}
                          for c in v["cases"]]} for f, v in stored.items()}
    edit(copy)
    return copy


def test_an_edited_stored_output_fails_the_recompute():
    """norms' stored outputs, each edited once: a number of dyt's output, a tolerance
    made four times larger, a mistake's output dropped, a message reworded; the
    recompute fails on each."""
    stored = torch.load(CHECKS / "expected" / "norms.pt", weights_only=True)
    fresh = store.record("norms")
    _recompute(stored, fresh)           # unedited, it passes

    def value(d):
        d["dyt"]["cases"][0]["expected"].view(-1)[3] += 1e-6

    def tol(d):
        d["dyt"]["cases"][1]["tol"] = d["dyt"]["cases"][1]["tol"] * 4

    def mistake(d):
        d["qk_norm_scores"]["cases"][2]["mistakes"][0] = None

    def message(d):
        d["bigram_loss"]["messages"][1] = d["bigram_loss"]["messages"][1].upper()
    for edit in (value, tol, mistake, message):
        with pytest.raises(AssertionError):
            _recompute(_edited(stored, edit), fresh)


# ------------------------------------------------------------------ without the key
@pytest.fixture
def without_key(monkeypatch):
    """A learner's install: the key cannot be imported."""
    monkeypatch.setitem(sys.modules, "lncourse.checks.key", None)
    for m in store.MODULES:
        monkeypatch.setitem(sys.modules, f"lncourse.checks.key.{m}", None)


def test_teacher_only_inputs_without_the_key_say_what_they_need(without_key):
    from lncourse import checks
    answer = RIGHT["dyt"][0].fn
    checks.check_dyt(answer)                # the visible inputs: from the stored outputs
    with pytest.raises(_core.TeacherOnly, match=r"check_dyt\(hidden=True\): the "
                       r"teacher-only inputs .* teacher's checkout"):
        checks.check_dyt(answer, hidden=True)
    assert not issubclass(_core.TeacherOnly, AssertionError)   # not a wrong answer


def test_the_grader_key_alone_also_needs_the_key(without_key, monkeypatch):
    """Inputs drawn from the grader's key (even with hidden=False) are not the stored
    ones: the check needs the live key there too."""
    from lncourse import checks
    monkeypatch.setattr(_core, "HIDDEN_KEY", "secret")
    with pytest.raises(_core.TeacherOnly):
        checks.check_dyt(RIGHT["dyt"][0].fn)


def test_stored_outputs_of_other_inputs_are_refused(monkeypatch):
    """A check whose visible inputs changed without the outputs being stored again
    stops, saying how to store them; it judges no answer against the wrong outputs."""
    norms = importlib.import_module("lncourse.checks.norms")
    real = _core.stored_answers("norms")
    changed = {**real, "dyt": {**real["dyt"], "calls": ["float64(5, 7)", *real["dyt"]["calls"][1:]]}}
    monkeypatch.setitem(_core._STORED, "norms", changed)
    with pytest.raises(RuntimeError, match="lncourse.checks.key.store"):
        norms.check_dyt(RIGHT["dyt"][0].fn)


def test_a_stub_is_not_done_yet_without_the_key(without_key, capsys):
    """The student edition's stub, on a learner's install: "not done yet", as before."""
    from lncourse import checks

    def dyt(x, alpha, gamma, beta):
        raise NotImplementedError("write dyt")
    assert checks.check_dyt(dyt) is None
    assert capsys.readouterr().out.startswith("check_dyt: not done yet: dyt still raises")
