"""A teacher's own exercises: a function exercise defined in a file beside the class.

The file is Python the teacher writes; it calls ``exercise`` once per exercise::

    import torch
    from lncourse.grading.teacher import exercise, case

    g = torch.Generator().manual_seed(7)
    exercise(
        "softmax_rows", params=("x",),
        reference=lambda x: torch.softmax(x, dim=-1),
        cases=[case(torch.randn(3, 5, generator=g, dtype=torch.float64)),
               case(torch.tensor([[1000.0, 0.0]], dtype=torch.float64))],
        mistakes=[("softmax over the columns: each row should sum to 1",
                   lambda x: torch.softmax(x, dim=0))],
        title="Softmax by rows")

``reference`` is the right answer (compared within the course's tolerances), or
``property`` judges an answer instead (``property(answer, *args, **kwargs)`` returns
None or True when it holds, else a message saying what is wrong). ``mistakes``: wrong
implementations and the message that names each, tried when an answer fails.
``forbidden``: calls the exercise forbids, dotted name -> the reason shown
(``{"torch.softmax": "write softmax from exp and sum"}``; see ``lncourse.guard``).

Where it runs. The file is read by the grader (``load``, in the teacher's process,
before any submission is read) and its check runs in the checker process, exactly as a
course's check does: only the learner's function runs in the sandbox, answering the
check's calls as plain data. The file's folder is hidden from every learner
(``Assignment.private``), and the file is never copied. A failure names the input by
its number only ("the teacher's input 2 of 4"): the teacher's inputs and the reference's
outputs are never in a student's feedback.
"""

from __future__ import annotations

import contextlib
import copy
import io
import math
import runpy
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["exercise", "case", "Spec", "TeacherError", "load"]


class TeacherError(ValueError):
    """A teacher's file the grader cannot use."""


def case(*args: Any, **kwargs: Any) -> tuple[tuple, dict]:
    """One input: ``case(x, 0.5)`` calls the learner's function as ``f(x, 0.5)``."""
    return args, kwargs


@dataclass(frozen=True)
class Spec:
    function: str
    params: tuple[str, ...]
    cases: tuple = field(repr=False)            # the teacher's inputs: never printed
    reference: Callable | None = field(default=None, repr=False)
    property: Callable | None = field(default=None, repr=False)
    mistakes: tuple = field(default=(), repr=False)
    title: str = ""
    passed: str = "matches the reference"
    file: str = ""
    forbidden: dict = field(default_factory=dict)   # dotted name -> why (lncourse.guard)

    def check(self, fn: Callable, hidden: bool = False) -> None:
        """The check, as ``lncourse.checks.check_<function>``: ``run_check`` on the
        teacher's inputs, each named by its number only. Every input is the teacher's,
        so ``hidden=True`` adds none."""
        if hidden:
            return
        from lncourse.checks import run_check
        run_check(fn, self.function, list(self.params), list(self.cases),
                  reference=self.reference,
                  judge=self._property if self.property is not None else None,
                  passed=self.passed, mistakes=self.mistakes,
                  forbidden=self.forbidden or None, inputs="the teacher's input")

    def _property(self, got, args: tuple, kwargs: dict, precision) -> tuple[bool, float, str]:
        """``property`` as ``run_check``'s judge: (holds, 0, what is wrong)."""
        verdict = self.property(got, *args, **kwargs)
        if verdict is None or verdict is True:
            return True, 0.0, ""
        return False, math.inf, (verdict if isinstance(verdict, str)
                                 else "the property does not hold")


_REGISTRY: list[Spec] | None = None


