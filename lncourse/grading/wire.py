"""The grader's messages: plain data in bounded frames, never pickles.

Every message between the grader's processes (the learner's process and its checker; a
checker and the main grader) is one *frame*: an 8-byte length, then a JSON header and
the raw bytes of any arrays it carries. JSON describes only data (no code, no
references: what is decoded is at most as large as what was received, plus arrays whose
sizes are checked against their bytes). The receiving side enforces every bound:

- a frame longer than the receiver's ``limit`` is refused before it is read;
- its JSON header is at most ``MAX_HEADER`` bytes (arrays travel as raw bytes beside it),
  refused before it is parsed;
- a header nests at most ``MAX_DEPTH`` levels, and one value holds at most ``MAX_ITEMS``
  items, counted before each is built;
- objects of other types decode to one shared stand-in per type name (at most
  ``MAX_TYPES`` names), never a new class per item;
- an array's bytes must be exactly its shape times its item size, and only numeric
  dtypes are accepted.

``encode`` turns a value into a header tree plus blobs; ``decode`` turns them back
(objects of other types become empty stand-ins that carry only their type's name).
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

import numpy as np
import torch

MAX_FRAME = 64 * 2**20      # bytes: the largest message a receiver accepts by default
MAX_DEPTH = 32              # nesting of lists, tuples and dicts in one message
MAX_HEADER = 8 * 2**20      # bytes of a message's JSON header (its arrays are not counted)
MAX_ITEMS = 200_000         # values in one decoded message: lists, tuples, dicts and leaves
MAX_TYPES = 64              # distinct type names of stand-ins for objects of other types
_NUMERIC = "biufc"          # numpy kinds: bool, int, uint, float, complex


class WireError(ValueError):
    """A message that breaks the format or a bound (the sender is at fault)."""


# ------------------------------------------------------------------ values <-> trees
def encode(value: Any, blobs: list[bytes], depth: int = 0) -> Any:
    """``value`` as a JSON-able tree; array bytes are appended to ``blobs``."""
    if depth > MAX_DEPTH:
        raise WireError(f"the answer nests more than {MAX_DEPTH} levels")
    if value is None or isinstance(value, (bool, int, str)):
        return {"k": type(value).__name__ if value is not None else "none", "v": value}
    if isinstance(value, float):
        return {"k": "float", "v": value if math.isfinite(value) else repr(value)}
    if isinstance(value, torch.Tensor):
        t = value.detach()
        meta = t.device.type == "meta"
        if not meta:
            t = t.cpu()
            t = t.to_dense() if t.layout != torch.strided else t     # sparse: its values
            t = t.resolve_conj().resolve_neg().contiguous()
            t = t.float() if t.dtype == torch.bfloat16 else t
            blobs.append(t.numpy().tobytes())
        return {"k": "tensor", "dtype": str(value.dtype).replace("torch.", ""),
                "shape": list(t.shape), "meta": meta, "blob": None if meta else len(blobs) - 1}
    if isinstance(value, np.ndarray) and value.dtype.kind in _NUMERIC:
        if not value.dtype.isnative:       # big-endian on this machine: the same numbers
            value = value.astype(value.dtype.newbyteorder("="))
        blobs.append(np.ascontiguousarray(value).tobytes())
        return {"k": "array", "dtype": value.dtype.str, "shape": list(value.shape),
                "blob": len(blobs) - 1}
    if isinstance(value, np.generic) and value.dtype.kind in _NUMERIC:
        blobs.append(value.tobytes())
        return {"k": "npscalar", "dtype": value.dtype.str, "shape": [], "blob": len(blobs) - 1}
    if isinstance(value, (tuple, list)):
        return {"k": type(value).__name__, "v": [encode(v, blobs, depth + 1) for v in value]}
    if isinstance(value, dict):
        return {"k": "dict", "v": [[encode(k, blobs, depth + 1), encode(v, blobs, depth + 1)]
                                   for k, v in value.items()]}
    return {"k": "other", "type": type(value).__name__[:100]}


def _dtype(name: Any, torch_dtype: bool):
    if torch_dtype:
        dtype = getattr(torch, name, None) if isinstance(name, str) else None
        if not isinstance(dtype, torch.dtype):
            raise WireError(f"not a dtype: {str(name)[:40]!r}")
        return dtype
    try:
        dtype = np.dtype(str(name))
    except TypeError:
        raise WireError(f"not a dtype: {str(name)[:40]!r}") from None
    if dtype.kind not in _NUMERIC:
        raise WireError(f"not a numeric dtype: {dtype}")
    return dtype


def _shape(shape: Any) -> list[int]:
    if not isinstance(shape, list) or len(shape) > 16 or not all(
            type(n) is int and 0 <= n < 2**40 for n in shape):
        raise WireError("a malformed shape")
    return shape


_STAND_INS: dict[str, type] = {}


def _stand_in(name: Any) -> Any:
    """An empty object whose type carries ``name`` (one type per name, shared)."""
    name = str(name or "object")[:100]
    kind = _STAND_INS.get(name)
    if kind is None:
        if len(_STAND_INS) >= MAX_TYPES:
            name, kind = "object", _STAND_INS.get("object")
        if kind is None:
            kind = _STAND_INS[name] = type(name, (), {"__slots__": ()})
    return kind()


def _count(tree: Any, limit: int) -> int:
    """The number of values in ``tree`` (a header's value), without building any; raises
    once it passes ``limit``."""
    n, todo = 0, [tree]
    while todo:
        node = todo.pop()
        n += 1
        if n > limit:
            raise WireError(f"the answer holds more than {limit:,} items (lists, tuples, "
                            "dicts and the values in them); return a tensor instead")
        if isinstance(node, dict):
            items = node.get("v")
            if node.get("k") in ("tuple", "list") and isinstance(items, list):
                todo.extend(items)
            elif node.get("k") == "dict" and isinstance(items, list):
                todo.extend(x for pair in items if isinstance(pair, list) for x in pair)
    return n


def decode(tree: Any, blobs: list[memoryview], used: set | None = None, depth: int = 0) -> Any:
    """The value ``encode`` described. Each blob may be used once; at most ``MAX_ITEMS``
    values are built (counted first)."""
    if used is None or depth == 0:
        _count(tree, MAX_ITEMS)
    used = set() if used is None else used
    if depth > MAX_DEPTH + 1 or not isinstance(tree, dict):
        raise WireError("a malformed message")
    kind = tree.get("k")
    if kind in ("none", "bool", "int", "str"):
        want = {"none": type(None), "bool": bool, "int": int, "str": str}[kind]
        if type(tree.get("v")) is not want:
            raise WireError("a malformed message")
        return tree["v"]
    if kind == "float":
        v = tree.get("v")
        if isinstance(v, str) and v in ("nan", "inf", "-inf"):
            return float(v)
        if type(v) not in (int, float):
            raise WireError("a malformed message")
        return float(v)
    if kind in ("tensor", "array", "npscalar"):
        shape = _shape(tree.get("shape"))
        if kind == "tensor" and tree.get("meta") is True:
            return torch.empty(shape, dtype=_dtype(tree.get("dtype"), True), device="meta")
        index = tree.get("blob")
        if type(index) is not int or not 0 <= index < len(blobs) or index in used:
            raise WireError("a malformed message (an array's bytes are missing or reused)")
        used.add(index)
        if kind == "tensor":
            dtype = _dtype(tree.get("dtype"), True)
            stored = torch.float32 if dtype == torch.bfloat16 else dtype
            np_dtype = torch.empty(0, dtype=stored).numpy().dtype
        else:
            np_dtype = _dtype(tree.get("dtype"), False)
        if math.prod(shape) * np_dtype.itemsize != len(blobs[index]):
            raise WireError("a malformed message (an array's size does not match its bytes)")
        array = np.frombuffer(blobs[index], dtype=np_dtype).reshape(shape).copy()
        if kind == "npscalar":
            return array.reshape(-1)[0] if array.size == 1 else array
        if kind == "array":
            return array
        return torch.from_numpy(array).to(dtype)
    if kind in ("tuple", "list"):
        items = tree.get("v")
        if not isinstance(items, list):
            raise WireError("a malformed message")
        out = [decode(v, blobs, used, depth + 1) for v in items]
        return tuple(out) if kind == "tuple" else out
    if kind == "dict":
        pairs = tree.get("v")
        if not isinstance(pairs, list) or not all(isinstance(p, list) and len(p) == 2
                                                   for p in pairs):
            raise WireError("a malformed message")
        out = {}
        for k, v in pairs:
            key = decode(k, blobs, used, depth + 1)
            try:
                out[key] = decode(v, blobs, used, depth + 1)
            except TypeError:   # an unhashable key
                raise WireError("a malformed message (an unhashable key)") from None
        return out
    if kind == "other":
        return _stand_in(tree.get("type", "object"))
    raise WireError("a malformed message")


# ------------------------------------------------------------------ frames on a file descriptor
def pack(message: dict, blobs: list[bytes] = ()) -> bytes:
    """One frame: the JSON ``message`` (its "blobs" key lists the blob sizes) and blobs."""
    header = json.dumps({**message, "blobs": [len(b) for b in blobs]},
                        allow_nan=False).encode()
    body = len(header).to_bytes(4, "big") + header + b"".join(blobs)
    return len(body).to_bytes(8, "big") + body


def unpack(body: bytes | memoryview) -> tuple[dict, list[memoryview]]:
    view = memoryview(body)
    if len(view) < 4:
        raise WireError("a truncated message")
    size = int.from_bytes(view[:4], "big")
    if size > len(view) - 4:
        raise WireError("a truncated message")
    if size > MAX_HEADER:
        raise WireError(f"a message whose header is {size:,} bytes, more than the "
                        f"{MAX_HEADER:,} allowed (return a tensor, not a long list)")
    try:
        header = json.loads(bytes(view[4:4 + size]))
    except (ValueError, RecursionError):
        raise WireError("a message that is not JSON") from None
    sizes = header.get("blobs") if isinstance(header, dict) else None
    if not isinstance(sizes, list) or not all(type(n) is int and n >= 0 for n in sizes) \
            or sum(sizes) != len(view) - 4 - size:
        raise WireError("a malformed message (its arrays' sizes do not add up)")
    blobs, at = [], 4 + size
    for n in sizes:
        blobs.append(view[at:at + n])
        at += n
    return header, blobs


def write_frame(fd: int, frame: bytes) -> None:
    view = memoryview(frame)
    while view:
        view = view[os.write(fd, view):]


def _read_exactly(fd: int, n: int) -> bytes:
    parts, left = [], n
    while left:
        chunk = os.read(fd, min(left, 2**20))
        if not chunk:
            raise EOFError
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def read_frame(fd: int, limit: int = MAX_FRAME) -> tuple[dict, list[memoryview]]:
    """One frame from ``fd`` (blocking); refuses one longer than ``limit`` unread."""
    n = int.from_bytes(_read_exactly(fd, 8), "big")
    if n > limit:
        raise WireError(f"a message of {n:,} bytes, more than the {limit:,} allowed")
    return unpack(_read_exactly(fd, n))


def send(fd: int, message: dict, **values: Any) -> None:
    """``message`` with ``values`` encoded as plain data (keys of the header)."""
    blobs: list[bytes] = []
    trees = {k: encode(v, blobs) for k, v in values.items()}
    total = sum(map(len, blobs))
    if total > MAX_FRAME - 2**20:
        raise WireError(f"the answer is larger than {MAX_FRAME // 2**20} MB")
    write_frame(fd, pack({**message, **trees}, blobs))
