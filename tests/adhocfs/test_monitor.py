"""The watcher: real servers and traffic; the rule expands a slow file system and shrinks a fast one."""

from __future__ import annotations

import threading

import pytest
from conftest import close_checked


@pytest.fixture
def dep(tmp_path):
    from malleable.adhocfs import start_fs

    d = start_fs("127.0.0.1", ["127.0.0.1"], state=str(tmp_path / "st"))
    yield d
    d.stop()


def _traffic(addr, stop):
    from malleable.adhocfs import connect

    with connect(addr) as fs:
        i = 0
        while not stop.is_set():
            with fs.open(f"/t{i % 4}", "wb", block_size=64 * 1024) as f:
                f.write(b"x" * (1 << 20))
            i += 1


def test_watcher_expands_then_shrinks_with_cooldown(dep):
    from malleable.adhocfs import connect
    from malleable.adhocfs._monitor import Watcher
    from malleable.adhocfs._rule import RuleConfig

    stop = threading.Event()
    t = threading.Thread(target=_traffic, args=(dep.address, stop))
    t.start()
    try:
        # far more than this machine can do: the rule asks for more servers, up to n_max
        w = Watcher(
            dep.address,
            RuleConfig(rio=1e6, tolerance=10, k=2, n_min=1, n_max=3, cooldown=1.0),
            pool=["127.0.0.1"],
            interval=0.25,
            state=dep.state,
        )
        w.run(steps=6)
        dep.procs.update({f"watch {k}": p for k, p in w.procs.items()})
        acts = [d["action"] for d in w.decisions]
        assert acts[0] == "keep"  # no window yet
        assert "expand" in acts
        first = acts.index("expand")
        assert acts[first + 1] == "keep"  # cool-down right after a change
        assert "cool-down" in w.decisions[first + 1]["reason"] or "window" in w.decisions[first + 1]["reason"]
        with connect(dep.address) as fs:
            n = len([s for s in fs.status().servers if s["state"] == "active"])
        assert 2 <= n <= 3
        # now ask for almost nothing: the rule gives servers back, never below n_min
        w2 = Watcher(
            dep.address,
            RuleConfig(rio=0.001, tolerance=0.0001, k=2, n_min=1, n_max=3, cooldown=0.5),
            pool=["127.0.0.1"],
            interval=0.25,
        )
        w2.run(steps=8)
        assert "shrink" in [d["action"] for d in w2.decisions]
        stop.set()
        t.join(30)
        fs = connect(dep.address)
        try:
            active = [s for s in fs.status().servers if s["state"] == "active"]
            assert len(active) < n and len(active) >= 1
            for i in range(4):
                if fs.exists(f"/t{i}"):
                    with fs.open(f"/t{i}", "rb") as f:
                        data = f.read()
                    assert data == b"x" * (1 << 20)
        finally:
            close_checked(fs)
    finally:
        stop.set()
        t.join(30)


def test_dry_run_and_declared_rio(dep):
    from malleable.adhocfs import connect
    from malleable.adhocfs._monitor import Watcher
    from malleable.adhocfs._rule import RuleConfig

    w = Watcher(dep.address, RuleConfig(rio=0, tolerance=1), interval=0.1, act=False)
    w.run(steps=2)
    assert all(d["reason"] == "no RIO configured or declared" for d in w.decisions)
    with connect(dep.address) as fs:
        fs.declare_rio(123.0, job="j1")
        fs.declare_rio(7.0, job="j2")
        assert fs.status().rio == pytest.approx(130.0)
        w.run(steps=1)
        assert w.decisions[-1]["rio"] == pytest.approx(130.0)
        fs.declare_rio(0, job="j2")
        assert fs.status().rio == pytest.approx(123.0)
