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
