"""One control group per submission (the grader's sandbox, :mod:`lncourse.grading.contain`):
one memory limit for all of a submission's processes and the temporary files they write,
and a bound on their number, where this system lets the grader create one
(:func:`cgroups_work`)."""

from __future__ import annotations

import functools
import os
import signal
from pathlib import Path

__all__ = ["Cgroup", "cgroups_work"]


class Cgroup:
    """One submission's control group: one memory limit for all its processes and the
    temporary files they write (tmpfs pages are charged to it), and a bound on their
    number. Version 2 where this process's cgroup can have children with the memory
    controller, version 1 (the ``memory`` and ``pids`` hierarchies) otherwise; ``create``
    returns None where neither is writable (an ordinary user without delegation)."""

    _count = 0

    def __init__(self, version: int, memory: Path, pids: Path | None):
        self.version, self.memory, self.pids = version, memory, pids
        self.limit = 0

    @staticmethod
    def _mounts() -> dict[str, Path]:
        found = {}
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fields, extra = left.split(), right.split()
                if not extra:
                    continue
                if extra[0] == "cgroup2":
                    found.setdefault("v2", Path(fields[4]))
                elif extra[0] == "cgroup":
                    for option in extra[-1].split(","):
                        if option in ("memory", "pids"):
                            found.setdefault(option, Path(fields[4]))
        return found

    @staticmethod
    def _own() -> dict[str, str]:
        own = {}
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                for c in controllers.split(",") if controllers else ["v2"]:
                    own[c] = path.lstrip("/")
        return own

    @classmethod
    def create(cls, pids: int = 256) -> "Cgroup | None":
        if os.environ.get("LNCOURSE_CGROUP", "") == "none":
            return None
        try:
            mounts, own = cls._mounts(), cls._own()
        except OSError:
            return None
        cls._count += 1
        name = f"lncourse-{os.getpid()}-{cls._count}"
        if "v2" in mounts and "v2" in own:
            group = mounts["v2"] / own["v2"] / name
            try:
                group.mkdir()
                if (group / "memory.max").exists():
                    for f, v in (("pids.max", str(pids)), ("memory.swap.max", "0")):
                        try:
                            (group / f).write_text(v)
                        except OSError:
                            pass
                    return cls(2, group, group)
                group.rmdir()
            except OSError:
                pass
        if "memory" in mounts and "memory" in own:
            memory = mounts["memory"] / own["memory"] / name
            try:
                memory.mkdir()
            except OSError:
                return None
            task = None
            if "pids" in mounts and "pids" in own:
                task = mounts["pids"] / own["pids"] / name
                try:
                    task.mkdir()
                    (task / "pids.max").write_text(str(pids))
                except OSError:
                    task = None
            return cls(1, memory, task)
        return None

    def procs(self) -> tuple[str, ...]:
        """The files a process writes its PID into to join."""
        return tuple(dict.fromkeys(str(g / "cgroup.procs") for g in (self.memory, self.pids)
                                   if g is not None))

    def _read(self, name: str) -> str:
        try:
            return (self.memory / name).read_text()
        except OSError:
            return ""

    def usage(self) -> int:
        text = self._read("memory.current" if self.version == 2 else "memory.usage_in_bytes")
        return int(text) if text.strip().isdigit() else 0

    def set_limit(self, limit: int) -> None:
        self.limit = int(limit)
        if self.version == 2:
            (self.memory / "memory.max").write_text(str(self.limit))
            return
        swap = self.memory / "memory.memsw.limit_in_bytes"
        if swap.exists() and self.limit > int(self._read("memory.limit_in_bytes") or 0):
            swap.write_text(str(self.limit))                # raise the sum first
            (self.memory / "memory.limit_in_bytes").write_text(str(self.limit))
            return
        (self.memory / "memory.limit_in_bytes").write_text(str(self.limit))
        if swap.exists():
            try:
                swap.write_text(str(self.limit))
            except OSError:
                pass

    def oom_kills(self) -> int:
        """How many of its processes the kernel killed for going over the limit."""
        text = self._read("memory.events" if self.version == 2 else "memory.oom_control")
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
        if self.version == 1:      # kernels without the count: how often the limit was hit
            failed = self._read("memory.failcnt").strip()
            return 1 if failed.isdigit() and int(failed) > 0 and "under_oom 1" in text else 0
        return 0

    def members(self) -> list[int]:
        out = set()
        for path in self.procs():
            try:
                out |= {int(p) for p in Path(path).read_text().split()}
            except (OSError, ValueError):
                pass
        return sorted(out)

    def kill(self) -> None:
        """SIGKILL every process in it (again, until none is left)."""
        if self.version == 2:
            try:
                (self.memory / "cgroup.kill").write_text("1")
            except OSError:
                pass
        for _ in range(100):
            found = self.members()
            if not found:
                return
            for pid in found:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            while True:
                try:
                    if os.waitpid(-1, os.WNOHANG) == (0, 0):
                        break
                except ChildProcessError:
                    break
            import time
            time.sleep(0.01)

    def close(self) -> None:
        self.kill()
        import time
        for group in dict.fromkeys(g for g in (self.memory, self.pids) if g is not None):
            for _ in range(200):
                try:
                    group.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)


@functools.lru_cache(maxsize=1)
def cgroups_work() -> bool:
    group = Cgroup.create()
    if group is None:
        return False
    group.close()
    return True
