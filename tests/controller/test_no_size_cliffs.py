"""No size cliffs: every request the daemon's field checks reject gets its reason back at once, under the key it
came with (not silence and a 'dead controller' after the timeout); environments up to 1 MiB reach the job; a
queue and a history far beyond one message (1 MiB, 4,096 rows) come back whole, in parts."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from malleable.controller.daemon import _protocol as P
from malleable.controller.daemon._client import Client
from malleable.controller.daemon._core import CoreConfig
from malleable.controller.daemon._daemon import Daemon, DaemonConfig
from malleable.controller.daemon._hostpool import HostPool
from malleable.controller.daemon._records import JobRec
from malleable.controller.daemon._store import Store
from malleable.errors import ProtocolError
from tests.controller._daemon_util import TOKEN, cli, daemon_thread, isolate, wait_final

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def env(monkeypatch, tmp_path):
    return isolate(monkeypatch, tmp_path)


def refused_at_once(call, text: str) -> None:
    t = time.monotonic()
    with pytest.raises(ProtocolError, match=text):
        call()
    assert time.monotonic() - t < 5.0


def test_every_rejected_request_gets_its_reason_at_once(env):
    state = str(env / "ctl.sqlite")
    with daemon_thread(env / "ctl.sqlite", HostPool.local(1)) as (d, c):
        refused_at_once(lambda: c.submit(["true"], 1, name="x" * 5000), "field 'name' longer than 4096")
        refused_at_once(lambda: c.submit(["true"], 2**31), "field 'nodes' must be in 0..2147483647")
        refused_at_once(lambda: c.call(P.Info(-1)), "field 'job_id' must be in 0..")
        ann = c.add_user("ann")
        with Client(d.address, key=ann, timeout=10) as as_ann:      # answered under the user's own key
            refused_at_once(lambda: as_ann.submit(["true"], 1, name="y" * 5000), "longer than 4096")
        for argv, text in ((("submit", "-J", "z" * 5000, "--", "true"), "longer than 4096 characters"),
                           (("submit", "-N", str(2**31), "--", "true"), "must be in 0..2147483647"),
                           (("info", "--", "-1"), "must be in 0..2147483647")):
            t = time.monotonic()
            code, _, err = cli(*argv[:1], "--state", state, *argv[1:])
            assert code == 1 and err.count("\n") == 1 and text in err, err
            assert time.monotonic() - t < 5.0
        assert c.rows(P.Queue()) == []                 # nothing refused was queued
        assert c.status()["rejected"] >= 7


def test_environments_up_to_one_mib_reach_the_job(env):
    big = {f"MODULE_{i}": chr(65 + i % 26) * 3000 for i in range(340)}          # Lmod-like: ~1 MiB in all
    big["LONG_PATH"] = ":".join(f"/opt/spack/pkg{i}/bin" for i in range(600))
    size = sum(len(k) + len(v) + 2 for k, v in big.items())
    assert 1 << 19 < size <= P.MAX_ENV_BYTES
    with daemon_thread(env / "ctl.sqlite", HostPool.local(1)) as (d, c):
        out = env / "env.out"
        jid = c.submit(["sh", "-c", 'printf %s "$MODULE_339$LONG_PATH" | wc -c'], 1, out=str(out),
                       env={**big, "PATH": os.environ["PATH"]})
        assert wait_final(c, [jid], 60)[jid] == "COMPLETED"
        assert int(out.read_text()) == len(big["MODULE_339"]) + len(big["LONG_PATH"])
        over = {**big, "ONE_MORE": "x" * (P.MAX_ENV_BYTES - size + 1)}
        refused_at_once(lambda: c.submit(["true"], 1, env=over), "more than 1048576 \\(1 MiB\\)")


def populate(state: Path, n: int) -> None:
    """``n`` pending jobs (each asking for 2 hosts of a 1-host pool: they stay pending), written to a real state."""
    s = Store(str(state))
    now = time.time()
    with s.tx():
        for i in range(1, n + 1):
            s.save_job(JobRec(i, f"job{i}-" + "n" * (i % 300), ["sleep", "60"], 2, 2, 2, False, 600.0, "", "",
                              "/tmp", {"PATH": "/bin"}, now + i * 1e-3, user=f"u{i % 7}"))
    s.close()


def test_long_queues_and_histories_come_back_whole(env):
    n = 6000                                   # past 4,096 rows and several MiB of rows
    populate(env / "ctl.sqlite", n)
    d = Daemon(DaemonConfig(str(env / "ctl.sqlite"), HostPool.local(1), tick=0.5, core=CoreConfig(),
                            host_check=0), token=TOKEN.encode())
    d.start()
    stop = threading.Event()
    t = threading.Thread(target=d.serve, args=(stop,), daemon=True)
    t.start()
    try:
        with Client(d.address, token=TOKEN.encode(), timeout=20) as c:
            rows = c.rows(P.Queue())
            assert [r["id"] for r in rows] == list(range(1, n + 1))
            assert all(r["name"] == f"job{r['id']}-" + "n" * (r["id"] % 300) for r in rows)
            assert {r["state"] for r in rows} == {"PENDING"} and rows[17]["user"] == "u4"
            hist = c.rows(P.History(0))
            assert [r["id"] for r in hist] == list(range(n, 0, -1))
            assert c.rows(P.Queue()) == rows                     # the same answer twice: nothing lost in parts
        code, out, err = cli("queue", "--controller", d.address, "--json")
        assert code == 0, err
        assert [j["id"] for j in json.loads(out)["jobs"]] == list(range(1, n + 1))
        code, out, err = cli("history", "--controller", d.address)
        assert code == 0, err
        assert len(out.splitlines()) == n + 1
    finally:
        stop.set()
        t.join(10)
        d.close()


def test_table_parts_split_long_rows_to_fit():
    from malleable._wire import MAX_HEADER, Wire
    from malleable.controller.daemon._parts import encode_reply, join

    rows = [{"id": i, "name": "x" * 4000 + str(i), "cmd": ["a" * 3000]} for i in range(3000)]
    w = Wire(b"k")
    parts = list(encode_reply(P.Table(rows), w, 9))
    assert len(parts) > 1 and all(len(p[1]) <= MAX_HEADER for p in parts)
    back: list[dict] = []
    for i, p in enumerate(parts):
        m, rid = P.decode(p, b"k")
        assert rid == 9 and m.more == (i < len(parts) - 1)
        back += join(m)
    assert back == rows


def test_table_rows_as_value_lists_come_back_exact_and_in_order():
    """Rows go as value lists with the part's constant columns sent once; the client gets the same objects
    back, keys in the same order, and a constant-looking column of 1, 1.0 and True keeps each type."""
    from malleable._wire import Wire
    from malleable.controller.daemon._parts import encode_reply, join

    rows = [{"id": i, "n": [1, 1.0, True][i % 3] if i > 2000 else 1, "cmd": ["sleep", "60"], "fs": {},
             "end": None, "name": f"j{i}"} for i in range(2500)]
    w = Wire(b"k")
    back: list[dict] = []
    frames = list(encode_reply(P.Table(rows), w, 3))
    for p in frames:
        m, _ = P.decode(p, b"k")
        assert m.cols == list(rows[0]) and not m.rows
        back += join(m)
    assert back == rows and all(list(b) == list(r) for b, r in zip(back, rows))
    assert [type(b["n"]) for b in back] == [type(r["n"]) for r in rows]
    first, _ = P.decode(next(encode_reply(P.Table(rows[:1000]), w, 4)), b"k")
    assert set(first.same) == {"n", "cmd", "fs", "end"}                        # sent once, not 1,000 times
    ragged = [{"id": 1}, {"id": 2, "x": 0}]                                    # differing fields go whole
    assert join(P.decode(next(encode_reply(P.Table(ragged), w, 5)), b"k")[0]) == ragged


@pytest.mark.parametrize("fields, why", [
    ({"cols": ["a", "b"], "vals": [[1]]}, "every value list must hold 2 values"),
    ({"cols": ["a", "b"], "same": {"a": 1}, "vals": [[1, 2]]}, "every value list must hold 1 values"),
    ({"cols": ["a"], "same": {"z": 1}, "vals": [[1]]}, "name every field of 'same'"),
    ({"cols": ["a", "a"], "vals": [[1, 2]]}, "columns must be distinct"),
    ({"rows": [{"a": 1}], "cols": ["a"], "vals": [[1]]}, "not both"),
    ({"cols": ["a"], "vals": [1]}, "must hold only lists"),
])
def test_hostile_value_list_tables_are_refused(fields, why):
    from malleable._wire import pack

    header = {"v": P.VERSION, "type": "table", "id": 1, "rows": [], "more": False, "same": {}, **fields}
    with pytest.raises(ProtocolError, match=why):
        P.decode(pack(header, b"k"), b"k")
