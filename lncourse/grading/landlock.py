"""Landlock (Linux 5.13+, unprivileged): the fallback's file-system and signal bounds.

``restrict(read, write, listing)`` is called in the learner's process before it starts Python:
from then on (and in everything it starts) it may read only beneath ``read``, write
only beneath ``write``, list the folders ``listing`` (without reading their files), and, with Landlock ABI 6 (Linux 6.12), neither signal processes
outside its own domain nor connect to abstract Unix sockets outside it. Returns the
ABI version applied (0: Landlock is not available; nothing was restricted).
"""

from __future__ import annotations

import ctypes
import os

_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446   # syscall numbers (x86-64, arm64)
_PATH_BENEATH = 1
_EXECUTE, _WRITE_FILE, _READ_FILE, _READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_WRITES = sum(1 << k for k in range(4, 13))   # remove, make char/dir/reg/sock/fifo/block/sym
_REFER, _TRUNCATE, _IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1, 2


class _Ruleset(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def abi() -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    version = libc.syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(int(version), 0)


def restrict(read: list[str], write: list[str], listing: list[str] = ()) -> int:
    """Restrict this process (see the module's docstring). Raises OSError on failure."""
    version = abi()
    if version == 0:
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    fs = _EXECUTE | _WRITE_FILE | _READ_FILE | _READ_DIR | _WRITES
    fs |= (_REFER if version >= 2 else 0) | (_TRUNCATE if version >= 3 else 0)
    fs |= _IOCTL_DEV if version >= 5 else 0
    scoped = (_SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL) if version >= 6 else 0
    ruleset = _Ruleset(fs, 0, scoped)
    size = ctypes.sizeof(_Ruleset) if version >= 6 else 16
    fd = libc.syscall(_CREATE_RULESET, ctypes.byref(ruleset), ctypes.c_size_t(size),
                      ctypes.c_uint32(0))
    if fd < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
    try:
        reading = _EXECUTE | _READ_FILE | _READ_DIR
        for paths, access in ((read, reading), (write, fs), (listing, _READ_DIR)):
            for path in paths:
                try:
                    target = os.open(path, os.O_PATH | os.O_CLOEXEC)
                except OSError:
                    continue
                allowed = access if os.path.isdir(path) else access & ~(_READ_DIR | _WRITES
                                                                         | _REFER)
                rule = _PathBeneath(allowed & fs, target)
                result = libc.syscall(_ADD_RULE, fd, _PATH_BENEATH, ctypes.byref(rule),
                                      ctypes.c_uint32(0))
                os.close(target)
                if result < 0:
                    raise OSError(ctypes.get_errno(), f"landlock_add_rule {path}")
        if libc.prctl(38, 1, 0, 0, 0) != 0:                       # PR_SET_NO_NEW_PRIVS
            raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
        if libc.syscall(_RESTRICT_SELF, fd, ctypes.c_uint32(0)) < 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self")
    finally:
        os.close(fd)
    return version