def exercise(function: str, *, params: Sequence[str], cases: Sequence,
             reference: Callable | None = None, property: Callable | None = None,
             mistakes: Sequence[tuple[str, Callable]] = (), title: str = "",
             passed: str | None = None, forbidden: dict[str, str] | None = None) -> Spec:
    """Declare one exercise (see the module's docstring); checked as it is declared."""
    if not (isinstance(function, str) and function.isidentifier()):
        raise TeacherError(f"exercise({function!r}): the function's name must be a "
                           "Python name")
    if (reference is None) == (property is None):
        raise TeacherError(f"exercise({function!r}): give exactly one of reference= "
                           "and property=")
    for what, f in (("reference", reference), ("property", property)):
        if f is not None and not callable(f):
            raise TeacherError(f"exercise({function!r}): {what} must be a function")
    params = tuple(params) if not isinstance(params, str) else (params,)
    if not params or not all(isinstance(p, str) and p.isidentifier() for p in params):
        raise TeacherError(f"exercise({function!r}): params must name the parameters, "
                           "params=(\"x\", \"eps\")")
    cases = tuple(cases)
    if not cases:
        raise TeacherError(f"exercise({function!r}): give at least one input, cases=[...]")
    for k, c in enumerate(cases, 1):
        if not (isinstance(c, tuple) and len(c) == 2 and isinstance(c[0], tuple)
                and isinstance(c[1], dict)):
            raise TeacherError(f"exercise({function!r}): input {k} is not made by "
                               "case(...)")
    mistakes = tuple(mistakes)
    for k, m in enumerate(mistakes, 1):
        if not (isinstance(m, tuple) and len(m) == 2 and isinstance(m[0], str)
                and m[0].strip() and callable(m[1])):
            raise TeacherError(f"exercise({function!r}): mistake {k} must be a pair "
                               "(\"message\", wrong_function)")
    passed = passed or ("matches the reference" if reference is not None
                        else "has the property asked")
    forbidden = dict(forbidden or {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in forbidden.items()):
        raise TeacherError(f"exercise({function!r}): forbidden maps dotted names to the "
                           "reason shown, {\"torch.softmax\": \"write softmax yourself\"}")
    spec = Spec(function, params, cases, reference, property, mistakes, title, passed,
                forbidden=forbidden)
    if _REGISTRY is not None:
        _REGISTRY.append(spec)
    return spec


def _finite(value) -> bool:
    import torch
    if isinstance(value, torch.Tensor):
        return not value.is_floating_point() or bool(torch.isfinite(value).all())
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, (tuple, list)):
        return all(_finite(v) for v in value)
    return True


def _validate(spec: Spec) -> None:
    """The reference runs on every input, to finite values; each named mistake fails on
    at least one of them (else it could never be named)."""
    if spec.reference is not None:
        for k, (args, kwargs) in enumerate(spec.cases, 1):
            try:
                answer = spec.reference(*copy.deepcopy(args), **copy.deepcopy(kwargs))
            except Exception as err:  # noqa: BLE001 (the teacher's code, reported)
                raise TeacherError(f"the reference raised {type(err).__name__} on input "
                                   f"{k}: {err}") from None
            if not _finite(answer):
                raise TeacherError(f"the reference returns NaN or inf on input {k}")
    from lncourse import checks
    for message, wrong in spec.mistakes:
        checks.configure(tally=None)
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                spec.check(wrong)
        except Exception:  # noqa: BLE001 (it failed an input: it can be named)
            continue
        raise TeacherError(f"the mistake {message[:60]!r} passes every input: add an "
                           "input on which it differs from the reference")


def load(path: str | Path, function: str) -> Spec:
    """The exercise ``function`` declared in the teacher's file ``path``; TeacherError
    with the file, the line and the reason for a file that cannot be used."""
    global _REGISTRY
    path = Path(path)
    if not path.is_file():
        raise TeacherError(f"{path}: no such file")
    _REGISTRY = []
    try:
        runpy.run_path(str(path), run_name="lncourse_teacher")
        found = list(_REGISTRY)
    except TeacherError as err:
        raise TeacherError(f"{path}: {err}") from None
    except SyntaxError as err:
        raise TeacherError(f"{path}, line {err.lineno}: syntax error: {err.msg}") from None
    except Exception as err:  # noqa: BLE001 (the teacher's code, reported)
        frames = [f for f in traceback.extract_tb(err.__traceback__)
                  if Path(f.filename).resolve() == path.resolve()]
        line = f", line {frames[-1].lineno}" if frames else ""
        raise TeacherError(f"{path}{line}: {type(err).__name__}: {err}") from None
    finally:
        _REGISTRY = None
    specs = [s for s in found if s.function == function]
    if not specs:
        declared = ", ".join(s.function for s in found) or "none"
        raise TeacherError(f"{path} declares no exercise({function!r}, ...) (it declares: "
                           f"{declared})")
    if len(specs) > 1:
        raise TeacherError(f"{path} declares exercise({function!r}, ...) twice")
    spec = specs[0]
    try:
        _validate(spec)
    except TeacherError as err:
        raise TeacherError(f"{path}: exercise {function!r}: {err}") from None
    return Spec(**{**spec.__dict__, "file": str(path)})
