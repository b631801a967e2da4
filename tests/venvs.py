"""Fresh virtual environments for the tests of the reader's paths (Colab, requirements.txt).

Each environment is a bare ``python -m venv`` (never ``--system-site-packages``): it sees
nothing of the project's ``.venv``. torch is the local CPU wheel, pinned (``TORCH``),
except in the slow suite's Colab (``COLAB_313``: Python 3.13 and Colab's torch release
from the package index); everything else comes from the package index, as a reader gets
it (unpinned, except Colab's pins).
The one exception is :func:`overlay`, the reduced form of the reader's environment: a venv
layered over the project's, which installs only what the newest versions change.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from conftest import ROOT

TORCH = "torch==2.13.0"           # the local CPU wheel (never unpinned: that is GBs of CUDA)
# Colab as its readers get it (issues 33, 61): the versions of Colab's published package
# list (github.com/googlecolab/backend-info, pip-freeze.gpu.txt, read 2026-08) of
# everything lncourse and the chapters touch, and of the kernel that runs them. No myst-nb:
# Colab has none. Colab runs Python 3.13.15 and torch 2.11.0+cu128. Two environments hold
# these pins:
# - COLAB (CI's `colab` task, chapter 1): this machine's Python (3.11) with the local CPU
#   wheel, torch 2.13.0, built in about 80 s from nothing but small downloads, so that it
#   fits the test command's budget; Python and torch are not Colab's.
# - COLAB_313 (the slow suite, every chapter): Colab's Python minor version (3.13; its
#   patch release is whatever COLAB_BASE finds, 3.13.0 on this machine) and Colab's torch
#   release from the package index, torch==2.11.0: a CUDA build (several GB to download,
#   hence cached and slow) that runs on the CPU. Only the local build tag differs
#   (+cu128 on Colab).
# To refresh when Colab moves: read the new pip-freeze.gpu.txt and copy the versions of
# these names into COLAB_PINS, COLAB_PYTHON and COLAB_TORCH (AUTHORING.md, "Publishing").
COLAB_PINS = {"numpy": "2.1.3", "scipy": "1.16.3", "matplotlib": "3.10.0",
              "ipywidgets": "7.7.1", "ipython": "7.34.0", "ipykernel": "6.17.1",
              "tqdm": "4.67.3", "safetensors": "0.8.0", "tokenizers": "0.22.2"}
COLAB_PYTHON, COLAB_TORCH = "3.13.15", "2.11.0+cu128"   # Colab's
COLAB = [TORCH, *(f"{name}=={version}" for name, version in COLAB_PINS.items()),
         "packaging"]             # Colab has packaging (the first cell reads versions with it)
COLAB_313_TORCH = f"torch=={COLAB_TORCH.split('+')[0]}"   # the index's: a CUDA build
COLAB_313 = [COLAB_313_TORCH, *COLAB[1:]]
# The interpreter COLAB_313 is built on: $LNCOURSE_COLAB_PYTHON, else pyenv's newest 3.13
# (not by PATH: pyenv's shim for python3.13 is found there and fails unless 3.13 is
# selected); None where the machine has none (the test is then skipped).
COLAB_BASE = os.environ.get("LNCOURSE_COLAB_PYTHON") or next(
    (str(p) for p in sorted(Path.home().glob(".pyenv/versions/3.13.*/bin/python3.13"),
                            key=lambda p: [int(n) for n in p.parts[-3].split(".")[:3]
                                           if n.isdigit()], reverse=True)), None)
RUNNER = ["nbclient"]             # executes the notebooks (Colab's own kernel is pinned)
# Cached environments live here (LNCOURSE_VENV_CACHE moves them, for example out of a
# fresh clone); one older than MAX_AGE is rebuilt, so "newest" is at most a week old.
CACHE = Path(os.environ.get("LNCOURSE_VENV_CACHE", ROOT / "_build" / "venvs"))
MAX_AGE = 7 * 24 * 3600
# A stand-in for Colab's own module: the install cell takes its Colab branch when
# google.colab is imported, as Colab's kernel does at start-up (sitecustomize).
COLAB_STUB = {"google/colab/__init__.py": '"""A stand-in for Colab\'s module (tests only)."""\n',
              "sitecustomize.py": "import google.colab  # noqa: F401 (as Colab's kernel does)\n"}
DRIVER = """
import sys, nbclient, nbformat
nb = nbformat.read(sys.argv[1], as_version=4)
client = nbclient.NotebookClient(nb, timeout=int(sys.argv[4]), kernel_name="python3",
                                 resources={"metadata": {"path": sys.argv[3]}})
try:
    client.execute()   # "Run all": the first error stops it (a stub prints "not done yet")
except nbclient.exceptions.CellExecutionError as err:
    print(str(err)[-3000:], file=sys.stderr)
finally:
    nbformat.write(nb, sys.argv[2])
"""


