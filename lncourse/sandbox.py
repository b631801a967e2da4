"""Running a learner's code in a process of its own, for the autograder.

``Sandbox`` forks a process that executes the statements a learner's function needs
(see ``lncourse.submission``), under a memory cap, with its printing kept small, and then
answers calls. ``Sandbox.function`` returns a stand-in for the learner's function that
the checks call like any function (``lncourse.checks._guard.call_learner`` knows it):
the arguments go to the learner's process, the answer comes back.

Nothing the learner's code does reaches the process that runs the check: answers cross
as plain data (tensors as bytes, numbers, tuples...), never as pickled objects, so an
answer cannot run code where it is judged, and monkeypatching a check in the learner's
process changes nothing.
"""

from __future__ import annotations

import inspect
import io
import multiprocessing
import os
import pickle
import resource
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .checks._guard import call_learner, timeout_message

MAX_ANSWER_BYTES = 256 * 2**20     # an answer larger than this is refused
MAX_PRINTED = 2000                 # characters of printed output kept


# ------------------------------------------------------------------ plain-data messages
def encode(value: Any, budget: list[int] | None = None) -> dict:
    """``value`` as plain data (dicts, lists, str, bytes, numbers)."""
    budget = budget if budget is not None else [MAX_ANSWER_BYTES]

    def spend(n: int) -> None:
        budget[0] -= n
        if budget[0] < 0:
            raise ValueError(f"the answer is larger than {MAX_ANSWER_BYTES // 2**20} MB")

    if value is None or isinstance(value, (bool, int, float, str)):
        return {"k": type(value).__name__ if value is not None else "none", "v": value}
    if isinstance(value, torch.Tensor):
        t = value.detach()
        meta = t.device.type == "meta"
        if not meta:
            t = t.cpu().contiguous()
        stored = t.float() if t.dtype == torch.bfloat16 and not meta else t
        data = None if meta else stored.numpy().tobytes()
        spend(len(data or b""))
        return {"k": "tensor", "dtype": str(t.dtype).replace("torch.", ""),
                "shape": list(t.shape), "meta": meta, "data": data}
    if isinstance(value, np.ndarray) and value.dtype != object:
        spend(value.nbytes)
        return {"k": "array", "dtype": value.dtype.str, "shape": list(value.shape),
                "data": np.ascontiguousarray(value).tobytes()}
    if isinstance(value, np.generic) and not isinstance(value, np.object_):
        return {"k": "npscalar", "dtype": value.dtype.str, "data": value.tobytes()}
    if isinstance(value, (tuple, list)):
        return {"k": type(value).__name__, "v": [encode(v, budget) for v in value]}
    if isinstance(value, dict):
        return {"k": "dict", "v": [[encode(k, budget), encode(v, budget)] for k, v in value.items()]}
    return {"k": "other", "type": type(value).__name__}


def decode(data: dict) -> Any:
    """The value ``encode`` described (other objects become empty stand-ins of their type)."""
    kind = data["k"]
    if kind in ("none", "bool", "int", "float", "str"):
        return data["v"]
    if kind == "tensor":
        dtype = getattr(torch, data["dtype"])
        if data["meta"]:
            return torch.empty(data["shape"], dtype=dtype, device="meta")
        stored = torch.float32 if dtype == torch.bfloat16 else dtype
        array = np.frombuffer(data["data"], dtype=torch.empty(0, dtype=stored).numpy().dtype)
        return torch.from_numpy(array.copy()).reshape(data["shape"]).to(dtype)
    if kind == "array":
        return np.frombuffer(data["data"], dtype=np.dtype(data["dtype"])).reshape(data["shape"]).copy()
    if kind == "npscalar":
        return np.frombuffer(data["data"], dtype=np.dtype(data["dtype"]))[0]
    if kind in ("tuple", "list"):
        items = [decode(v) for v in data["v"]]
        return tuple(items) if kind == "tuple" else items
    if kind == "dict":
        return {decode(k): decode(v) for k, v in data["v"]}
    return type(str(data["type"]), (), {})()


