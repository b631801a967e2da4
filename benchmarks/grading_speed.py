"""Grading a class of 30: learners forked from a pre-started template (today's grader)
against a fresh learner process per submission (the grader before it), side by side in
one run, by the command a teacher runs.

    python benchmarks/grading_speed.py            # prints the table
    python benchmarks/grading_speed.py --store    # and writes results/grading/speed.json

The class is chapter 1's: 10 blank student notebooks, 10 solutions, 10 notebooks with a
known mistake in every exercise (``tests/answers.py``), one of which also loops forever in
exercise 1.2. Each path grades it ``--rounds`` times, the paths alternating, each run a
fresh ``python -m lncourse.grading.grade`` (``--fresh-learners`` for the old path). Wall
times are what a teacher waits; the load average before and after each run is stored with
it, since other work on the machine slows both paths. The infinite loop's exercise alone
takes ``--timeout`` seconds of CPU (the grader's default per call,
``lncourse.grading.grade.TIMEOUT``, unless given), so the class can never take less;
``--timeout`` is passed to both paths, and the limit used is stored.
"""

from __future__ import annotations

import argparse
import copy
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "scripts")]

LOOP = "def centering_matrix(d):\n    while True:\n        pass\n"


def write_class(folder: Path) -> list[str]:
    """The class of 30 (the slow test's class, with exercise 1.2 of s29 an infinite loop)."""
    import nbformat

    from answers import WRONG
    from editions import build_editions
    from myst import read_book
    from lncourse.grading.exercises import chapter

    ch = chapter(1)
    books = build_editions(ROOT / "book" / f"{ch.stem}.md", read_book(ROOT))

    def with_function(nb, label, source):
        nb = copy.deepcopy(nb)
        cell = next(c for c in nb.cells
                    if c.metadata.get("lncourse", {}).get("exercise") == label)
        cell.source = f"{source.strip()}\n\n\n{cell.source.strip().splitlines()[-1]}"
        return nb

    paths = []
    for k in range(30):
        nb = books["student"] if k % 3 == 0 else books["solution"]
        if k % 3 == 2:
            for e in ch.exercises:
                if WRONG[e.function]:
                    wrong = WRONG[e.function]
                    nb = with_function(nb, e.label, wrong[k % len(wrong)].source)
        if k == 29:
            nb = with_function(nb, "ex-centering-matrix", LOOP)
        path = folder / f"s{k:02d}.ipynb"
        nbformat.write(nb, path)
        paths.append(str(path))
    return paths


def grade_once(paths: list[str], out: Path, fresh: bool, timeout: float | None) -> dict:
    command = [sys.executable, "-m", "lncourse.grading.grade", *paths, "--out", str(out),
               "--no-merge"]
    command += ["--fresh-learners"] if fresh else []
    command += ["--timeout", str(timeout)] if timeout else []
    load = os.getloadavg()[0]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"the grader failed:\n{done.stderr[-3000:]}")
    with open(out, newline="") as f:
        import csv
        totals = [int(row["total"]) for row in csv.DictReader(f)]
    return {"wall_s": round(wall, 2), "load_before": round(load, 2),
            "load_after": round(os.getloadavg()[0], 2), "totals": totals}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1, help="runs of each path")
    parser.add_argument("--timeout", type=float, help="--timeout given to the grader")
    parser.add_argument("--store", action="store_true")
    args = parser.parse_args()
    from lncourse.grading.grade import TIMEOUT
    limit = args.timeout or TIMEOUT
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="lncourse-bench-") as tmp:
        folder = Path(tmp) / "class"
        folder.mkdir()
        paths = write_class(folder)
        runs: dict[str, list[dict]] = {"template": [], "fresh": []}
        for r in range(args.rounds):
            order = ("fresh", "template") if r % 2 == 0 else ("template", "fresh")
            for path in order:
                run = grade_once(paths, Path(tmp) / f"{path}.csv", path == "fresh", args.timeout)
                runs[path].append(run)
                print(f"round {r}: {path:8s} {run['wall_s']:6.1f} s  (load average "
                      f"{run['load_before']:.2f} before, {run['load_after']:.2f} after)",
                      flush=True)
    same = runs["template"][0]["totals"] == runs["fresh"][0]["totals"]
    mean = {k: sum(r["wall_s"] for r in v) / len(v) for k, v in runs.items()}
    print(f"30 submissions of chapter 1, one with an infinite loop, on {os.cpu_count()} CPUs "
          f"(time limit {limit:g} s per call):")
    print(f"  fresh learner per submission  {mean['fresh']:6.1f} s")
    print(f"  forked from the template      {mean['template']:6.1f} s   "
          f"({mean['fresh'] / mean['template']:.2f}x faster)")
    print(f"  same grades on both paths: {same}")
    if not same:
        raise SystemExit("the two paths gave different grades")
    if args.store:
        from lncourse.results import RESULTS_DIR, provenance, write_result

        out = {"runs": runs, "mean_wall_s": mean, "speedup": mean["fresh"] / mean["template"],
               "same_grades": same, "cpus": os.cpu_count(),
               "config": {"chapter": 1, "submissions": 30, "loops": 1, "rounds": args.rounds,
                          "timeout": limit, "workers": "default"}}
        command = "python benchmarks/grading_speed.py " + " ".join(sys.argv[1:])
        out["provenance"] = provenance("cpu", time.perf_counter() - start, command=command)
        print("wrote", write_result(RESULTS_DIR / "grading" / "speed.json", out))


if __name__ == "__main__":
    main()
