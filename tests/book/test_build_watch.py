"""The site build slows down on a busy machine but never fails from it (issue 19).

- The ``ZMQError: Socket operation on non-socket`` of the failed builds is what ipykernel 7
  logs when nbclient's cell timeout fires on a cell that is still running: it is the
  timeout's effect, not a stall's cause.
- ``scripts/build_watch.py`` stops a kernel that idles with a cell pending, naming the
  chapter and the cell, and leaves a busy kernel alone however long it takes, with CPU
  hogs beside it.
"""

import os
import subprocess
import sys
import threading
import time

import jupytext
import nbformat
import pytest

from build_watch import (Watch, _cpu_seconds, install_hook,  # scripts/ (see conftest.py)
                         tree_cpu_seconds, tree_runnable)

pytestmark = pytest.mark.notebooks   # starts kernels; runs after the lanes (scripts/test.sh)


def _execute(nb, tmp_path, timeout=120, watch=None, cwd=None):
    """Run ``nb`` with nbclient in a kernel that reports to ``watch`` (a Watch), looking
    every second; returns the exception nbclient raised, or None."""
    from nbclient import NotebookClient

    ipython_dir = tmp_path / "ipython"
    install_hook(ipython_dir)
    env = {"IPYTHONDIR": str(ipython_dir),
           "LNCOURSE_WATCH_DIR": str(watch.folder) if watch else ""}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    done = threading.Event()

    def look():
        while not done.wait(1.0):
            watch.check()

    looker = threading.Thread(target=look, daemon=True)
    if watch:
        looker.start()
    try:
        NotebookClient(nb, timeout=timeout, kernel_name="python3",
                       resources={"metadata": {"path": str(cwd or tmp_path)}}).execute()
        return None
    except Exception as err:  # noqa: BLE001 (the test inspects it)
        return err
    finally:
        done.set()
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _chapter(tmp_path, *cells):
    """A one-chapter book (``01_demo.md``) whose code cells are ``cells``."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Demo")]
                                  + [nbformat.v4.new_code_cell(c) for c in cells])
    book = tmp_path / "book"
    book.mkdir()
    jupytext.write(nb, book / "01_demo.md", fmt="md:myst")
    return jupytext.read(book / "01_demo.md"), book


@pytest.fixture
def cpu_hogs():
    """Two CPU-bound processes beside the test, as in the issue's reproduction."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    yield hogs
    for hog in hogs:
        hog.kill()
        hog.wait()


def test_the_zmqerror_is_what_a_cell_timeout_leaves(tmp_path, capfd):
    """Root cause of issue 19's ZMQError, on a quiet machine: a cell that outlives
    nbclient's timeout. nbclient gives up and asks the kernel to shut down; ipykernel 7
    closes the shell channel's sockets; the cell then ends and its reply fails.

    nbclient's shutdown first interrupts the kernel (SIGINT). A cell in Python's
    ``time.sleep`` ends at once, and on a loaded machine its reply could leave before
    the shutdown closed the socket (a test run at b1cd9ac failed so). A build's slow
    cell is busy in compiled code and sees no interrupt until it returns; this cell
    ignores SIGINT to behave so, and ends 1 s after the timeout, 1.5 s before the
    kernel manager's SIGTERM (half its ``shutdown_wait_time`` of 5 s)."""
    slow = ("import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
            "time.sleep(3)")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(slow)])
    err = _execute(nb, tmp_path, timeout=2)
    assert type(err).__name__ == "CellTimeoutError"
    assert "Socket operation on non-socket" in capfd.readouterr().err


def test_a_stalled_cell_is_stopped_and_named(tmp_path):
    nb, book = _chapter(tmp_path, "x = 1", "import threading\nthreading.Event().wait()  # never set")
    watch = Watch(tmp_path / "watch", stall_after=4.0, chapters=book)
    watch.folder.mkdir()
    start = time.time()
    err = _execute(nb, tmp_path, timeout=90, watch=watch)
    assert err is not None and type(err).__name__ == "DeadKernelError", err
    assert time.time() - start < 60, "the stall was caught long before the cell timeout"
    stalled = (watch.folder / "STALLED").read_text()
    assert "01_demo.md, cell 2 (`import threading`)" in stalled and "no CPU" in stalled


def test_a_busy_cell_beside_cpu_hogs_is_left_to_finish(tmp_path, cpu_hogs):
    """Slow is not stalled: a cell computing for twice the stall threshold, on a machine
    with two CPU hogs, runs to the end (twice, not three times as before: the hogs take
    the test command's cores while it runs)."""
    nb, book = _chapter(tmp_path, "import time\nt = time.time()\nwhile time.time() - t < 8:\n"
                        "    sum(range(10000))")
    watch = Watch(tmp_path / "watch", stall_after=4.0, chapters=book)
    watch.folder.mkdir()
    assert _execute(nb, tmp_path, timeout=300, watch=watch) is None
    assert not (watch.folder / "STALLED").exists()


