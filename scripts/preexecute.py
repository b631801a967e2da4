"""Execute the book's notebook pages into the build's execution cache, several at once.

Left to itself, jupyter-book executes each notebook page while Sphinx reads it, one
page after another on one core, and the build is the longest chain of the test
command. This script runs first.
For every notebook page of the table of contents it

- reads the page as myst-nb will (``myst_nb.core.read.create_nb_reader``, with the
  book's MyST extensions), so the notebook and its cache key are the ones the build
  looks up;
- skips it if the cache already holds that key (an unchanged page);
- executes it as myst-nb's ``cache`` mode does (``jupyter_cache``'s
  ``single_nb_execution`` in the page's folder, with the book's timeout and
  ``allow_errors``), ``--jobs`` pages at a time, each in a process of its own;
- stores the executed notebook in the cache as myst-nb does.

The build then finds every page in the cache and only renders it; ``build_site.sh``
fails if the build executed any page itself (a cache key that did not match).

A page found in the cache leaves, in MyST-NB 1.4, a copy without outputs in
``_build/jupyter_execute`` (it writes the notebook it read, not the one it merged with
the cache's outputs), where a page it executed leaves the executed notebook. So after
the build ``--write-executed`` writes each page's copy again, merged with its outputs
as MyST-NB rendered it (``tests/book/test_notebooks.py`` reads those outputs).

Pages that share a fast-mode run (``lncourse.modes.shared_checkpoint``: chapters 2 and
3's lessons train it, their replication pages resume it at the last step) run one after
the other in one worker, in the order of the table of contents: two pages at once would
both train it into the same files. The pages that share one are found by the run's name
in their code (``shared_runs``). The longest jobs start first (each page's time from
the cache's last record of it; pages without one first of all, in the order of the
table of contents).

    python scripts/preexecute.py --cache _build/.jupyter_cache --jobs 2
    python scripts/preexecute.py --cache _build/.jupyter_cache --write-executed \
        _build/jupyter_execute
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import os
import re
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
SHARED_RUN = re.compile(r"""shared_checkpoint\(\s*["']([\w-]+)["']""")


def toc_pages(root: Path) -> list[str]:
    """The table of contents' pages, in its order (paths without suffix)."""
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    pages = [toc["root"]]

    def walk(node):
        if isinstance(node, dict):
            if "file" in node:
                pages.append(node["file"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)
    walk({k: v for k, v in toc.items() if k != "root"})
    return pages


def configs(root: Path, cache: Path):
    """myst-nb's and myst-parser's settings as the book's _config.yml gives them."""
    from myst_nb.core.config import NbParserConfig
    from myst_parser.config.main import MdParserConfig

    book = yaml.safe_load((root / "_config.yml").read_text())
    execute, parse = book.get("execute", {}), book.get("parse", {})
    md = MdParserConfig(enable_extensions=set(parse.get("myst_enable_extensions", [])))
    nb = NbParserConfig(execution_mode="cache", execution_cache_path=str(cache),
                        execution_timeout=execute.get("timeout", 30),
                        execution_allow_errors=execute.get("allow_errors", False))
    return md, nb


def read_page(path: Path, md, nb):
    """(notebook, reader) as myst-nb reads the page, or None for a page of prose."""
    from myst_nb.core.read import create_nb_reader

    text = path.read_text(encoding="utf-8")
    reader = create_nb_reader(str(path), md, nb, text)
    return None if reader is None else (reader.read(text), reader)


def _children_cpu() -> float:
    """CPU seconds of this worker's finished children: a page's kernel, once shut down,
    with the processes it reaped. Not the learners bubblewrap starts for the teaching
    page's grading: nobody here reaps them, so that page's CPU is undercounted."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _execute(paths: list[str], root: str, cache: str) -> list[dict]:
    """A worker: execute ``paths`` in order; stop at the first that fails."""
    from jupyter_cache.executors.utils import single_nb_execution
    from traitlets.config import Config

    md, nb_config = configs(Path(root), Path(cache))
    # Kernels talk to this process over local sockets (IPC) in a folder of its own, not
    # over TCP: nothing listens on a port, and ipykernel has no plain-text TCP to warn
    # a reader of on every page. (The sockets are named after the connection file, by
    # an absolute path: the kernel runs in the page's folder.)
    sockets = tempfile.mkdtemp(prefix="lncourse-kernels-")
    out = []
    for p in paths:
        path = Path(p)
        notebook, reader = read_page(path, md, nb_config)
        cpu = _children_cpu()
        over_ipc = Config({"KernelManager": {
            "transport": "ipc",
            "connection_file": os.path.join(sockets, f"kernel-{len(out)}.json")}})
        result = single_nb_execution(notebook, cwd=str(path.parent),
                                     allow_errors=nb_config.execution_allow_errors,
                                     timeout=nb_config.execution_timeout,
                                     meta_override=True, config=over_ipc)
        out.append({"path": p, "notebook": notebook, "seconds": result.time,
                    "cpu": _children_cpu() - cpu,
                    "read_fmt": reader.read_fmt,
                    "error": result.exc_string if result.err is not None else None})
        if result.err is not None:
            break
    shutil.rmtree(sockets, ignore_errors=True)
    return out


def shared_runs(pages: dict[str, str]) -> list[list[str]]:
    """Groups of pages (``pages``: name to text, in order) that name the same shared
    fast-mode run, directly or through another page, each in ``pages``' order; pages
    that share none are left out."""
    group_of: dict[str, int] = {}     # a run's name -> its group
    groups: list[set[str]] = []
    for page, text in pages.items():
        runs = set(SHARED_RUN.findall(text))
        found = sorted({group_of[r] for r in runs if r in group_of})
        if not runs:
            continue
        merged = {page}.union(*(groups[i] for i in found))
        for i in found:
            groups[i] = set()
        groups.append(merged)
        for r in runs | {r for r, i in group_of.items() if i in found}:
            group_of[r] = len(groups) - 1
    order = list(pages)
    return [sorted(g, key=order.index) for g in groups if g]


def plan(root: Path, cache_dir: Path, only: str = "") -> tuple[list[list[str]], int]:
    """The jobs (lists of absolute paths run in order), longest first, and the number
    of notebook pages the cache already holds (``only``: the pages whose path starts so,
    such as ``book/03_``)."""
    from jupyter_cache import get_cache

    md, nb_config = configs(root, cache_dir)
    cache = get_cache(str(cache_dir))
    last = {}   # each page's newest recorded execution time
    for record in sorted(cache.list_cache_records(), key=lambda r: r.created):
        last[record.uri] = (record.data or {}).get("execution_seconds")
    todo, cached, texts = [], 0, {}
    for page in toc_pages(root):
        if not str(page).startswith(only):
            continue
        path = (root / page).with_suffix(".md").resolve()
        read = read_page(path, md, nb_config)
        if read is None:
            continue
        try:
            cache.match_cache_notebook(read[0])
            cached += 1
        except KeyError:
            todo.append((page, str(path)))
            texts[page] = path.read_text(encoding="utf-8")
    groups, pages = [], dict(todo)
    for chain in shared_runs(texts):
        groups.append([pages.pop(p) for p in chain])
    groups += [[path] for path in pages.values()]
    order = {path: i for i, (_, path) in enumerate(todo)}

    def key(group):   # unknown times first, then the longest
        times = [last.get(p) for p in group]
        if any(t is None for t in times):
            return (0, order[group[0]])
        return (1, -sum(times))
    return sorted(groups, key=key), cached


def write_executed(root: Path, cache_dir: Path, out: Path) -> int:
    """Write every notebook page's executed copy, merged with the cache's outputs, to
    ``out/<page>.ipynb``; the number written. A page the cache lacks is an error."""
    import nbformat
    from jupyter_cache import get_cache

    md, nb_config = configs(root, cache_dir)
    cache = get_cache(str(cache_dir))
    written = 0
    for page in toc_pages(root):
        read = read_page((root / page).with_suffix(".md"), md, nb_config)
        if read is None:
            continue
        try:
            _, merged = cache.merge_match_into_notebook(read[0])
        except KeyError:
            raise SystemExit(f"[preexec] {page}: not in the cache {cache_dir}") from None
        target = out / f"{page}.ipynb"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(nbformat.writes(merged), encoding="utf-8")
        written += 1
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT,
                        help="the book's folder (_config.yml, _toc.yml)")
    parser.add_argument("--cache", type=Path, default=None,
                        help="the execution cache (default <root>/_build/.jupyter_cache)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--pages", default="", metavar="PREFIX",
                        help="only the pages whose path starts with PREFIX (book/03_)")
    parser.add_argument("--write-executed", type=Path, metavar="DIR",
                        help="after the build: write each page's executed copy to DIR "
                        "(MyST-NB's jupyter_execute) from the cache, and stop")
    args = parser.parse_args(argv)
    # The cache is the site's: a page executed here (by scripts/chapter.sh, say) is the
    # page the site's build will serve, so it runs as that build does, with the phone's
    # layout of each figure (lncourse.plotting.phone). Without it a contributor's loop
    # left pages in the cache whose figures have no phone layout, and the site test failed.
    os.environ["LNCOURSE_SITE_FIGURES"] = "1"
    root = args.root.resolve()
    cache_dir = (args.cache or root / "_build" / ".jupyter_cache").resolve()
    if args.write_executed:
        n = write_executed(root, cache_dir, args.write_executed)
        print(f"[preexec] wrote {n} executed notebooks to {args.write_executed}")
        return 0
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn
    from jupyter_cache.cache.db import NbProjectRecord

    groups, cached = plan(root, cache_dir, args.pages)
    total = sum(len(g) for g in groups)
    print(f"[preexec] {total} notebook pages to execute, {args.jobs} at a time "
          f"({cached} already in the cache)", flush=True)
    cache = get_cache(str(cache_dir))
    failed, done, t0 = [], 0, time.perf_counter()
    with cf.ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(_execute, g, str(root), str(cache_dir)) for g in groups]
        for future in cf.as_completed(futures):
            if future.cancelled():
                continue
            try:
                results = future.result()
            except Exception as exc:   # a worker that died (killed, out of memory)
                failed.append("a worker")
                print(f"[preexec] FAILED: a worker died ({exc!r})", flush=True)
                continue
            for r in results:
                done += 1
                rel = Path(r["path"]).relative_to(root)
                if r["error"] is not None:
                    failed.append(rel)
                    print(f"[preexec] FAILED {rel} after {r['seconds']:.1f} s:\n"
                          f"{r['error']}", flush=True)
                    for f in futures:
                        f.cancel()
                    continue
                stage = cache.add_nb_to_project(r["path"], read_data=r["read_fmt"])
                NbProjectRecord.remove_tracebacks([stage.pk], cache.db)
                cache.cache_notebook_bundle(
                    CacheBundleIn(r["notebook"], stage.uri,
                                  data={"execution_seconds": r["seconds"]}),
                    check_validity=False, overwrite=True)
                print(f"[preexec] {rel}: {r['seconds']:.1f} s, {r['cpu']:.1f} s of CPU "
                      f"({done} of {total}, "
                      f"{time.perf_counter() - t0:.0f} s in)", flush=True)
    if failed:
        print(f"[preexec] FAILED: {', '.join(map(str, failed))}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
