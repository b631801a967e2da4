"""tests/stored_results_plugin.py's marks that decide where a test runs: `recompute`
(CI's stage, not the README's test command) and the slow part of a `representative`
parametrisation."""

from pathlib import Path

import pytest

import stored_results_plugin as plugin


class Item:
    """Enough of a collected test for the plugin: its name and its markers."""

    def __init__(self, name, *marks):
        self.name = self.originalname = name
        self.marks = set(marks)
        self.function = None            # nothing for the static reading to follow

    def get_closest_marker(self, mark):
        return mark if mark in self.marks else None

    def add_marker(self, mark):
        self.marks.add(mark.name)


@pytest.mark.parametrize("name, replay, expected", [
    ("test_stored_run_recomputes_from_its_weights", True, True),
    ("test_stored_first_record_replays_from_the_seed", True, True),
    ("test_tiny_run_recomputes", True, False),             # a run the test makes itself
    ("test_a_run_stores_what_recomputes_its_numbers", True, False),
    ("test_every_reported_number_matches_the_ledger", True, False),
    ("test_recompute_helper_rounds", False, False),        # reads no stored result
])
def test_recompute_is_marked_on_stored_recomputations_only(name, replay, expected):
    item = Item(name, *(["replay"] if replay else []))
    plugin.collection_modifyitems([item])
    assert ("recompute" in item.marks) is expected, item.marks


def test_a_hand_put_recompute_mark_stays():
    item = Item("test_stall_is_at_the_bigram_level", "replay", "recompute")
    plugin.collection_modifyitems([item])
    assert "recompute" in item.marks


def test_representative_keeps_the_named_runs_fast_and_the_rest_slow():
    runs = [Path(f"/x/{n}.json") for n in ("a", "b", "c")]
    params = plugin.representative(runs, {"b"}, why="b takes every path")
    slow = {p.id: any(m.name == "slow" for m in p.marks) for p in params}
    assert slow == {"a": True, "b": False, "c": True}
    with pytest.raises(AssertionError, match="not stored runs"):
        plugin.representative(runs, {"b", "renamed"}, why="b takes every path")
    with pytest.raises(AssertionError, match="say why"):
        plugin.representative(runs, {"b"}, why=" ")


def test_a_ledger_read_to_print_an_entry_is_not_counted_but_any_other_read_is():
    """The audit hook skips a read made under lncourse.evidence.claims._numbers (the
    {ledger} role's), and only that one."""
    import stored_results_plugin as P

    source = "def _numbers():\n    return (lambda: P._quoting())()\n"
    role = {"P": P}
    exec(compile(source, "/any/lncourse/evidence/claims.py", "exec"), role)
    other = {"P": P}
    exec(compile(source, "/any/lncourse/evidence/other.py", "exec"), other)
    assert role["_numbers"]() is True
    assert other["_numbers"]() is False
    assert (lambda: P._quoting())() is False
