"""Pure redistribution plans: partial vs total vs rebalance, on real placement."""

from __future__ import annotations

import collections

import pytest

from malleable.adhocfs._placement import FileLayout, intern_epoch
from malleable.adhocfs._redistribute import FileState, plan_rebalance, plan_shrink
from malleable.errors import PlacementError


def _setup(n_servers=4, nfiles=20, nblocks=200):
    eid, epochs = intern_epoch({}, range(1, n_servers + 1))
    files = [FileState(fid, FileLayout.single(eid), nblocks) for fid in range(1, nfiles + 1)]
    inv: dict[int, dict[int, list[int]]] = collections.defaultdict(lambda: collections.defaultdict(list))
    for f in files:
        for b in range(nblocks):
            inv[f.layout.server(epochs, f.fid, b)][f.fid].append(b)
    return epochs, eid, files, inv


def test_partial_moves_only_blocks_of_leaving_server():
    epochs, eid, files, inv = _setup()
    plan = plan_shrink(files, epochs, eid, [2], inv, "partial")
    moves = plan.moves
    on2 = sum(len(v) for v in inv[2].values())
    assert plan.on_leaving == on2 and len(moves) == on2  # exactly the minimum (<= 1.1x)
    assert all(m.src == 2 and m.dst != 2 for m in moves)
    for fp in plan.files.values():
        assert 2 not in fp.layout.servers(plan.epochs)
    assert plan.epochs[plan.current] == (1, 3, 4)
    dst = collections.Counter(m.dst for m in moves)
    assert set(dst) == {1, 3, 4}  # spread over the remaining servers


def test_total_moves_more_than_partial():
    epochs, eid, files, inv = _setup()
    partial = plan_shrink(files, epochs, eid, [2], inv, "partial")
    total = plan_shrink(files, epochs, eid, [2], inv, "total")
    assert len(total.moves) >= len(partial.moves)
    for fp in total.files.values():
        assert fp.layout.to_pairs() == [[0, total.current]]


def test_total_after_expansion_moves_old_blocks_too():
    """A file with two intervals: total re-places both over the new list, partial only the leaver's."""
    e0, epochs = intern_epoch({}, [1, 2])
    e1, epochs = intern_epoch(epochs, [1, 2, 3, 4])
    lay = FileLayout.from_pairs([[0, e0], [100, e1]])
    f = FileState(1, lay, 200)
    inv: dict = collections.defaultdict(lambda: collections.defaultdict(list))
    for b in range(200):
        inv[lay.server(epochs, 1, b)][1].append(b)
    partial = plan_shrink([f], epochs, e1, [4], inv, "partial")
    total = plan_shrink([f], epochs, e1, [4], inv, "total")
    assert all(m.src == 4 for m in partial.moves) and len(partial.moves) == len(inv[4][1])
    assert len(total.moves) > len(partial.moves)
    assert any(m.block < 100 for m in total.moves)  # old-interval blocks re-placed too
    assert partial.files[1].layout.intervals[0].epoch == e0  # old interval kept (no 4 in it)


def test_unaffected_files_get_new_layout_without_moves():
    eid, epochs = intern_epoch({}, [1, 2, 3])
    f = FileState(9, FileLayout.single(eid), 16)  # reserved 16 blocks, wrote none
    plan = plan_shrink([f], epochs, eid, [3], {}, "total")
    fp = plan.files[9]
    assert not fp.affected and fp.moves == () and 3 not in fp.layout.servers(plan.epochs)


def test_orphans_are_not_moved():
    epochs, eid, files, inv = _setup(nfiles=1, nblocks=10)
    owner0 = files[0].layout.server(epochs, 1, 0)
    other = next(s for s in (1, 2, 3, 4) if s != owner0)
    inv[other][1].append(0)  # a stale copy on a non-owner
    plan = plan_shrink(files, epochs, eid, [other], inv, "partial")
    assert all(not (m.block == 0 and m.src == other) for m in plan.moves)


def test_bad_shrinks():
    epochs, eid, files, inv = _setup(n_servers=2, nfiles=1, nblocks=4)
    with pytest.raises(PlacementError):
        plan_shrink(files, epochs, eid, [1, 2], inv)
    with pytest.raises(PlacementError):
        plan_shrink(files, epochs, eid, [7], inv)
    with pytest.raises(ValueError):
        plan_shrink(files, epochs, eid, [1], inv, "sideways")


