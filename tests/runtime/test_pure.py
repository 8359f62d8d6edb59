"""Pure runtime logic: plans, layout bookkeeping, redistribution plans (no MPI)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from malleable.errors import AdaptError, PlanError
from malleable.runtime import block_counts, block_range, parse_plan, plan_blocks, validate_plan
from malleable.runtime._layout import Group, GroupLayout, plan_expand, plan_shrink, spread
from malleable.runtime._sources import PlanSource, choose_hosts

# --- plans -------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, message", [
    ("{", "not valid JSON"),
    ('{"at_probe": 1}', "must be a JSON list"),
    ('[3]', "must be an object"),
    ('[{"at_probe": 1}]', "missing 'procs'"),
    ('[{"at_probe": 0, "procs": 2}]', "'at_probe' must be an integer >= 1"),
    ('[{"at_probe": 1, "procs": 2.5}]', "'procs' must be an integer >= 1"),
    ('[{"at_probe": 1, "procs": true}]', "'procs' must be an integer >= 1"),
    ('[{"at_probe": 1, "procs": 2, "when": 3}]', "unknown key(s) ['when']"),
    ('[{"at_probe": 1, "procs": 2, "hosts": "node1"}]', "'hosts' must be a list"),
    ('[{"at_probe": 3, "procs": 2}, {"at_probe": 3, "procs": 1}]', "must be greater than"),
])
def test_bad_plans_say_what_is_wrong(text, message):
    with pytest.raises(PlanError) as e:
        parse_plan(text)
    assert message in str(e.value)


def test_plan_parses_and_validates():
    steps = parse_plan('[{"at_probe": 2, "procs": 4, "hosts": ["a", "b"]}, {"at_probe": 5, "procs": 2}]')
    assert [(s.at_probe, s.procs, s.hosts) for s in steps] == [(2, 4, ("a", "b")), (5, 2, ())]
    validate_plan(steps, initial=1, base=1, host_ok=lambda h: h in {"a", "b"})
    assert parse_plan("") == () and parse_plan(None) == ()


def test_plan_validation_against_the_job():
    steps = parse_plan('[{"at_probe": 2, "procs": 1}]')
    with pytest.raises(PlanError, match="below the job's base of 2"):
        validate_plan(steps, initial=2, base=2)
    with pytest.raises(PlanError, match="already has 2"):
        validate_plan(parse_plan('[{"at_probe": 2, "procs": 2}]'), initial=2, base=1)
    with pytest.raises(PlanError, match="unknown host 'zz'"):
        validate_plan(parse_plan('[{"at_probe": 2, "procs": 3, "hosts": ["zz"]}]'), 1, 1, lambda h: False)


def test_plan_source_counts_probes_and_skips_past_steps():
    steps = parse_plan('[{"at_probe": 2, "procs": 4}, {"at_probe": 5, "procs": 2}]')
    src = PlanSource(steps)
    assert [src.poll(k) for k in (1, 3, 4)] == [None, None, None]
    assert src.poll(2).procs == 4 and src.poll(5).procs == 2
    joiner = PlanSource(steps, start=2)  # a joiner spawned at probe 2 only sees later steps
    assert joiner.poll(2) is None and joiner.poll(5).procs == 2


# --- layout ------------------------------------------------------------------------------------

def lay(*groups):
    return GroupLayout(tuple(groups))


def test_shrink_releases_newest_groups_and_frees_their_hosts():
    layout = lay(Group(0, ("n1",), 1, base=True), Group(1, ("n2", "n2"), 2), Group(2, ("n3",), 1))
    sp = plan_shrink(layout, 1)
    assert sp.gone == (1, 2) and sp.split == () and sp.freed_hosts == ("n2", "n3")
    assert sp.after.world_size == 1 and sp.leaving == 3


def test_shrink_splitting_a_group_keeps_its_host_busy():
    layout = lay(Group(0, ("n1",), 1, base=True), Group(1, ("n2", "n2", "n2"), 3))
    sp = plan_shrink(layout, 2)  # 4 -> 2 after a +3 expansion
    assert sp.gone == () and sp.split == (1,) and sp.freed_hosts == ()
    assert sp.after.world_size == 2 and sp.after.idle() == 2
    sp2 = plan_shrink(sp.after, 1)
    assert sp2.gone == (1,) and sp2.freed_hosts == ("n2",) and sp2.after.idle() == 0


def test_host_shared_with_a_remaining_group_is_not_freed():
    layout = lay(Group(0, ("n1",), 1, base=True), Group(1, ("n2",), 1), Group(2, ("n2",), 1))
    assert plan_shrink(layout, 2).freed_hosts == ()
    assert plan_shrink(layout, 1).freed_hosts == ("n2",)


def test_shrink_below_base_or_not_a_shrink_is_refused():
    layout = lay(Group(0, ("n1", "n1"), 2, base=True), Group(1, ("n2",), 1))
    with pytest.raises(AdaptError, match="cannot leave"):
        plan_shrink(layout, 1)
    with pytest.raises(AdaptError, match="not a shrink"):
        plan_shrink(layout, 3)
    with pytest.raises(AdaptError, match="not an expansion"):
        plan_expand(layout, 3)


def test_expand_makes_one_group_per_host():
    layout = lay(Group(0, ("n1",), 1, base=True))
    ep = plan_expand(layout, 6, ["n2", "n3"])
    assert ep.hosts == ("n2", "n3") and ep.counts == (3, 2) and ep.first_gid == 1
    assert spread(2, []) == [(None, 2)]


def test_choose_hosts_prefers_idle_job_hosts():
    layout = lay(Group(0, ("n1",), 1, base=True), Group(1, ("n2",), 1))
    assert choose_hosts(layout, ("n1", "n2", "n3", "n4"), 3) == ("n3", "n4", "n1")
    assert choose_hosts(layout, (), 2) == ()


def test_group_of_rank():
    layout = lay(Group(0, ("a", "a"), 2, base=True), Group(1, ("b", "b", "b"), 2))
    assert [(g.gid, m) for g, m in (layout.group_of_rank(r) for r in range(4))] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    with pytest.raises(IndexError):
        layout.group_of_rank(4)
    assert GroupLayout.from_json(layout.to_json()) == layout


# --- redistribution plans ----------------------------------------------------------------------

@settings(max_examples=300, deadline=None)
@given(st.integers(0, 500), st.integers(1, 40), st.integers(1, 40))
def test_block_plan_moves_every_index_exactly_once(n, old, new):
    owner_old = np.concatenate([[i] * c for i, c in enumerate(block_counts(n, old))] or [[]]).astype(int)
    owner_new = np.concatenate([[i] * c for i, c in enumerate(block_counts(n, new))] or [[]]).astype(int)
    seen = np.zeros(n, dtype=int)
    for t in plan_blocks(n, old, new):
        assert t.lo < t.hi
        assert (owner_old[t.lo:t.hi] == t.src).all() and (owner_new[t.lo:t.hi] == t.dst).all()
        seen[t.lo:t.hi] += 1
    assert (seen == 1).all()


@given(st.integers(0, 10_000), st.integers(1, 64))
def test_block_counts_are_balanced(n, parts):
    counts = block_counts(n, parts)
    assert sum(counts) == n and max(counts) - min(counts) <= 1
    assert block_range(n, parts, parts - 1)[1] == n


def test_block_range_rejects_bad_input():
    with pytest.raises(ValueError):
        block_range(10, 0, 0)
    with pytest.raises(ValueError):
        block_range(10, 3, 3)
