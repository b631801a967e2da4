"""Taking a submitted file in, before anything reads it as a notebook.

A path is read only if it is a regular file of bounded size (:func:`read_regular`: no
symbolic link, FIFO, device or folder, opened without following or blocking, checked on
what was opened), and its JSON only if it has the shape of a notebook the grader can
read quickly (:func:`shape_problem`); anything else is :class:`Refused` or named.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

__all__ = ["MAX_BYTES", "MAX_CODE_CELLS", "MAX_SOURCE", "Refused", "read_regular",
           "shape_problem"]

MAX_BYTES = 32 * 2**20      # a notebook file larger than this is refused
MAX_CODE_CELLS = 2000       # so is one with more code cells than this,
MAX_SOURCE = 2 * 2**20      # or more characters of code than this


def shape_problem(nb) -> str | None:
    """Why ``nb`` is not a notebook the grader can read, or None."""
    if not isinstance(nb, dict):
        return f"the file holds a JSON {type(nb).__name__}, not a notebook (an object)"
    if not isinstance(nb.get("metadata", {}), dict):
        return "its metadata is not a JSON object"
    cells = nb.get("cells")
    if not isinstance(cells, list):
        return "its cells are not a list" if "cells" in nb else "it has no cells"
    if not all(isinstance(c, dict) for c in cells):
        return "some of its cells are not JSON objects"
    code = [c for c in cells if c.get("cell_type") == "code"]
    if len(code) > MAX_CODE_CELLS:
        return f"it has {len(code):,} code cells, more than the {MAX_CODE_CELLS:,} the grader reads"
    total = 0
    for number, c in enumerate(code, 1):
        source = c.get("source", "")
        if not (isinstance(source, str) or isinstance(source, list)
                and all(isinstance(line, str) for line in source)):
            return f"the source of code cell {number} is not text"
        total += len(source) if isinstance(source, str) else sum(map(len, source))
        if not isinstance(c.get("metadata", {}), dict):
            return f"the metadata of code cell {number} is not a JSON object"
        meta = c.get("metadata", {}).get("lncourse", {})
        if not isinstance(meta, dict) or not isinstance(meta.get("exercise", ""), str):
            return f"the exercise label of code cell {number} is not text"
    if total > MAX_SOURCE:
        return f"it holds {total:,} characters of code, more than the {MAX_SOURCE:,} allowed"
    return None


_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def read_regular(path: str | Path, limit: int = MAX_BYTES) -> bytes:
    """The bytes of ``path`` if it is a regular file of at most ``limit`` bytes.

    Opened without following a final symbolic link (``O_NOFOLLOW``) and without blocking
    on a FIFO (``O_NONBLOCK``); what was opened is checked with ``fstat`` (no race between
    a check and the read), and at most ``limit + 1`` bytes are read. The folder holding it
    must not be a symbolic link either (an LMS's folder download: one folder per student).
    Raises ``Refused`` naming what the file is otherwise."""
    path = Path(path)
    try:
        if path.parent.is_symlink():
            raise Refused(f"its folder {path.parent.name!r} is a symbolic link, not a "
                          "submission's own folder")
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
                     | getattr(os, "O_NOCTTY", 0))
    except OSError as err:
        if err.errno == errno.ELOOP:
            target = os.readlink(path) if path.is_symlink() else "?"
            raise Refused(f"it is a symbolic link (to {target[:200]!r}), not a file handed "
                          "in") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Refused(f"it is {_kind(info.st_mode)}, not a regular file")
        if info.st_size > limit:
            raise Refused(f"it holds {info.st_size:,} bytes, more than the {limit:,} allowed")
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(fd, min(2**20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > limit:
            raise Refused(f"it grew past the {limit:,} bytes allowed while it was read")
        return b"".join(chunks)
    finally:
        os.close(fd)


class Refused(ValueError):
    """A submitted path that is not a regular file the grader reads."""