def test_a_starved_kernel_is_slow_not_stalled(tmp_path, monkeypatch):
    """A kernel kept off the CPU by processes of higher priority uses no CPU, but its
    thread is runnable (state R): the watchdog leaves it (a build at nice 15 beside busy
    processes was stopped as stalled before this). Its CPU clock is frozen here."""
    import build_watch

    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(1.0)
        assert tree_runnable(busy.pid) and not tree_runnable(idle.pid)
        monkeypatch.setattr(build_watch, "tree_cpu_seconds", lambda pid: 1.0)
        _, book = _chapter(tmp_path, "x = 1")
        watch = Watch(tmp_path / "watch", stall_after=4.0, chapters=book)
        watch.folder.mkdir()
        for proc in (busy, idle):
            (watch.folder / f"{proc.pid}.json").write_text(
                '{"state": "running", "time": 0, "first_line": "x = 1", "sha": "0"}')
        t = time.time()
        for dt in (0, 5, 10):
            watch.check(now=t + dt)
        assert busy.poll() is None, "the starved (runnable) kernel was stopped"
        # SIGKILL is delivered asynchronously: poll() right after the kill raced with it
        # on a loaded machine (stop 39's fresh clone), so wait for the exit
        try:
            idle.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        assert idle.poll() is not None, "the idle kernel was not stopped"
    finally:
        for proc in (busy, idle):
            proc.kill()
            proc.wait()


def test_cpu_time_counts_child_processes():
    child = subprocess.Popen([sys.executable, "-c", "import subprocess, sys; subprocess.run("
                              "[sys.executable, '-c', 'while True: pass'])"])
    try:
        time.sleep(3.0)
        # the grandchild's CPU counts (the child itself only waits)
        assert tree_cpu_seconds(child.pid) - _cpu_seconds(child.pid) > 0.1
    finally:
        for line in subprocess.run(["pgrep", "-P", str(child.pid)], capture_output=True,
                                   text=True).stdout.split():
            os.kill(int(line), 9)
        child.kill()
        child.wait()


def _heaviest_cell_of_chapter_1():
    """Chapter 1's parameters and imports, then its heaviest cell: the folds measured on
    all-MiniLM-L6-v2 (loading the model and running it on real sentences)."""
    from conftest import ROOT

    nb = jupytext.read(ROOT / "book" / "01_layernorm_geometry.md")
    code = [c for c in nb.cells if c.cell_type == "code"]
    heaviest = [c for c in code if "load_minilm(" in c.source]
    assert len(heaviest) == 1, "chapter 1's MiniLM cell moved: update this test"
    nb.cells = code[:2] + heaviest                       # parameters, imports, the cell
    assert "parameters" in code[0].metadata.get("tags", [])
    return nb, ROOT / "book"


@pytest.mark.slow
def test_chapter_1s_heaviest_cell_beside_cpu_hogs_runs_to_the_end(tmp_path, cpu_hogs,
                                                                  monkeypatch):
    """Chapter 1's heaviest cell with two CPU hogs beside it and a watchdog 12 times
    stricter than the build's (10 s without CPU use is a stall): it slows down and
    finishes, nothing is stopped. (Slow since 2026-11-29: the whole chapter beside the
    hogs, below, holds it, and its hogs took about 20 core-seconds of the test command's
    budget; test_a_busy_cell_beside_cpu_hogs_is_left_to_finish stays in the fast suite.)"""
    monkeypatch.setenv("LNCOURSE_NO_WIDGETS", "1")
    monkeypatch.setenv("LNCOURSE_DEVICE", "cpu")
    nb, book = _heaviest_cell_of_chapter_1()
    watch = Watch(tmp_path / "watch", stall_after=10.0, chapters=book)
    watch.folder.mkdir()
    err = _execute(nb, tmp_path, timeout=None, watch=watch, cwd=book)
    assert err is None, err
    assert not (watch.folder / "STALLED").exists()


@pytest.mark.slow
def test_chapter_1_beside_cpu_hogs_runs_to_the_end(tmp_path, cpu_hogs, monkeypatch):
    """The whole of chapter 1 beside two CPU hogs (slow: the hogs take both cores for
    the chapter's length, which the test command's budget does not hold)."""
    from conftest import ROOT

    monkeypatch.setenv("LNCOURSE_NO_WIDGETS", "1")
    monkeypatch.setenv("LNCOURSE_DEVICE", "cpu")
    nb = jupytext.read(ROOT / "book" / "01_layernorm_geometry.md")
    watch = Watch(tmp_path / "watch", stall_after=10.0, chapters=ROOT / "book")
    watch.folder.mkdir()
    err = _execute(nb, tmp_path, timeout=None, watch=watch, cwd=ROOT / "book")
    assert err is None, err
    assert not (watch.folder / "STALLED").exists()
