"""scripts/compare_ledgers.py: the before/after comparison of the ledgers (issue 59)."""

from compare_ledgers import close, compare


def test_compare_counts_removed_and_changed_entries_not_added_ones():
    before = {"results/x/reported.json": {"a": 1.0, "b": "text", "c": 2}}
    after = {"results/x/reported.json": {"a": 1.0, "b": "text", "c": 3, "d": 4}}
    lines = []
    assert compare(before, before, out=lines.append) == 0 and lines == []
    assert compare(before, after, out=lines.append) == 1
    assert "1 added, 0 removed, 1 changed" in lines[0] and "changed c: 2 -> 3" in lines[1]
    gone = {"results/x/reported.json": {"a": 1.0}}
    assert compare(before, gone, out=[].append) == 2


def test_a_relative_tolerance_forgives_last_digits_of_floats_only():
    assert close(6.262311935424805, 6.262310314178467, 1e-6)
    assert not close(6.262311935424805, 6.262310314178467, 0.0)
    assert not close(1.0, 1.1, 1e-6)
    assert not close("1.0", "1.0000001", 1.0) and not close(1, 2, 1.0)
    assert not close(float("nan"), float("nan"), 1.0)
    before = {"l": {"a": 1.0, "b": 2.0}}
    after = {"l": {"a": 1.0 + 1e-12, "b": 2.5}}
    assert compare(before, after, rtol=1e-9, out=[].append) == 1
    assert compare(before, after, rtol=0.0, out=[].append) == 2


def test_types_count_and_added_entries_are_named():
    """true is not 1 and 3 is not 3.0 (a claim's verdict turned into a count, a count
    into a float), and the entries added are listed, so that a renamed key shows on
    both sides."""
    before = {"l": {"holds": True, "n": 3, "old name": 0.5}}
    after = {"l": {"holds": 1, "n": 3.0, "new name": 0.5}}
    lines = []
    assert compare(before, after, rtol=1e-6, out=lines.append) == 3
    assert "  changed holds: True -> 1" in lines and "  changed n: 3 -> 3.0" in lines
    assert "  removed old name: 0.5" in lines and "  added new name: 0.5" in lines
    assert compare(before, before, out=[].append) == 0


def test_every_ledger_file_and_nothing_else_is_read():
    from compare_ledgers import LEDGER

    for name in ("results/norms/reported.json", "results/norms/periln_reported.json"):
        assert LEDGER.match(name), name
    for name in ("results/norms/unreported.json", "results/reported.json",
                 "results/norms/sub/reported.json"):
        assert not LEDGER.match(name), name
