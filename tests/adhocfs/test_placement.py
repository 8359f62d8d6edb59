"""Placement is pure: rendezvous balance, minimal movement, interval maps, byte ranges."""

from __future__ import annotations

import collections

import pytest
from hypothesis import given
from hypothesis import strategies as st

from malleable.adhocfs._placement import FileLayout, Interval, block_range, intern_epoch, owner
from malleable.errors import PlacementError

N_BLOCKS = 100_000


def _counts(sids, n=N_BLOCKS, fid=7):
    return collections.Counter(owner(sids, fid, b) for b in range(n))


@pytest.mark.parametrize("n", [2, 4, 8])
def test_balance_within_5_percent(n):
    """Over 10^5 blocks every server gets within 5% of an even share."""
    counts = _counts(list(range(n)))
    even = N_BLOCKS / n
    assert set(counts) == set(range(n))
    assert all(abs(c - even) / even < 0.05 for c in counts.values()), counts


@pytest.mark.parametrize("n", [1, 3, 4, 7])
def test_adding_a_server_moves_about_one_over_n_plus_1(n):
    """n -> n+1 re-places ~1/(n+1) of the blocks, and only onto the new server."""
    old, new = list(range(n)), list(range(n + 1))
    moved = [b for b in range(N_BLOCKS) if owner(old, 3, b) != owner(new, 3, b)]
    assert abs(len(moved) / N_BLOCKS - 1 / (n + 1)) < 0.01
    assert all(owner(new, 3, b) == n for b in moved)


def test_removing_a_server_moves_only_its_blocks():
    """Any server (not only the last) may leave; only its blocks move."""
    old, new = [10, 20, 30, 40], [10, 30, 40]
    for b in range(20_000):
        before, after = owner(old, 1, b), owner(new, 1, b)
        assert before == after or before == 20


def test_modulo_would_move_most():
    """The anchor's point: hash % n moves ~80% for 4 -> 5, rendezvous ~20%."""
    rv = sum(owner(range(4), 0, b) != owner(range(5), 0, b) for b in range(20_000)) / 20_000
    mod = sum(b % 4 != b % 5 for b in range(20_000)) / 20_000
    assert rv < 0.22 and mod > 0.75


def test_owner_needs_servers():
    with pytest.raises(PlacementError):
        owner([], 1, 1)


def test_owner_is_stable_and_order_independent():
    assert owner([3, 1, 2], 5, 9) == owner([1, 2, 3], 5, 9)


def test_intern_epoch_reuses_lists():
    eid, ep = intern_epoch({}, [2, 1])
    assert eid == 0 and ep == {0: (1, 2)}
    eid2, ep2 = intern_epoch(ep, [1, 2])
    assert eid2 == 0 and ep2 == ep
    eid3, ep3 = intern_epoch(ep2, [1, 2, 3])
    assert eid3 == 1 and ep3[1] == (1, 2, 3)
    with pytest.raises(PlacementError):
        intern_epoch(ep3, [])


def test_layout_extend_keeps_old_blocks():
    """Blocks written before an expansion keep their servers; later ones use the enlarged list."""
    epochs = {0: (0, 1, 2, 3), 1: (0, 1, 2, 3, 4, 5)}
    lay = FileLayout.single(0)
    before = [lay.server(epochs, 9, b) for b in range(8)]
    lay2 = lay.extend(8, 1)
    assert lay2.intervals == (Interval(0, 0), Interval(8, 1))
    assert [lay2.server(epochs, 9, b) for b in range(8)] == before
    later = collections.Counter(lay2.server(epochs, 9, b) for b in range(8, 8 + 6000))
    assert set(later) == set(range(6))
    assert lay2.extend(20, 1) is lay2
    assert lay2.spans(12) == [(0, 8, 0), (8, 12, 1)]
    assert lay2.servers(epochs) == set(range(6))


def test_layout_invariants_and_pairs():
    with pytest.raises(PlacementError):
        FileLayout((Interval(1, 0),))
    with pytest.raises(PlacementError):
        FileLayout((Interval(0, 0), Interval(0, 1)))
    lay = FileLayout.from_pairs([[0, 0], [4, 0], [8, 1]])
    assert lay.to_pairs() == [[0, 0], [8, 1]]
    with pytest.raises(PlacementError):
        lay.server({0: (1,)}, 1, 9)
    with pytest.raises(PlacementError):
        lay.epoch_of(-1)
    # extending at or below the last start replaces the tail
    assert FileLayout.from_pairs([[0, 0], [8, 1]]).extend(8, 2).to_pairs() == [[0, 0], [8, 2]]
    assert FileLayout.single(0).extend(0, 3).to_pairs() == [[0, 3]]


@given(st.integers(0, 10**7), st.integers(0, 10**5), st.integers(64, 1 << 20))
def test_block_range_covers_exactly(offset, length, bs):
    pieces = block_range(offset, length, bs)
    assert sum(p[2] for p in pieces) == length
    pos = offset
    for b, off, ln in pieces:
        assert b * bs + off == pos and 0 < ln <= bs - off
        pos += ln


def test_block_range_rejects_bad_arguments():
    for args in [(-1, 1, 4), (0, -1, 4), (0, 1, 0)]:
        with pytest.raises(ValueError):
            block_range(*args)


def test_allocate_fills_only_gaps():
    from malleable.adhocfs._placement import UNALLOCATED

    lay = FileLayout.empty()
    assert not lay.allocated(0) and lay.any_unallocated(0, 1) and lay.servers({}) == set()
    lay = lay.allocate(5, 8, 0)
    assert lay.to_pairs() == [[0, UNALLOCATED], [5, 0], [8, UNALLOCATED]]
    assert not lay.any_unallocated(5, 8) and lay.any_unallocated(4, 6)
    lay = lay.allocate(0, 10, 1)  # allocated blocks keep their epoch
    assert lay.to_pairs() == [[0, 1], [5, 0], [8, 1], [10, UNALLOCATED]]
    assert lay.allocate(3, 3, 2) is lay
    assert lay.remap(lambda e: 7).to_pairs() == [[0, 7], [10, UNALLOCATED]]
    with pytest.raises(PlacementError):
        lay.server({0: (1,), 1: (1,)}, 1, 11)
