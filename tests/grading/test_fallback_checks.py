"""The fallback (no bubblewrap) keeps the checks out of the learner's sight wherever the
checkout lies (issue 60, item 9: a checkout under the system's temporary folder, which
the fallback's learner may write and so read, left the checks readable, and exec'ing a
reference from them passed an exercise). The learner's view is made in a child process
with a mount namespace of its own: a checkout under a folder each learner gets empty,
put back as the template puts it back, keeps its package readable and its checks not."""

import ctypes
import os
import tempfile
from pathlib import Path

import pytest

from lncourse.grading import contain, template


def _in_a_mount_namespace(body) -> str:
    """``body()``'s result (text) from a child in a new mount namespace (and a new user
    namespace where not root)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(read)
            libc = ctypes.CDLL(None, use_errno=True)
            flags = 0x20000 | (0x10000000 if os.geteuid() != 0 else 0)
            if libc.unshare(flags) != 0:
                raise OSError(ctypes.get_errno(), "unshare")
            if libc.mount(None, b"/", None, 16384 | (1 << 18), None) != 0:
                raise OSError(ctypes.get_errno(), "make-rprivate")
            os.write(write, body(libc).encode())
        except BaseException as err:  # noqa: BLE001
            os.write(write, f"error: {err!r}".encode())
            code = 1
        os._exit(code)
    os.close(write)
    with os.fdopen(read) as f:
        text = f.read()
    os.waitpid(pid, 0)
    return text


@pytest.fixture
def checkout_under_tmp():
    """A checkout's package under a folder of the system's temporary folder."""
    with tempfile.TemporaryDirectory(dir=tempfile.gettempdir()) as top:
        package = Path(top) / "co" / "lncourse"
        (package / "checks").mkdir(parents=True)
        (package / "__init__.py").write_text("")
        (package / "checks" / "layernorm.py").write_text("def _layer_norm(): ...\n")
        yield Path(top), package


def _view(private, package) -> str:
    def body(libc):
        template.private_folders(libc, 16, private=(str(private),), package=package)
        seen = [(package / "__init__.py").exists(), os.listdir(package / "checks")]
        try:
            (package / "checks" / "layernorm.py").read_text()
            seen.append("checks readable")
        except OSError:
            seen.append("checks hidden")
        return repr(seen)
    return _in_a_mount_namespace(body)


@pytest.mark.skipif(not contain.namespaces_work(), reason="needs mount namespaces")
def test_a_checkout_under_the_temporary_folder_keeps_its_checks_hidden(checkout_under_tmp):
    top, package = checkout_under_tmp
    assert _view(top, package) == repr([True, [], "checks hidden"])


@pytest.mark.skipif(not contain.namespaces_work(), reason="needs mount namespaces")
def test_a_checkout_elsewhere_keeps_its_checks_hidden_too(checkout_under_tmp):
    top, package = checkout_under_tmp
    empty = top / "another"     # the private folder holds nothing of the checkout's
    empty.mkdir()
    assert _view(empty, package) == repr([True, [], "checks hidden"])


@pytest.mark.skipif(not contain.namespaces_work(), reason="needs mount namespaces")
def test_the_fallbacks_namespaces_hide_the_checks(monkeypatch, checkout_under_tmp):
    """The fallback without the template (``fallback_preexec``) hides them as well."""
    _, package = checkout_under_tmp
    monkeypatch.setattr(contain, "PACKAGE", package)

    def body(libc):
        contain.hide_checks(libc, package)
        return repr(os.listdir(package / "checks"))
    assert _in_a_mount_namespace(body) == "[]"
    import inspect
    assert "hide_checks(libc)" in inspect.getsource(contain._enter_namespaces)
