"""Tell a stalled notebook execution from a slow one, and stop only the stalled one.

A fixed per-cell timeout cannot tell the two apart: on a busy machine a training cell
that takes 250 s on a quiet one can take over 300 s, nbclient's cell timeout
fires, and the build fails although nothing is wrong. (The ``ZMQError: Socket operation
on non-socket`` that ipykernel 7 logs then is a *consequence* of that timeout: nbclient
asks the kernel to shut down, ipykernel closes its shell-channel sockets while the cell is
still running, and the cell's reply, sent when it ends, meets a closed socket. A cell that
outlives nbclient's timeout by a few seconds reproduces it on a quiet machine; see
``tests/book/test_build_watch.py``.)

So the site build runs without a short cell timeout, and this watchdog beside it:

- Every kernel the build starts loads a small IPython start-up file (``install_hook``,
  through ``IPYTHONDIR``) that writes, before and after each cell, a line to
  ``<dir>/<kernel pid>.json``: the cell's first line, its source's hash, running or done.
- The watchdog samples the CPU time of each live kernel and of all its child processes
  (``/proc``). A kernel *running* a cell that uses CPU, or waits for one (a thread in
  state R, kept off the CPU by processes of higher priority), is slow, never stalled, however
  long it takes. A kernel that has used no CPU for ``--stall-after`` seconds while a cell
  runs (a deadlock: a lock, a pipe no one writes), or that finished a cell that long ago
  and is still idle (the client missed the reply), is stalled: the watchdog
  names the notebook and the cell, writes that to ``<dir>/STALLED``, and kills the
  kernel, so the build fails at once with that message instead of waiting.

``python scripts/build_watch.py --dir D --stall-after 120 [--chapters book]`` runs until
killed; ``--install-hook IPYTHONDIR`` writes the start-up file and exits.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
import time
from pathlib import Path

HOOK = '''\
# Written by scripts/build_watch.py: report each cell's start and end to the build's watchdog.
import hashlib as _h, json as _j, os as _o, time as _t

_WATCH = _o.environ.get("LNCOURSE_WATCH_DIR")


def _lncourse_watch(state, source):
    if not _WATCH:
        return
    line = next((s for s in source.splitlines() if s.strip()), "")[:70]
    record = {"state": state, "time": _t.time(), "first_line": line,
              "sha": _h.sha1(source.encode()).hexdigest(), "cwd": _o.getcwd()}
    path = _o.path.join(_WATCH, f"{_o.getpid()}.json")
    with open(path + ".tmp", "w") as f:
        _j.dump(record, f)
    _o.replace(path + ".tmp", path)


def _lncourse_register():
    ip = get_ipython()  # noqa: F821 (defined in IPython start-up files)
    if ip is None or not _WATCH:
        return
    ip.events.register("pre_run_cell", lambda info: _lncourse_watch("running", info.raw_cell))
    ip.events.register("post_run_cell",
                       lambda result: _lncourse_watch("done", result.info.raw_cell))


_lncourse_register()
'''


def install_hook(ipython_dir: str | Path) -> Path:
    """Write the start-up file into ``ipython_dir``'s default profile."""
    startup = Path(ipython_dir) / "profile_default" / "startup"
    startup.mkdir(parents=True, exist_ok=True)
    path = startup / "00-lncourse-watch.py"
    path.write_text(HOOK, encoding="utf-8")
    return path


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                ppid = int(Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(entry.name))
    return kids


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process (all threads), or None if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(pid: int) -> float | None:
    """CPU time of ``pid`` and every live descendant (a cell may run a subprocess)."""
    own = _cpu_seconds(pid)
    if own is None:
        return None
    kids, total, todo = _children(), own, list(_children().get(pid, []))
    while todo:
        child = todo.pop()
        total += _cpu_seconds(child) or 0.0
        todo += kids.get(child, [])
    return total


