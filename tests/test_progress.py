"""Progress bars only where a person watches."""

import sys
import types

import IPython
import pytest

from lncourse import progress as module


@pytest.mark.parametrize("allow_stdin, shown", [(True, True), (False, False)])
def test_a_kernel_shows_bars_only_to_a_front_end_that_takes_input(monkeypatch, allow_stdin, shown):
    """Jupyter and Colab allow input; papermill, nbclient and the site build do not."""
    monkeypatch.delenv("LNCOURSE_PROGRESS", raising=False)
    monkeypatch.setitem(sys.modules, "ipykernel", types.ModuleType("ipykernel"))
    shell = types.SimpleNamespace(kernel=types.SimpleNamespace(_allow_stdin=allow_stdin))
    monkeypatch.setattr(IPython, "get_ipython", lambda: shell)
    assert module.someone_watching() is shown
    assert module.progress(range(3)).disable is (not shown)


def test_the_environment_decides_outright(monkeypatch):
    monkeypatch.setenv("LNCOURSE_PROGRESS", "0")
    assert not module.someone_watching()
    monkeypatch.setenv("LNCOURSE_PROGRESS", "1")
    assert module.someone_watching()
