"""The grader's command line, ``python -m lncourse.grading.grade`` (see ``lncourse.grading.grade``): its
options, their validation, student IDs, and writing the sheets."""

from __future__ import annotations

import argparse
import csv
import re
from pathlib import Path

from lncourse.grading.sheet import atomic_write, feedback, write_csv, write_lms


def student_ids(paths, submissions, roster=None, id_pattern=None) -> dict[str, str]:
    ids = {}
    for path, sub in zip(paths, submissions):
        name = Path(path).name
        found = re.search(id_pattern, name) if id_pattern else None
        ids[str(path)] = ((roster or {}).get(name) or sub.student_id
                          or (found.group(1) if found and found.groups() else None)
                          or name.removesuffix(".ipynb"))
    return ids


def _positive(kind, low):
    def parse(text: str):
        import math

        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value) or value < low or (low == 0 and value == 0):
            raise argparse.ArgumentTypeError(
                f"{text} is out of range: give a finite number {'>' if low == 0 else '>='} {low}")
        return value
    return parse


def read_roster(path: str) -> dict[str, str]:
    """A roster CSV with columns ``file`` and ``student_id``."""
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    if rows and not {"file", "student_id"} <= set(rows[0]):
        raise SystemExit(f"{path}: a roster needs the columns file and student_id")
    return {r["file"]: r["student_id"] for r in rows}

def parser(doc: str, timeout: float, memory_mb: int) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m lncourse.grading.grade", description=doc.split("\n\n")[0])
    p.add_argument("submissions", nargs="+", help="submitted notebooks (.ipynb)")
    p.add_argument("--out", required=True, help="the grade sheet (CSV; merged if it exists)")
    p.add_argument("--lms", help="also write Moodle's CSV grade import here")
    p.add_argument("--feedback", help="folder for one Markdown feedback file per submission")
    p.add_argument("--timeout", type=_positive(float, 0), default=timeout,
                   help=f"seconds allowed per exercise (default {timeout:.0f})")
    p.add_argument("--hidden", action="store_true", help="add the checks' teacher-only inputs")
    p.add_argument("--chapter", help="the class's chapter (default: the one most "
                                     "submissions name)")
    p.add_argument("--memory-mb", type=_positive(int, 64), default=memory_mb,
                   help=f"memory cap per exercise, in MB (default {memory_mb})")
    p.add_argument("--workers", type=_positive(int, 1),
                   help="submissions graded at once (default: twice the CPUs, up to 4)")
    p.add_argument("--roster", help="CSV with columns file and student_id")
    p.add_argument("--id-pattern", help="regular expression whose first group, found in a "
                                        "file name, is the student ID")
    p.add_argument("--no-merge", action="store_true",
                   help="overwrite the sheet instead of merging a regrade into it")
    p.add_argument("--fresh-learners", action="store_true",
                   help="start each submission's learner process afresh instead of forking "
                        "it from a pre-started template (slower; for comparison)")
    return p


def check(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.id_pattern:
        try:
            re.compile(args.id_pattern)
        except re.error as err:
            p.error(f"--id-pattern: {err}")


def write_outputs(ch, graded, args: argparse.Namespace) -> None:
    write_csv(ch, graded, args.out, merge=not args.no_merge)
    if args.lms:
        write_lms(ch, graded, args.lms)
    if args.feedback:
        folder = Path(args.feedback)
        folder.mkdir(parents=True, exist_ok=True)
        names: set[str] = set()
        for g in graded:
            name = re.sub(r"[^\w.-]", "_", g.student_id or Path(g.submission).stem)[:100]
            while name in names:
                name += "_"
            names.add(name)
            atomic_write(folder / f"{name}.md", feedback(ch, g))