def _quiet(text: str) -> str:
    # this machine's pip.conf names mirror folders it lacks: one warning per package
    return "\n".join(l for l in text.splitlines() if "is ignored: it is neither" not in l)


def run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    """Run ``cmd``; on failure, raise with its output (without pip's mirror noise)."""
    done = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    if done.returncode:
        raise AssertionError(f"{' '.join(map(str, cmd))} exited {done.returncode}:\n"
                             f"{_quiet(done.stdout)[-3000:]}\n{_quiet(done.stderr)[-3000:]}")
    return done


def pip(python: Path, *args: str) -> subprocess.CompletedProcess:
    return run([str(python), "-m", "pip", "install", "-q", *args])


# uv (installed in the project's .venv by scripts/setup_env.sh) fills a fresh environment
# in seconds where pip takes about a minute. It builds the environments a test starts from;
# what a reader's own pip resolves is still asked of pip (test_requirements_resolve_to_newest).
UV = ROOT / ".venv" / "bin" / "uv"
LOCAL_WHEELS = Path("/opt/wheels")


def install(python: Path, *args: str) -> subprocess.CompletedProcess:
    """``pip install`` into ``python``'s environment, by uv where the project has it."""
    if not UV.exists():
        return pip(python, *args)
    links = ["--find-links", str(LOCAL_WHEELS)] if LOCAL_WHEELS.is_dir() else []
    return run([str(UV), "pip", "install", "-q", "--python", str(python), *links, *args])


def _torch() -> str:
    """The local CPU wheel's file where it is there (uv reads no pip.conf), else the pin."""
    wheels = sorted(LOCAL_WHEELS.glob(f"torch-{TORCH.split('==')[1]}+cpu-*.whl"))
    return str(wheels[0]) if wheels and UV.exists() else TORCH


def create(path: Path, packages: list[str] = (), requirements: Path | None = None,
           base: str | None = None, torch: str | None = None) -> Path:
    """A bare venv at ``path`` with ``packages`` (and ``requirements``); returns its python.

    ``base`` is the interpreter it is made from (by default the one running the tests);
    ``torch`` the torch it gets first (by default the local CPU wheel)."""
    shutil.rmtree(path, ignore_errors=True)
    base = base or getattr(sys, "_base_executable", sys.executable)
    run([base, "-m", "venv", str(path)])
    python = path / "bin" / "python"
    torch = torch or _torch()
    install(python, torch)  # alone first, so that nothing else can pull another build
    extra = ["-r", str(requirements), "-c", str(_torch_pin(path))] if requirements else []
    install(python, *packages, *extra)
    return python


