"""Per-cell timings of executed notebooks, and the check that no execution stalled.

nbclient records, for every cell, when the kernel started it (``iopub.execute_input``)
and when the kernel sent its reply (``shell.execute_reply``). Two numbers follow:

- a cell's *kernel time*: reply minus start;
- the *wait before a cell*: its start minus the previous cell's reply. The client sends
  the next cell as soon as it has the previous reply, so this is normally a few
  milliseconds. A large wait means the client did not see a reply the kernel had sent:
  the stall nbclient showed amid ipywidgets' comm traffic, missing a reply and sitting
  until its cell timeout while the kernel was idle.

``python scripts/execution_report.py [--cache DIR] [NOTEBOOK.ipynb ...]`` prints the
slowest cells of each notebook and exits 1, naming the notebook and the cell, if any
cell waited longer than ``--max-wait`` seconds or any notebook's kernel time exceeds
``--max-notebook`` seconds.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat


@dataclass(frozen=True)
class CellTiming:
    index: int          # position of the cell in the notebook
    first_line: str
    kernel_seconds: float
    wait_before: float  # seconds between the previous cell's reply and this cell's start


def _time(stamp: str) -> float:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def cell_timings(nb: nbformat.NotebookNode) -> list[CellTiming]:
    """The timing of every executed code cell, in order."""
    timings, previous_reply = [], None
    for i, cell in enumerate(nb.cells):
        ex = cell.get("metadata", {}).get("execution", {})
        if cell.cell_type != "code" or "iopub.execute_input" not in ex \
                or "shell.execute_reply" not in ex:
            continue
        start, reply = _time(ex["iopub.execute_input"]), _time(ex["shell.execute_reply"])
        wait = 0.0 if previous_reply is None else max(0.0, start - previous_reply)
        line = next((s for s in cell.source.splitlines() if s.strip()), "")[:70]
        timings.append(CellTiming(i, line, reply - start, wait))
        previous_reply = reply
    return timings


def problems(name: str, timings: list[CellTiming], max_wait: float,
             max_notebook: float) -> list[str]:
    """What is wrong with one notebook's execution, each naming the notebook and cell."""
    found = [f"{name}: cell {t.index} (`{t.first_line}`) started {t.wait_before:.1f} s after "
             "the previous cell's reply; the client missed a reply (a stall)"
             for t in timings if t.wait_before > max_wait]
    total = sum(t.kernel_seconds for t in timings)
    if total > max_notebook:
        slowest = max(timings, key=lambda t: t.kernel_seconds)
        found.append(f"{name}: kernel time {total:.0f} s exceeds {max_notebook:.0f} s "
                     f"(slowest: cell {slowest.index}, `{slowest.first_line}`, "
                     f"{slowest.kernel_seconds:.0f} s)")
    return found


def report(name: str, timings: list[CellTiming], top: int = 3) -> str:
    total = sum(t.kernel_seconds for t in timings)
    slow = sorted(timings, key=lambda t: -t.kernel_seconds)[:top]
    worst_wait = max((t.wait_before for t in timings), default=0.0)
    cells = "; ".join(f"cell {t.index} {t.kernel_seconds:.1f} s" for t in slow)
    return (f"{name}: {len(timings)} cells, kernel {total:.1f} s, longest wait between "
            f"cells {worst_wait:.2f} s; slowest: {cells}")


def cached_seconds(cache_dir: str | Path) -> dict[str, float]:
    """How long the kernel took on each notebook a Jupyter Book build executed, from its
    jupyter-cache. (MyST-NB executes without nbclient's per-cell timings; in the build, a
    stalled cell is named by the watchdog of scripts/build_watch.py instead.)"""
    from jupyter_cache import get_cache

    cache = get_cache(str(cache_dir))
    newest = {}                       # an edited chapter leaves its older records behind
    for record in sorted(cache.list_cache_records(), key=lambda r: r.created):
        newest[Path(record.uri).name] = float(record.data.get("execution_seconds", 0.0))
    return newest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--cache", type=Path, help="a jupyter-cache folder (the site build's)")
    parser.add_argument("--max-wait", type=float, default=20.0)
    parser.add_argument("--max-notebook", type=float, default=300.0,
                        help="a notebook's kernel time over this fails (0: no limit)")
    parser.add_argument("--warn-notebook", type=float, default=0.0,
                        help="a notebook's time over this is a warning only: a busy "
                             "machine is slow, not broken (the site build uses this)")
    args = parser.parse_args(argv)
    if args.warn_notebook and "--max-notebook" not in (argv or sys.argv[1:]):
        args.max_notebook = 0.0
    notebooks = {str(p): nbformat.read(p, as_version=4) for p in args.notebooks}
    if not notebooks and not args.cache:
        parser.error("give notebooks or --cache")
    found = []
    for name, seconds in sorted((cached_seconds(args.cache) if args.cache else {}).items()):
        if args.max_notebook and seconds > args.max_notebook:
            found.append(f"{name}: the site build took {seconds:.0f} s, over {args.max_notebook:.0f} s")
        elif args.warn_notebook and seconds > args.warn_notebook:
            print(f"WARNING {name}: took {seconds:.0f} s, over its budget of "
                  f"{args.warn_notebook:.0f} s (slow, not stalled: the watchdog of "
                  "scripts/build_watch.py stops a stalled notebook)", file=sys.stderr)
    for name, nb in sorted(notebooks.items()):
        timings = cell_timings(nb)
        if not timings:
            found.append(f"{name}: no cell carries execution timings")
            continue
        print(report(name, timings))
        found += problems(name, timings, args.max_wait, args.max_notebook or float("inf"))
    for line in found:
        print("FAIL", line, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
