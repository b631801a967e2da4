"""A seccomp filter for the learner's process: the system calls a submission never needs
and that reach beyond its sandbox fail with an error (``EPERM``).

Refused: ``socket`` (no new socket of any family: no network, no Unix socket on disk,
no netlink; ``socketpair`` stays), the kernel log (``syslog``), ``ptrace``, new namespaces
(``unshare``, ``setns``, ``clone`` with a namespace flag; ``clone3`` answers ``ENOSYS``,
so the C library falls back to ``clone``), mounts, keyrings, ``bpf``, ``perf_event_open``,
``userfaultfd``, ``io_uring`` (whose operations would pass around this filter), and every
system call of another ABI (x32, 32-bit). The filter is inherited by every process the
learner starts and cannot be removed. ``install()`` applies it to the calling process
(it sets ``PR_SET_NO_NEW_PRIVS``); it returns False on an architecture it does not know.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct

_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
# name: (x86-64, aarch64)
_DENIED = {
    "socket": (41, 198), "syslog": (103, 116), "ptrace": (101, 117),
    "unshare": (272, 97), "setns": (308, 268), "mount": (165, 40), "umount2": (166, 39),
    "pivot_root": (155, 41), "chroot": (161, 51), "add_key": (248, 217),
    "request_key": (249, 218), "keyctl": (250, 219), "bpf": (321, 280),
    "perf_event_open": (298, 241), "userfaultfd": (323, 282), "kexec_load": (246, 104),
    "init_module": (175, 105), "finit_module": (313, 273), "delete_module": (176, 106),
    "process_vm_readv": (310, 270), "process_vm_writev": (311, 271),
    "io_uring_setup": (425, 425), "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427), "open_tree": (428, 428), "move_mount": (429, 429),
    "fsopen": (430, 430), "fsconfig": (431, 431), "fsmount": (432, 432),
    "fspick": (433, 433), "mount_setattr": (442, 442), "pidfd_getfd": (438, 438),
}
_CLONE = (56, 220)
_CLONE3 = (435, 435)
_NAMESPACES = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 \
    | 0x40000000 | 0x00000080      # NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWTIME

_LD_W_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000
_KILL = 0x80000000      # SECCOMP_RET_KILL_PROCESS


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k & 0xFFFFFFFF)


def program(machine: str | None = None) -> bytes | None:
    """The filter's BPF instructions for ``machine`` (default: this one), or None."""
    machine = machine or os.uname().machine
    if machine not in _AUDIT_ARCH:
        return None
    col = 0 if machine == "x86_64" else 1
    denied = sorted({v[col] for v in _DENIED.values()})
    deny = _ERRNO | errno.EPERM
    tail = [  # the shared exits, addressed from the end
        _insn(_RET, 0, 0, _ALLOW),
        _insn(_RET, 0, 0, deny),
        _insn(_RET, 0, 0, _ERRNO | errno.ENOSYS),
        _insn(_RET, 0, 0, _KILL),
    ]
    body = [_insn(_LD_W_ABS, 0, 0, 4)]                        # arch
    body.append(None)                                         # jeq arch (patched below)
    body.append(_insn(_LD_W_ABS, 0, 0, 0))                    # nr
    if machine == "x86_64":
        body.append(("ge", 0x40000000, "deny"))               # x32 system calls
    for nr in denied:
        body.append(("eq", nr, "deny"))
    body.append(("eq", _CLONE3[col], "nosys"))
    body.append(("ne", _CLONE[col], "allow"))
    body.append(_insn(_LD_W_ABS, 0, 0, 16))                   # clone's flags (low word)
    body.append(("set", _NAMESPACES, "deny"))
    body.append(("always", 0, "allow"))
    n = len(body)
    exits = {"allow": n, "deny": n + 1, "nosys": n + 2, "kill": n + 3}
    out = []
    for at, item in enumerate(body):
        following = at + 1
        if item is None:        # another architecture: kill (its numbers mean other calls)
            out.append(_insn(_JEQ, 0, exits["kill"] - following, _AUDIT_ARCH[machine]))
        elif isinstance(item, tuple):
            kind, k, target = item
            jump = exits[target] - following
            if kind == "eq":
                out.append(_insn(_JEQ, jump, 0, k))
            elif kind == "ne":
                out.append(_insn(_JEQ, 0, jump, k))
            elif kind == "ge":
                out.append(_insn(_JGE, jump, 0, k))
            elif kind == "set":
                out.append(_insn(_JSET, jump, 0, k))
            else:
                out.append(_insn(_JEQ, jump, jump, 0))
        else:
            out.append(item)
    return b"".join(out + tail)


class _Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install() -> bool:
    """Apply the filter to this process and its future children (see the module)."""
    code = program()
    if code is None:
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:                        # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
    buffer = ctypes.create_string_buffer(code, len(code))
    fprog = _Fprog(len(code) // 8, ctypes.addressof(buffer))
    if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:     # PR_SET_SECCOMP, FILTER
        raise OSError(ctypes.get_errno(), "PR_SET_SECCOMP")
    return True