def overlay(path: Path, base: Path, versions: dict[str, str]) -> Path:
    """The environment holding exactly ``versions`` (name to version, as pip resolved a
    reader's requirements) at the cost of what differs from the lock.

    A bare venv at ``path`` whose site-packages reads the project's (``base``, a python)
    after its own, as a site directory (so the project's .pth files, the editable lncourse
    among them, apply). Each resolved version that the lock does not already hold is then
    installed, without resolving again (``--no-deps``), into the overlay, where it shadows
    the lock's: by uv where the project has it (seconds; pip took most of a minute to
    walk all the pins under load), else by pip. The caller checks that the environment
    then holds exactly ``versions``.
    """
    shutil.rmtree(path, ignore_errors=True)
    run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", str(path)])
    python = path / "bin" / "python"
    site = run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"])
    lower = run([str(base), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"])
    (Path(site.stdout.strip()) / "_project_venv.pth").write_text(
        f"import site; site.addsitedir({lower.stdout.strip()!r})\n")
    # what the overlay sees now (its own pip and setuptools first, then the project's)
    held = json.loads(run([str(python), "-c", (
        "import importlib.metadata as m, json, sys\n"
        "def version(n):\n"
        "    try:\n"
        "        return m.version(n)\n"
        "    except m.PackageNotFoundError:\n"
        "        return None\n"
        "print(json.dumps({n: version(n) for n in json.loads(sys.argv[1])}))"),
        json.dumps(sorted(versions))]).stdout)
    pins = [f"{name}=={version}" for name, version in sorted(versions.items())
            if held[name] != version]
    if pins:
        install(python, "--no-deps", *pins)
    return python


def _torch_pin(path: Path) -> Path:
    pin = path / "torch-constraint.txt"
    pin.write_text(TORCH + "\n")
    return pin


def freeze(python: Path) -> set[str]:
    """The distributions installed in the environment, by normalised name (read from
    their .dist-info folders: a second, where ``pip list`` takes several under load)."""
    (site,) = python.parent.parent.glob("lib/python*/site-packages")
    return {d.name.split("-")[0].lower().replace("_", "-") for d in site.glob("*.dist-info")}


# How long a test waits for another run (a second pytest, a helper's worktree sharing
# LNCOURSE_VENV_CACHE) to finish with a cached environment: the slow Colab test holds
# its environment for up to an hour per page.
LOCK_WAIT = 6 * 3600


@contextlib.contextmanager
def cached(name: str, packages: list[str], base: str | None = None,
           torch: str | None = None, wait: float = LOCK_WAIT):
    """``with cached(...) as python``: the cached environment ``name`` (see
    :func:`_prepare`), held alone for the block.

    An exclusive lock (``CACHE/<name>.lock``, ``flock``) covers the rebuild or clean-up
    and the test's own installs and runs, so two runs sharing the cache neither rebuild
    an environment under each other nor uninstall each other's wheel. The lock goes with
    the process: a killed run leaves no stale lock. A run that waits longer than
    ``wait`` seconds stops with a message naming the environment.
    """
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"{name}.lock", "a") as lock:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise TimeoutError(
                        f"the cached environment {name!r} ({CACHE / name}) is still in "
                        f"use by another test run after {wait:.0f} s") from None
                time.sleep(min(1.0, wait))
        try:
            yield _prepare(name, packages, base=base, torch=torch)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _prepare(name: str, packages: list[str], base: str | None = None,
             torch: str | None = None) -> Path:
    """A bare venv with ``packages`` (made from ``base``, with ``torch`` first: see
    :func:`create`), kept in ``CACHE`` and restored to exactly them.

    Rebuilt when the package list or the interpreter changes or the environment is older
    than ``MAX_AGE``; otherwise whatever a previous test installed into it is uninstalled
    first. The stamp records how long the build took.
    """
    path = CACHE / name
    python, stamp = path / "bin" / "python", path / "lncourse-stamp.json"
    version = sys.version if base is None else run(
        [base, "-c", "import sys; print(sys.version)"]).stdout
    key = hashlib.sha256(json.dumps([packages, version] + ([torch] if torch else [])
                                    ).encode()).hexdigest()
    try:
        state = json.loads(stamp.read_text())
        fresh = state["key"] == key and time.time() - state["created"] < MAX_AGE
    except (OSError, ValueError, KeyError):
        fresh = False
    if not (fresh and python.exists()):
        start = time.time()
        create(path, packages, base=base, torch=torch)
        stamp.write_text(json.dumps({"key": key, "created": time.time(),
                                     "build_seconds": round(time.time() - start),
                                     "installed": sorted(freeze(python))}))
        return python
    extra = freeze(python) - set(json.loads(stamp.read_text())["installed"])
    if extra:
        run([str(python), "-m", "pip", "uninstall", "-q", "-y", *sorted(extra)])
    return python


def build_wheel(folder: Path) -> Path:
    """The wheel a Colab reader installs, of the checkout's working tree, as the site
    publishes it (``scripts/publish.py``: code only, with the stored results in archives
    beside it), published here at ``folder``'s file URL, so that lncourse downloads its
    results from there as it would from the site."""
    from publish import publish

    shutil.rmtree(folder, ignore_errors=True)
    return Path(publish(folder, base=folder.as_uri())["wheel"])


def colab_stub(folder: Path) -> Path:
    for name, text in COLAB_STUB.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


def execute(python: Path, notebook: Path, out: Path, cwd: Path, pythonpath: Path | None = None,
            timeout: float = 1200, env: dict | None = None, cell_timeout: int = 900) -> None:
    """Execute ``notebook`` with the environment's own kernel; the result goes to ``out``.

    The kernel sees the environment only: no PYTHONPATH but ``pythonpath``, no project
    folder on its path (it starts in ``cwd``), one thread, no widgets (nbclient misses
    cell replies amid widget traffic; see lncourse.plotting.interactive). Downloaded
    results are cached beside ``out`` (``LNCOURSE_CACHE``); ``env`` adds variables.
    """
    extra = env or {}
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "LNCOURSE_INSTALL_SOURCE",
                        "LNCOURSE_RESULTS", "LNCOURSE_CACHE")}
    env["LNCOURSE_CACHE"] = str(out.parent / "lncourse-cache")
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", LNCOURSE_DEVICE="cpu",
               LNCOURSE_NO_WIDGETS="1", PATH=f"{python.parent}:{env.get('PATH', '')}")
    if pythonpath:
        env["PYTHONPATH"] = str(pythonpath)
    env.update(extra)
    driver = out.parent / "execute_notebook.py"
    driver.write_text(DRIVER)
    run([str(python), str(driver), str(notebook), str(out), str(cwd), str(cell_timeout)],
        env=env, cwd=cwd, timeout=timeout)


def errors(nb) -> list[tuple[int, str]]:
    return [(i, out.ename) for i, cell in enumerate(nb.cells) if cell.cell_type == "code"
            for out in cell.get("outputs", []) if out.output_type == "error"]
