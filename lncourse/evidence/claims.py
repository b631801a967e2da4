"""Sentences tied to evidence, and the ledger of every number a chapter reports (every
chapter).

Two things keep a chapter's prose and numbers from drifting away from its stored results:

* A :class:`Claim` is one sentence that states a comparison, an ordering or an effect,
  built by code from the stored results: ``text`` carries the numbers it rests on,
  ``values`` holds them unformatted, and ``holds`` says whether the results support it.
  A chapter prints its claims (:func:`markdown`); a test asserts that each one holds, and
  that each fails on contrary evidence.
* A **ledger** of reported numbers, ``results/<chapter>/reported.json``: every number the
  chapter prints or glues from a stored file, under a stable name, written by the
  chapter's report command with the usual provenance. A test recomputes the numbers
  from the stored files and compares them with the ledger (:func:`compare`): editing
  a stored measurement that any reported number depends on, or the ledger itself, fails
  it. A change that is meant (a new run) shows up as a diff of the ledger, in review.

How a chapter plugs in (AUTHORING.md, "Numbers and claims"): write
``reported(stored...) -> dict`` (names -> numbers, strings or claims) and a ``main``
that calls :func:`write_ledger`; add a test that calls :func:`compare` on it; build the
chapter's sentences from :class:`Claim` objects or glue the ledger's values.
"""

from __future__ import annotations

import functools
import math
import numbers
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["Claim", "flatten", "compare", "write_ledger", "ledger_main", "load_ledger", "markdown",
           "check_claims", "ledger_file", "quote"]


@dataclass(frozen=True)
class Claim:
    """One sentence of a chapter, computed from stored results.

    ``key`` names it (stable: tests and the ledger refer to it); ``text`` is the sentence
    with its numbers; ``holds`` is True when the results support it, False when they do
    not, None while a run it needs is still going (the text then says so); ``values``
    are the numbers the sentence states, unrounded, for the ledger.
    """

    key: str
    text: str
    holds: bool | None
    values: dict = field(default_factory=dict)

    def __post_init__(self):   # a numpy bool from a comparison becomes a plain one
        if self.holds is not None:
            object.__setattr__(self, "holds", bool(self.holds))


def _number(x):
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, numbers.Integral):
        return int(x)
    if isinstance(x, numbers.Real):
        return float(x)
    return x


def flatten(tree, prefix: str = "") -> dict:
    """Nested dicts, lists, tuples, arrays and claims -> ``{"a/b/0": value}``, values
    plain floats, ints, bools, strings or None. A claim gives ``key/text``, ``key/holds``
    and ``key/values/...``."""
    out: dict = {}
    join = (lambda k: f"{prefix}/{k}") if prefix else str
    if isinstance(tree, Claim):
        out[join("text")] = tree.text
        out[join("holds")] = None if tree.holds is None else bool(tree.holds)
        out.update(flatten(tree.values, join("values")))
    elif isinstance(tree, dict):
        for k, v in tree.items():
            out.update(flatten(v, join(k)))
    elif isinstance(tree, (list, tuple, np.ndarray)):
        for i, v in enumerate(np.asarray(tree, dtype=object).tolist()
                              if isinstance(tree, np.ndarray) else tree):
            out.update(flatten(v, join(i)))
    else:
        out[prefix] = _number(tree)
    return out


def compare(computed: dict, stored: dict) -> list[str]:
    """What differs between numbers recomputed now (flattened or not) and a ledger's
    ``numbers``: one line per missing, extra or different entry; empty if they agree.
    Floats agree at the precision a page prints them (:func:`lncourse.tolerance.
    reported_agree`: half a unit in the fourth significant figure), so a last-bit
    difference from another CPU passes and an edit by a printed unit fails; everything
    else agrees only when equal."""
    from lncourse.tolerance import reported_agree

    a, b = flatten(computed), stored
    lines = [f"{k}: reported, not recomputed" for k in sorted(b.keys() - a.keys())]
    lines += [f"{k}: recomputed, not in the ledger" for k in sorted(a.keys() - b.keys())]
    for k in sorted(a.keys() & b.keys()):
        x, y = a[k], b[k]
        if isinstance(x, float) and isinstance(y, (int, float)) and not isinstance(y, bool):
            same = reported_agree(x, float(y))
        else:
            same = x == y and type(x) is type(y)
        if not same:
            lines.append(f"{k}: recomputed {x!r}, ledger {y!r}")
    return lines


