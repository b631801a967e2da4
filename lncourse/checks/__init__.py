"""Exercise checks: ``check_<function>(fn)`` judges a learner's function ``<function>``.

Each compares the function with a reference computed in float64 (or, where the exercise
asks for a property, checks that property) on fixed and edge-case inputs, prints one
line when it passes and returns None, and raises ``AssertionError`` naming the likely
mistake when it fails. ``hidden=True`` adds teacher-only inputs (used by the autograder,
``python -m lncourse.grading.grade --hidden``). Calls the exercise forbids (for example
``F.layer_norm`` when the exercise is to write LayerNorm) stop with a message, and so
does a call that runs past a time limit.

The references and the known mistakes are not here: they are the teacher's key
(``lncourse.checks.key``, never published). On the visible inputs a check compares
with their outputs, stored in ``expected/<module>.pt`` (``python -m
lncourse.checks.key.store`` writes them); on the teacher-only inputs it imports the key,
which only the teacher's checkout holds.

One module per chapter, named as the chapter's folder: a lesson imports its own
(``from lncourse.checks import geometry as checks``) and loads no other chapter's.
``lncourse.checks.check_<function>`` finds any chapter's check (the grader's way), loading
the chapters' modules the first time one is asked for.
"""

import importlib

from lncourse.checks._core import assert_signature, configure, run_check  # noqa: F401

CHAPTERS = ("geometry", "selectability", "majority", "nope", "norms")


def __getattr__(name: str):
    if name.startswith("check_"):
        for chapter in CHAPTERS:
            module = importlib.import_module(f"lncourse.checks.{chapter}")
            if hasattr(module, name):
                return getattr(module, name)
    raise AttributeError(f"module 'lncourse.checks' has no attribute {name!r}")


def __dir__() -> list[str]:
    names = set(globals())
    for chapter in CHAPTERS:
        names.update(n for n in dir(importlib.import_module(f"lncourse.checks.{chapter}"))
                     if n.startswith("check_"))
    return sorted(names)
