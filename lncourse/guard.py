"""Calling a learner's function: forbidden calls, a time limit, and errors that speak.

``call_learner`` runs the function once. A call that the exercise forbids (for example
``F.layer_norm`` in an exercise that asks to build LayerNorm) is replaced, for the
duration of the call, by one that stops with a message; a call that runs past the time
limit is stopped; every error the function raises becomes an ``AssertionError`` that
says so, except the ``NotImplementedError`` of an unfinished stub, which propagates
unchanged so that an unfinished exercise reads as unfinished.

The autograder runs learners' code in another process: its stand-in for the function
has a method ``lncourse_call`` with the signature of ``call_learner``, which is used
instead (see ``lncourse.grading.sandbox``).
"""

from __future__ import annotations

import contextlib
import linecache
import pkgutil
import signal
import threading
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Any

STUB_MESSAGE = "Exercise: replace this line with your code"


class _Stop(BaseException):
    """Raised inside the learner's code to stop it. A BaseException, so that a learner's
    ``except Exception`` does not swallow it."""


class ForbiddenCall(_Stop):
    def __init__(self, path: str):
        super().__init__(path)
        self.path = path


class TimeLimit(_Stop):
    pass


# --------------------------------------------------------------------- forbidden calls
def _owner_and_attribute(path: str) -> tuple[Any, str]:
    owner, _, attribute = path.rpartition(".")
    return pkgutil.resolve_name(owner), attribute


class _Forbidden:
    """Stands in for a forbidden callable: calling it, or anything reached from it
    (``torch.ops.aten.native_layer_norm.default``), raises ``ForbiddenCall``."""

    def __init__(self, path: str):
        self._path = path

    def __call__(self, *args, **kwargs):
        raise ForbiddenCall(self._path)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return self


# operators that compute what a forbidden one computes: forbidding the key forbids them
# too (instance and batch norm normalise over an axis as LayerNorm does, after a reshape)
EQUIVALENT_OPS = {
    "aten.native_layer_norm": ("aten.native_batch_norm", "aten._native_batch_norm_legit",
                               "aten._native_batch_norm_legit_no_training",
                               "aten._native_batch_norm_legit_functional",
                               "aten._batch_norm_with_update", "aten._batch_norm_no_update",
                               "aten.batch_norm", "aten.instance_norm"),
}


def _op_guard(ops: dict[str, str]):
    """A dispatch mode that stops the ATen operators ``ops`` ("aten.native_layer_norm"),
    whichever Python route reaches them (``torch.ops.aten``, ``F.group_norm``, ...)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Guard(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = str(func).rsplit(".", 1)[0] if str(func).count(".") > 1 else str(func)
            if name in ops:
                raise ForbiddenCall(ops[name])
            return func(*args, **(kwargs or {}))

    return Guard()


def _dtype_watch(seen: set):
    """A dispatch mode that adds to ``seen`` the dtype of every tensor an operation makes."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in (out if isinstance(out, (tuple, list)) else (out,)):
                if isinstance(t, torch.Tensor):
                    seen.add(t.dtype)
            return out

    return Watch()


@contextlib.contextmanager
def forbid(paths: Sequence[str], fn: Callable | None = None) -> Iterator[None]:
    """Within the block, calling any of ``paths`` (dotted names) raises ``ForbiddenCall``.

    The attribute is replaced where it is defined, and so is every global and closure
    variable of ``fn`` bound to the same object, which catches
    ``from torch.nn.functional import layer_norm`` too. A path "aten.NAME" forbids the
    ATen operator NAME itself, at the dispatcher, by whatever route it is called.
    """
    namespace = getattr(fn, "__globals__", {})
    cells = getattr(fn, "__closure__", None) or ()
    undo: list[Callable[[], None]] = []
    ops = {p: p for p in paths if p.startswith("aten.")}
    for key in [p for p in ops if p in EQUIVALENT_OPS]:
        for op in EQUIVALENT_OPS[key]:
            ops.setdefault(op, key)
    guard = _op_guard(ops) if ops else contextlib.nullcontext()
    try:
        for path in paths:
            if path in ops:
                continue
            try:
                owner, attribute = _owner_and_attribute(path)
                original = getattr(owner, attribute)
            except (ImportError, AttributeError, ValueError):
                continue          # not in this version of PyTorch: nothing to forbid
            stop = _Forbidden(path)

            setattr(owner, attribute, stop)
            undo.append(lambda o=owner, a=attribute, v=original: setattr(o, a, v))
            for name, value in list(namespace.items()):
                if value is original:
                    namespace[name] = stop
                    undo.append(lambda n=name, v=original: namespace.__setitem__(n, v))
            for cell in cells:
                try:
                    bound = cell.cell_contents
                except ValueError:  # an empty cell
                    continue
                if bound is original:
                    cell.cell_contents = stop
                    undo.append(lambda c=cell, v=original: setattr(c, "cell_contents", v))
        with guard:
            yield
    finally:
        for restore in reversed(undo):
            restore()