def write_ledger(path: str | Path, computed: dict, config: dict, command: str,
                 wall_seconds: float = 0.0, allow_dirty: bool = False) -> Path:
    """Write the ledger of a chapter's reported numbers (with provenance: ``command``, the
    commit, ``wall_seconds`` of the recomputation) to ``path``; refused from a modified
    checkout unless ``allow_dirty``."""
    from lncourse.results import git_commit, store_run

    started = {"command": command.strip(), "git_commit": git_commit()}
    return store_run(path, {"config": config, "numbers": flatten(computed)}, "cpu", wall_seconds,
                     started, device_note="computed from stored results",
                     allow_dirty=allow_dirty)


def ledger_main(module: str, description: str, path: str | Path, compute,
                argv: list[str] | None = None) -> Path:
    """The command line of a chapter's ledger (``python -m <module> [--allow-dirty]``):
    ``compute()`` returns (numbers, sources); the ledger is written with the time it took."""
    import argparse
    import time

    from lncourse.results import command_line

    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=description)
    parser.add_argument("--allow-dirty", action="store_true",
                        help="write from a modified checkout (refused otherwise)")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    numbers, sources = compute()
    return write_ledger(path, numbers, {"sources": sources}, command_line(module, argv),
                        time.perf_counter() - t0, allow_dirty=args.allow_dirty)


def load_ledger(path: str | Path) -> dict:
    """The ``numbers`` of a ledger."""
    from lncourse.results import load_result

    return load_result(path)["numbers"]


def ledger_file(name: str) -> Path:
    """The file of a ledger named as a page quotes it: ``nope`` is
    ``results/nope/reported.json``, ``norms.majority`` is
    ``results/norms/majority_reported.json``."""
    from lncourse.results import RESULTS_DIR

    folder, _, sub = name.partition(".")
    if not re.fullmatch(r"[a-z_]+", folder) or (sub and not re.fullmatch(r"[a-z_]+", sub)):
        raise ValueError(f"{name!r} is not a ledger's name (a results folder, as 'nope', "
                         f"or folder.part, as 'norms.majority')")
    return RESULTS_DIR / folder / (f"{sub}_reported.json" if sub else "reported.json")


@functools.lru_cache(maxsize=None)
def _numbers(path: Path) -> dict:
    return load_ledger(path)


# a format spec as format() reads it: fill and alignment, sign, width, grouping, precision
_FORMAT = re.compile(r"(?:.?[<>=^])?[+\- ]?#?0?\d*[,_]?(?:\.\d+)?[bcdeEfFgGnosxX%]?")


def quote(spec: str) -> str:
    """A ledger's entry as a page prints it: ``spec`` is ``<ledger>/<key>[:<format>]``
    (the ``{ledger}`` role's text, e.g. ``nope/decode/depth0:.1f``); the value formatted
    with ``format`` (unformatted: ``str``). An unknown ledger or key is an error naming
    the nearest keys, so a page cannot print a number its ledger does not hold."""
    name, _, rest = spec.partition("/")
    if not rest:
        raise ValueError(f"{{ledger}}`{spec}`: expected <ledger>/<key>[:<format>]")
    path = ledger_file(name)
    if not path.exists():
        raise FileNotFoundError(f"{{ledger}}`{spec}`: no ledger at {path}")
    numbers = _numbers(path)
    key, sep, fmt = rest.rpartition(":")
    if rest in numbers or not sep or not fmt or not _FORMAT.fullmatch(fmt):
        key, fmt = rest, ""          # a key with a colon of its own, unformatted
    if key not in numbers:
        import difflib

        near = difflib.get_close_matches(key, list(numbers), n=3)
        raise KeyError(f"{{ledger}}`{spec}`: {path.name} of {path.parent.name} has no entry "
                       f"{key!r}" + (f"; nearest: {near}" if near else ""))
    value = numbers[key]
    if value is None:
        raise ValueError(f"{{ledger}}`{spec}`: the entry is empty (None)")
    return format(value, fmt) if fmt else str(value)


def check_claims(claims: list[Claim]) -> list[str]:
    """The keys of claims that do not hold (False), for a test's message."""
    return [c.key for c in claims if c.holds is False]


def markdown(claims: list[Claim]) -> str:
    """The claims as a Markdown list; one the results do not support says so in bold,
    one waiting for a run says it is pending."""
    mark = {None: " *(pending)*", True: "", False: " **Not supported by the stored results.**"}
    return "\n".join(f"- {c.text}{mark[c.holds]}" for c in claims)