class _PlainData(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refused {module}.{name}: messages are plain data")


def _send(conn, message: dict) -> None:
    conn.send_bytes(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))


def _receive(conn) -> dict:
    return _PlainData(io.BytesIO(conn.recv_bytes())).load()


# ------------------------------------------------------------------ the learner's process
class _Printed(io.TextIOBase):
    """Keeps the first MAX_PRINTED characters written, counts the rest."""

    def __init__(self):
        self.kept, self.total = [], 0

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        room = MAX_PRINTED - sum(map(len, self.kept))
        if room > 0:
            self.kept.append(text[:room])
        self.total += len(text)
        return len(text)


def _limit_memory(megabytes: int) -> None:
    with open("/proc/self/status") as status:
        used_kb = next(int(line.split()[1]) for line in status if line.startswith("VmSize"))
    cap = used_kb * 1024 + megabytes * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def _describe_function(fn: Any) -> dict:
    if fn is None:
        return {"kind": "missing"}
    if not callable(fn):
        return {"kind": "not callable", "type": type(fn).__name__}
    try:
        params = [[p.name, int(p.kind), p.default is not inspect.Parameter.empty]
                  for p in inspect.signature(fn).parameters.values()]
    except (TypeError, ValueError):
        return {"kind": "builtin", "name": getattr(fn, "__name__", repr(fn))}
    return {"kind": "function", "name": getattr(fn, "__name__", "?"), "params": params}


def _serve(conn, other_end, cells: Sequence[tuple[str, str, Sequence[int]]], function: str,
           memory_mb: int) -> None:
    """The learner's process: run the needed statements, then answer calls."""
    import ast
    import linecache

    other_end.close()              # so that the checker's exit reads as the end of input
    os.environ["LNCOURSE_PROGRESS"] = "0"      # no one watches: no progress bars,
    os.environ["LNCOURSE_NO_WIDGETS"] = "1"    # and no widgets (plotting.interactive)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)            # C-level printing goes nowhere
    printed = _Printed()
    sys.stdout = sys.stderr = printed
    os.chdir(tempfile.mkdtemp(prefix="lncourse-grade-"))
    torch.set_num_threads(1)
    namespace: dict[str, Any] = {"__name__": "__main__"}
    problems = []
    try:
        _limit_memory(memory_mb)
    except (OSError, ValueError, StopIteration):
        pass  # no /proc or no limit settable: run without a cap
    for filename, source, wanted in cells:
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        body = ast.parse(source, filename).body
        for index in wanted:
            try:
                exec(compile(ast.Module([body[index]], []), filename, "exec"), namespace)
            except BaseException as err:  # noqa: BLE001 (the learner's code)
                where = traceback.extract_tb(err.__traceback__)[-1]
                problems.append(f"{type(err).__name__}: {err} ({where.filename}, line {where.lineno})")
    _send(conn, {"ready": True, "problems": problems,
                 "function": _describe_function(namespace.get(function))})
    fn = namespace.get(function)
    while True:
        try:
            request = _receive(conn)
        except EOFError:
            return
        if request["op"] == "printed":
            _send(conn, {"kept": "".join(printed.kept), "total": printed.total})
            continue
        try:
            out, args, kwargs = call_learner(
                fn, decode(request["args"]), decode(request["kwargs"]), name=request["name"],
                where=request["where"], forbidden=decode(request["forbidden"]))
            reply = {"ok": True, "out": encode(out), "args": encode(args),
                     "kwargs": encode(kwargs)}
        except NotImplementedError as err:
            reply = {"ok": False, "type": "NotImplementedError", "message": str(err)}
        except AssertionError as err:
            message = str(err)
            if "can't allocate memory" in message or "out of memory" in message:
                message = (f"{request['name']}: your function ran out of memory (the grader "
                           f"allows {memory_mb} MB) on input ({request['where']})")
            reply = {"ok": False, "type": "AssertionError", "message": message}
        except ValueError as err:  # an answer too large to send
            reply = {"ok": False, "type": "AssertionError",
                     "message": f"{request['name']}: {err} (on input ({request['where']}))"}
        _send(conn, reply)


