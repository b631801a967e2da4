"""The containment reproducers (test_containment.py) run each attack in each of the
three ways the grader contains a learner (bubblewrap, the template, the fallback). The
whole cross product takes about 3 minutes of wall time and twice that of CPU, more than
the test command's budget allows beside everything else, so the test command runs each
attack in one of the three, taken in turn (sorted by attack, so that each way runs about
a third of the attacks), and ``pytest -m slow`` runs every attack in every way."""

import pytest

MODES = ("template", "bubblewrap", "fallback")


def _attack(item):
    params = {k: v for k, v in item.callspec.params.items() if k != "sandboxing"}
    return (item.originalname, tuple(sorted((k, str(v)) for k, v in params.items())))


def pytest_collection_modifyitems(config, items):
    contained = [i for i in items if hasattr(i, "callspec")
                 and "sandboxing" in i.callspec.params]
    attacks = sorted({_attack(i) for i in contained})
    turn = {a: MODES[n % len(MODES)] for n, a in enumerate(attacks)}
    for item in contained:
        if item.callspec.params["sandboxing"] != turn[_attack(item)]:
            item.add_marker(pytest.mark.slow)