# --------------------------------------------------------------------- time limit
@contextlib.contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Raise ``TimeLimit`` inside the block after ``seconds`` (main thread, POSIX only)."""
    usable = (seconds is not None and hasattr(signal, "setitimer")
              and threading.current_thread() is threading.main_thread())
    if not usable:
        yield
        return

    def ring(signum, frame):
        raise TimeLimit()

    previous = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 1e-3))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# --------------------------------------------------------------------- errors
def _is_stub(err: NotImplementedError) -> bool:
    """True for ``raise NotImplementedError`` written in the learner's code (a stub), not
    for one raised inside PyTorch (an operation on the meta device, say)."""
    if str(err) == STUB_MESSAGE:
        return True
    frames = traceback.extract_tb(err.__traceback__)
    if not frames:
        return False
    last = frames[-1]
    line = last.line or linecache.getline(last.filename, last.lineno)
    return line.strip().startswith("raise NotImplementedError")


def timeout_message(name: str, seconds: float, where: str) -> str:
    return (f"{name}: stopped on input ({where}), when the time limit of {seconds:.2g} s "
            "ran out. A correct solution "
            "takes well under a second: look for a loop that never ends, or work done "
            "element by element in Python that tensor operations can do at once")


def explain(err: BaseException, name: str, where: str, limit: float | None,
            reasons: dict[str, str]) -> BaseException:
    """The exception a check raises for ``err`` raised by the learner's function."""
    if isinstance(err, NotImplementedError) and _is_stub(err):
        return err
    if isinstance(err, ForbiddenCall):
        what = (f"the operator {err.path} (which {err.path.split('.', 1)[1]} and the "
                "functions built on it, such as F.layer_norm or F.group_norm, run)"
                if err.path.startswith("aten.") else err.path)
        return AssertionError(f"{name}: your function called {what}; "
                              f"{reasons.get(err.path, 'this exercise forbids it')}")
    if isinstance(err, TimeLimit):
        return AssertionError(timeout_message(name, limit or 0.0, where))
    if isinstance(err, MemoryError):
        return AssertionError(f"{name}: your function ran out of memory on input ({where})")
    if isinstance(err, AssertionError):
        return AssertionError(f"{name}: your function raised AssertionError (an assert in "
                              f"your code failed) on input ({where})" + (f": {err}" if str(err) else ""))
    message = f"{name}: your function raised {type(err).__name__}: {err} on input ({where})"
    if isinstance(err, NotImplementedError):
        message += (". This NotImplementedError comes from PyTorch, not from the stub"
                    + (": a tensor on the meta device has no values to compute with"
                       if "meta" in str(err).lower() else ""))
    return AssertionError(message)


def call_learner(fn: Callable, args: tuple, kwargs: dict, *, name: str, where: str,
                 forbidden: dict[str, str] | None = None, seconds: float | None = None,
                 limit: float | None = None, seen: set | None = None) -> tuple[Any, tuple, dict]:
    """``fn(*args, **kwargs)`` under the exercise's rules; returns (output, args, kwargs).

    ``seen``: a set that gets the dtype of every tensor the call's operations make (the
    checks ask, to give the float32 hint only where a float32 tensor was made).

    The arguments are returned as they are after the call, so that the caller can tell
    whether the function modified them in place. ``forbidden`` maps dotted names the
    exercise forbids to the reason shown when one is called. ``seconds``: the time
    left for this call; ``limit``: the time limit a timeout message names.
    """
    remote = getattr(fn, "lncourse_call", None)
    if remote is not None:
        return remote(args, kwargs, name=name, where=where, forbidden=forbidden,
                      seconds=seconds, limit=limit, seen=seen)
    forbidden = forbidden or {}
    try:
        watch = _dtype_watch(seen) if seen is not None else contextlib.nullcontext()
        with forbid(list(forbidden), fn), time_limit(seconds), watch:
            out = fn(*args, **kwargs)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as err:  # noqa: BLE001 (the learner's code may raise anything)
        problem = explain(err, name, where, limit or seconds, forbidden)
        if problem is err:
            raise
        # keep the learner's traceback under a crash; a stop of ours needs none
        raise problem from (None if isinstance(err, _Stop) else err)
    return out, args, kwargs