# ------------------------------------------------------------------ the checker's side
class Sandbox:
    """A process running the statements ``cells`` select, with ``function`` to call.

    ``cells``: (file name, source, indices of the top-level statements to run), in order.
    Everything, from running those statements to the last call, must finish within
    ``seconds``; the process may use ``memory_mb`` megabytes beyond what it starts with.
    """

    def __init__(self, cells, function: str, seconds: float, memory_mb: int = 2048):
        self.function_name, self.limit, self.memory_mb = function, seconds, memory_mb
        self.deadline = time.monotonic() + seconds
        context = multiprocessing.get_context("fork")
        self._conn, child = context.Pipe()
        self._process = context.Process(
            target=_serve, args=(child, self._conn, cells, function, memory_mb), daemon=True)
        self._process.start()
        child.close()
        self.problems: list[str] = []
        self.timed_out = False

    def _wait(self, name: str, where: str) -> dict:
        if not self._conn.poll(max(self.deadline - time.monotonic(), 0.0)):
            self.timed_out = True
            self.close()
            if where is None:
                raise AssertionError(f"{name}: running the cells your function needs did not "
                                     f"finish within the time limit of {self.limit:.2g} s")
            raise AssertionError(timeout_message(name, self.limit, where))
        try:
            return _receive(self._conn)
        except EOFError:
            code = self._process.exitcode
            self._process.join(1)
            code = self._process.exitcode if code is None else code
            how = (f"killed by signal {-code}" + (" (perhaps out of memory)" if code == -9 else "")
                   if code is not None and code < 0 else f"exit code {code}")
            raise AssertionError(f"{name}: the process running your code stopped ({how}) "
                                 + (f"on input ({where})" if where else "while running the "
                                    "cells your function needs")) from None

    def start(self) -> dict:
        """Wait for the needed statements to run; returns what ``function`` is."""
        reply = self._wait(self.function_name, None)
        self.problems = reply["problems"]
        return reply["function"]

    def function(self, info: dict) -> "RemoteFunction":
        return RemoteFunction(self, info)

    def printed(self) -> tuple[str, int]:
        """What the learner's code printed: (the first MAX_PRINTED characters, total)."""
        if not self._process.is_alive():
            return "", 0
        try:
            _send(self._conn, {"op": "printed"})
            if not self._conn.poll(5):
                return "", 0
            reply = _receive(self._conn)
            return reply["kept"], reply["total"]
        except (EOFError, OSError):
            return "", 0

    def close(self) -> None:
        if self._process.is_alive():
            self._process.kill()
        self._process.join(5)
        if not self._conn.closed:
            self._conn.close()


class RemoteFunction:
    """Stands in for the learner's function: same name and signature, runs remotely."""

    def __init__(self, sandbox: Sandbox, info: dict):
        self._sandbox = sandbox
        self.__name__ = info["name"]
        self.__signature__ = inspect.Signature([
            inspect.Parameter(name, inspect._ParameterKind(kind),
                              default=None if has_default else inspect.Parameter.empty)
            for name, kind, has_default in info["params"]])

    def __call__(self, *args, **kwargs):
        return self.lncourse_call(args, kwargs, name=self.__name__, where="a direct call")[0]

    def lncourse_call(self, args: tuple, kwargs: dict, *, name: str, where: str,
                      forbidden: dict | None = None, seconds: float | None = None,
                      limit: float | None = None) -> tuple[Any, tuple, dict]:
        """``call_learner`` for a function in the sandbox; the sandbox's deadline applies."""
        sandbox = self._sandbox
        _send(sandbox._conn, {"op": "call", "name": name, "where": where,
                              "args": encode(tuple(args)), "kwargs": encode(dict(kwargs)),
                              "forbidden": encode(dict(forbidden or {}))})
        reply = sandbox._wait(name, where)
        if not reply["ok"]:
            error = NotImplementedError if reply["type"] == "NotImplementedError" else AssertionError
            raise error(reply["message"])
        return decode(reply["out"]), decode(reply["args"]), decode(reply["kwargs"])
