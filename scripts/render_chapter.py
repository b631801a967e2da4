"""Render one chapter's pages as the site does, for a contributor's loop.

The site's build renders every page; a contributor editing chapter N wants to see its
pages rendered (a broken directive, role, glue or ledger key fails there) without
executing or rendering the rest. This writes a table of contents with the introduction,
the chapter's pages and the bibliography, and the book's configuration with the
execution cache pointed at the site's (``_build/.jupyter_cache``, where
``scripts/preexecute.py`` put the chapter's executed pages), then runs Jupyter Book on
them into ``_build/chapter-N/``. Sphinx's warnings are errors, as on the site, except
those that only say a cross-reference points at a page outside the chapter.

    python scripts/render_chapter.py 3
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
# warnings that only say a reference leads outside the pages rendered here
ELSEWHERE = re.compile(r"undefined label|unknown document|term not in glossary|"
                       r"Failed to create a cross reference|numfig is disabled|"
                       r"no number is assigned|toctree contains reference to "
                       r"excluded document|could not find bibtex key", re.I)


def chapter_pages(n: int, root: Path = ROOT) -> list[str]:
    pages = sorted(p.with_suffix("").relative_to(root).as_posix()
                   for p in (root / "book").glob(f"0{n}_*.md"))
    if not pages:
        raise SystemExit(f"no pages book/0{n}_*.md")
    return pages


def write_inputs(n: int, out: Path, root: Path = ROOT) -> tuple[Path, Path]:
    """The chapter's table of contents and the book's configuration for it, in ``out``."""
    pages = chapter_pages(n, root)
    lesson, *rest = pages
    toc = {"format": "jb-book", "root": "book/intro", "parts": [
        {"caption": "Chapters", "numbered": 1, "chapters": [
            {"file": lesson, **({"sections": [{"file": p} for p in rest]} if rest else {})}]},
        {"caption": "Reference", "chapters": [{"file": "book/bibliography"}]}]}
    config = yaml.safe_load((root / "_config.yml").read_text())
    config.setdefault("execute", {})["cache"] = str(
        root / "_build" / ".jupyter_cache")
    sphinx = config.get("sphinx", {})     # paths as the book's root reads them
    sphinx["local_extensions"] = {name: str(root / path) for name, path in
                                  sphinx.get("local_extensions", {}).items()}
    out.mkdir(parents=True, exist_ok=True)
    (out / "_toc.yml").write_text(yaml.safe_dump(toc, sort_keys=False))
    (out / "_config.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    return out / "_toc.yml", out / "_config.yml"


def problems(log: str) -> list[str]:
    """The warnings and errors of a build's log that count here."""
    lines = [ln for ln in log.splitlines() if re.search(r"WARNING|ERROR", ln)]
    return [ln for ln in lines if not ELSEWHERE.search(ln)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("chapter", type=int, choices=range(1, 6))
    args = ap.parse_args(argv)
    out = ROOT / "_build" / f"chapter-{args.chapter}"
    toc, config = write_inputs(args.chapter, out)
    with open(out / "build.log", "w") as sink:
        done = subprocess.run(
            [str(Path(sys.executable).with_name("jupyter-book")), "build", str(ROOT),
             "--builder", "html", "--toc", str(toc), "--config", str(config),
             "--path-output", str(out), "-n", "--keep-going"],
            cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT, text=True)
    log = (out / "build.log").read_text()
    found = problems(log)
    executed = "Executing notebook" in log
    if done.returncode or found or executed:
        print(f"[render] chapter {args.chapter} FAILED (log: {out / 'build.log'}):")
        for line in found[:40]:
            print(f"[render]   {line}")
        if executed:
            print("[render]   the build executed a page itself: its cache entry is missing")
        if done.returncode and not found:
            print("\n".join(log.splitlines()[-20:]))
        return 1
    print(f"[render] chapter {args.chapter}: {len(chapter_pages(args.chapter))} page(s) "
          f"rendered into {out / '_build' / 'html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