def _runnable(pid: int) -> bool:
    """Whether any thread of ``pid`` is running or waiting for a CPU (state R)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tasks:
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
            if stat.rsplit(")", 1)[1].split()[0] == "R":
                return True
        except (OSError, IndexError):
            continue
    return False


def tree_runnable(pid: int) -> bool:
    """Whether ``pid`` or a live descendant wants a CPU: a kernel that other processes
    (of higher priority) keep off the CPU uses none, yet is slow, not stalled."""
    kids, todo = _children(), [pid]
    while todo:
        p = todo.pop()
        if _runnable(p):
            return True
        todo += kids.get(p, [])
    return False


def locate(sha: str, first_line: str, chapters: Path) -> str:
    """``<chapter>, cell <index>`` for the cell whose source hashes to ``sha``."""
    try:
        import jupytext
    except ImportError:
        jupytext = None
    for source in sorted(chapters.glob("[0-9][0-9]_*.md")) if jupytext else []:
        nb = jupytext.read(source)
        for i, cell in enumerate(nb.cells):
            if cell.cell_type == "code" and hashlib.sha1(cell.source.encode()).hexdigest() == sha:
                return f"{source.name}, cell {i} (`{first_line}`)"
    return f"a cell beginning `{first_line}`"


class Watch:
    """The watchdog's state: for each kernel, its CPU time when it last used any."""

    def __init__(self, folder: Path, stall_after: float, chapters: Path):
        self.folder, self.stall_after, self.chapters = folder, stall_after, chapters
        self.last_busy: dict[int, tuple[float, float]] = {}   # pid: (cpu seconds, when)

    def check(self, now: float | None = None) -> list[str]:
        """Look once at every kernel; return (and act on) the stalls found."""
        now = time.time() if now is None else now
        stalls = []
        for path in self.folder.glob("[0-9]*.json"):
            pid = int(path.stem)
            try:
                record = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            cpu = tree_cpu_seconds(pid)
            if cpu is None:                    # the kernel has exited
                path.unlink(missing_ok=True)
                self.last_busy.pop(pid, None)
                continue
            seen, since = self.last_busy.get(pid, (None, now))
            # it used CPU, or it waits for one (starved by busier processes): slow
            if seen is None or cpu - seen > 0.5 or tree_runnable(pid):
                self.last_busy[pid] = (cpu, now)
                continue
            idle = now - max(since, record["time"])
            if idle < self.stall_after:
                continue
            where = locate(record["sha"], record["first_line"], self.chapters)
            if record["state"] == "running":
                why = (f"the kernel (pid {pid}) has used no CPU for {idle:.0f} s while running "
                       f"{where}: a stall, not slowness")
            else:
                why = (f"the kernel (pid {pid}) finished {where} {idle:.0f} s ago and has been "
                       "idle since, but no next cell came: the client missed its reply (a stall)")
            stalls.append(why)
            with open(self.folder / "STALLED", "a", encoding="utf-8") as f:
                f.write(why + "\n")
            print(f"[watch] STALL: {why}; stopping that kernel", file=sys.stderr, flush=True)
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
            path.unlink(missing_ok=True)
            self.last_busy.pop(pid, None)
        return stalls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, help="where kernels report their cells")
    parser.add_argument("--stall-after", type=float, default=120.0,
                        help="seconds without CPU use, with a cell pending, that make a stall")
    parser.add_argument("--every", type=float, default=5.0, help="seconds between looks")
    parser.add_argument("--chapters", type=Path, default=Path("book"))
    parser.add_argument("--install-hook", type=Path, metavar="IPYTHONDIR")
    args = parser.parse_args(argv)
    if args.install_hook:
        print(install_hook(args.install_hook))
        return 0
    if args.dir is None:
        parser.error("give --dir (or --install-hook)")
    args.dir.mkdir(parents=True, exist_ok=True)
    watch = Watch(args.dir, args.stall_after, args.chapters)
    while True:
        watch.check()
        time.sleep(args.every)


if __name__ == "__main__":
    sys.exit(main())
