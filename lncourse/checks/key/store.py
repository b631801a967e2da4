"""Write the stored answers of the checks' visible inputs from the teacher's key.

    python -m lncourse.checks.key.store [module ...]

For each check module (all, or those named: ``norms``, ``layernorm_grad``...) it runs
every check in recording mode (``lncourse.checks._core.recording``): the check builds its
visible inputs as always, and instead of judging a function records, for each input,
the reference's answer and its tolerance and each known mistake's answer and its
tolerance, with the mistakes' messages. They go to ``lncourse/checks/expected/<module>.pt``,
which the published package carries and the checks read on their visible inputs.
Run it after changing a check's visible inputs, its reference or its mistakes, then
commit the file; ``tests/checks/test_key.py`` recomputes every stored answer and fails
while one is out of date.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

import torch

from lncourse.checks._core import EXPECTED, recording

# the check modules, each with its key module of the same name
MODULES = ("layernorm", "layernorm_grad", "selectability", "majority", "majority_stats",
           "nope", "norms")


def record(module: str) -> dict:
    """{function: {"calls", "messages", "cases"}}: every check of ``module`` run in
    recording mode on its visible inputs (the grader's key unset)."""
    checks = importlib.import_module(f"lncourse.checks.{module}")
    with recording() as recorded:
        for name in checks.__all__:
            getattr(checks, name)(None)
    return recorded


def store(module: str, folder: Path = EXPECTED) -> Path:
    """Record ``module``'s answers and write them to ``folder/<module>.pt``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{module}.pt"
    torch.save(record(module), path)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", metavar="module",
                        help=f"check modules to store (default: all of {', '.join(MODULES)})")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.modules) - set(MODULES))
    if unknown:
        parser.error(f"no check module {', '.join(unknown)}; the modules: {', '.join(MODULES)}")
    for module in args.modules or MODULES:
        path = store(module)
        print(f"[store] {path} ({path.stat().st_size / 1e3:.0f} kB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