def test_rebalance_moves_about_the_new_share_onto_new_servers():
    epochs, eid, files, inv = _setup(n_servers=3, nfiles=10, nblocks=300)
    new, epochs2 = intern_epoch(epochs, [1, 2, 3, 4])
    plan = plan_rebalance(files, epochs2, new, inv)
    moves = plan.moves
    assert all(m.dst == 4 for m in moves)
    assert abs(len(moves) / 3000 - 0.25) < 0.03
    assert plan_rebalance([FileState(1, FileLayout.single(new), 5)], epochs2, new, {}).files == {}


def _replicated(n_servers=4, nblocks=200, r=2):
    eid, epochs = intern_epoch({}, range(1, n_servers + 1))
    f = FileState(1, FileLayout.single(eid), nblocks, ((0, nblocks),))
    inv: dict = collections.defaultdict(lambda: collections.defaultdict(list))
    for b in range(nblocks):
        for s in f.layout.replicas(epochs, 1, b, r):
            inv[s][1].append(b)
    return epochs, eid, f, inv


def test_replicas_are_the_next_servers_in_rendezvous_order():
    from malleable.adhocfs._placement import owner, owners

    for b in range(500):
        two = owners([1, 2, 3, 4], 7, b, 2)
        assert two[0] == owner([1, 2, 3, 4], 7, b) and len(set(two)) == 2
        rest = [s for s in (1, 2, 3, 4) if s != two[0]]
        assert owners(rest, 7, b, 1)[0] == two[1]  # without the primary, the secondary takes over
    assert owners([5], 1, 1, 3) == (5,)


def test_losing_a_dead_replica_copies_from_the_survivor_and_damages_nothing():
    epochs, eid, f, inv = _replicated()
    dead = 3
    del inv[dead]  # dead: absent from the inventory
    plan = plan_shrink([f], epochs, eid, [dead], inv, "partial", replicas=2)
    fp = plan.files[1]
    assert fp.damaged == ()
    had = {b for b in range(200) if dead in f.layout.replicas(epochs, 1, b, 2)}
    assert {m.block for m in fp.moves} == had and len(fp.moves) == len(had)  # one new copy per lost one
    for m in fp.moves:
        assert m.src != dead and m.block in inv[m.src][1] and m.dst not in f.layout.replicas(epochs, 1, m.block, 2)
        assert set(fp.layout.replicas(plan.epochs, 1, m.block, 2)) == {m.src, m.dst}
    assert fp.drops == ()


def test_losing_the_only_copy_reports_written_blocks_damaged():
    epochs, eid, f, inv = _replicated(r=1)
    on_dead = sorted(inv[2][1])
    del inv[2]
    plan = plan_shrink([f], epochs, eid, [2], inv, "partial", replicas=1)
    assert list(plan.files[1].damaged) == on_dead and plan.files[1].moves == ()
    unwritten = FileState(1, f.layout, 200, ((0, 10),))  # blocks never written are holes, not losses
    plan = plan_shrink([unwritten], epochs, eid, [2], inv, "partial", replicas=1)
    assert set(plan.files[1].damaged) == {b for b in on_dead if b < 10}


def test_shrink_of_a_live_replica_moves_one_copy_and_drops_nothing_kept():
    epochs, eid, f, inv = _replicated()
    plan = plan_shrink([f], epochs, eid, [4], inv, "partial", replicas=2)
    fp = plan.files[1]
    assert plan.on_leaving == len(inv[4][1]) == len(fp.moves)
    for m in fp.moves:  # the copy comes from a holder and lands outside the old set
        new = fp.layout.replicas(plan.epochs, 1, m.block, 2)
        assert m.dst in new and 4 not in new
    assert fp.drops == ()  # surviving copies stay where they are


def test_repair_plans_missing_copies():
    from malleable.adhocfs._redistribute import plan_repair

    epochs, eid, f, inv = _replicated()
    inv[1][1] = inv[1][1][:10]  # server 1 restarted nearly empty
    plan = plan_repair([f], epochs, eid, inv, 2)
    assert all(m.dst == 1 for m in plan.moves) and plan.files[1].damaged == ()
    assert len(plan.moves) == sum(1 for b in range(200) if 1 in f.layout.replicas(epochs, 1, b, 2)) - 10
