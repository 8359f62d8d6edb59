"""Property: whatever the interleaving of writes (random offsets and sizes), reads, flushes, expansions and partial
or total shrinks, a file kept open holds exactly the bytes of an in-memory model of it, for its writer, for a
reader opened before the changes and for a new client afterwards.

The examples share one file system (one per test run: starting servers is the expensive part); each example
writes its own file. Shrinking of failing examples is off: every run of one costs seconds of real servers."""

from __future__ import annotations

import itertools
import random

import pytest
from conftest import close_checked
from elastic_util import blocks_on_servers
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

KIB = 1024
SPAN = 2 << 20  # writes and reads fall within the first 2 MiB (and may end beyond)
MAX_SERVERS = 4
_EXAMPLES = itertools.count()

# weighted so that writes are often in flight when servers change
_KINDS = ["write"] * 6 + ["read"] * 2 + ["flush"] + ["expand"] * 2 + ["shrink"] * 3


def _op(kind: str) -> st.SearchStrategy[tuple]:
    if kind in ("write", "read"):
        return st.tuples(st.just(kind), st.integers(0, SPAN), st.integers(1, 300 * KIB))
    if kind == "shrink":  # which server leaves: an index in the servers sorted by their share of the file
        return st.tuples(st.just(kind), st.sampled_from(["partial", "total"]), st.integers(0, 3))
    return st.tuples(st.just(kind))


_OPS = st.sampled_from(_KINDS).flatmap(_op)


@pytest.fixture
def prop_fs(tmp_path):
    from malleable.adhocfs import start_fs

    dep = start_fs("127.0.0.1", ["127.0.0.1"] * 2, state=str(tmp_path / "st"))
    yield dep
    dep.stop()


class _Run:
    """One example: a writer and a reader of a new file, the model, and the changes made to the file system."""

    def __init__(self, dep, path: str) -> None:
        from malleable.adhocfs import connect

        self.dep, self.path = dep, path
        self.fs = connect(dep.address, timeout=5.0)
        self.w = self.fs.open(path, "w+b", block_size=32 * KIB)
        self.model = bytearray()
        self.r = None

    def active(self) -> list[int]:
        return sorted(s["sid"] for s in self.fs.status().servers if s["state"] == "active")

    def apply(self, i: int, op: tuple) -> None:
        from malleable.adhocfs._admin import expand_fs, shrink_fs

        kind = op[0]
        if kind == "write":
            pos, size = op[1], op[2]
            data = random.Random(f"{self.path} {i}").randbytes(size)
            self.w.seek(pos)
            assert self.w.write(data) == size
            end = pos + size
            self.model.extend(bytes(max(0, end - len(self.model))))
            self.model[pos:end] = data
        elif kind == "read":
            self.w.seek(op[1])
            assert self.w.read(op[2]) == bytes(self.model[op[1] : op[1] + op[2]])
        elif kind == "flush":
            self.w.flush()
            if self.r is None:  # a reader opened before the changes that follow, kept open to the end
                self.r = self.fs.open(self.path, "rb")
        elif kind == "expand" and len(self.active()) < MAX_SERVERS:
            servers, procs, info = expand_fs(self.dep.address, ["127.0.0.1"], state=self.dep.state)
            self.dep.procs.update({f"expanded {k}": p for k, p in procs.items()})
            assert info["state"] == "done"
        elif kind == "shrink" and len(self.active()) > 1:
            held = blocks_on_servers(self.fs, self.path)
            order = sorted(self.active(), key=lambda s: (-len(held.get(s, [])), s))  # most of the file first
            info = shrink_fs(self.dep.address, [order[op[2] % len(order)]], op[1])
            assert info["state"] == "done"

    def finish(self) -> None:
        try:
            self.w.close()
            if self.r is not None:
                self.r.seek(0)
                assert self.r.read() == self.model
                self.r.close()
        finally:
            close_checked(self.fs)
        from malleable.adhocfs import connect

        c = connect(self.dep.address, timeout=5.0)
        try:
            with c.open(self.path, "rb") as f:
                assert f.read() == self.model
        finally:
            close_checked(c)


@pytest.mark.timeout(600)
@seed(2028)
@settings(max_examples=8, deadline=None, database=None, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ops=st.lists(_OPS, min_size=6, max_size=16))
def test_open_file_matches_its_model_across_expands_and_shrinks(prop_fs, ops):
    run = _Run(prop_fs, f"/p{next(_EXAMPLES)}")  # a file of its own per example
    try:
        for i, op in enumerate([("write", 0, 100 * KIB), ("flush",), *ops]):
            run.apply(i, op)
    finally:
        run.finish()
