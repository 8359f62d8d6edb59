"""10,000 random or malformed messages: each gets an error reply, the daemon survives and its state is unchanged."""

from __future__ import annotations

import json
import random
import sqlite3

import pytest
import zmq

from malleable._wire import MAGIC, pack
from malleable.controller.daemon import _protocol as P
from malleable.controller.daemon._hostpool import HostPool
from tests.controller._daemon_util import TOKEN, daemon_thread, wait_for

pytestmark = pytest.mark.timeout(180)

N_MESSAGES = 10_000
VALID = {
    "submit": {"name": "x", "cmd": ["true"], "nodes": 1, "min_nodes": 1, "max_nodes": 1, "malleable": False,
               "time_limit": 10.0, "out": "", "err": "", "cwd": "/work", "env": {}},
    "cancel": {"job_id": 1}, "info": {"job_id": 1}, "history": {"limit": 0}, "queue": {}, "nodes": {},
    "status": {}, "shutdown": {"cancel_jobs": False},
    "register": {"job_id": 1, "pid": 1, "host": "h", "size": 1, "hosts": ["h"]},
    "poll": {"job_id": 1, "probe": 1},
    "committed": {"job_id": 1, "seq": 1, "kind": "expand", "old_size": 1, "new_size": 2, "seconds": 0.1,
                  "freed": [], "hosts": [], "idle": 0},
    "refused": {"job_id": 1, "seq": 1, "reason": "r"}, "progress": {"job_id": 1, "phase": "p", "data": {}},
}
REPLIES = ["ok", "error", "submitted", "table", "job_info", "status_reply", "order"]
WEIRD = [None, True, False, -1, 2**40, 1.5, float("nan"), "", "x" * 5000, [], [1, 2], {}, {"a": [1]},
         ["y"] * 5000, "\x00", -0.5]


def _wrong(rng: random.Random, value):
    while True:
        w = rng.choice(WEIRD)
        if type(w) is not type(value) or w != value:
            if isinstance(w, float) and w != w:  # NaN is not JSON (json.dumps writes NaN); keep it as a case
                return w
            return w


def bad_message(rng: random.Random) -> list[bytes]:
    """Frames of one message that must be refused without changing anything: malformed (checked here with the
    decoder, so a mutation that happens to be valid is drawn again) or naming a job that does not exist."""
    while True:
        kind = rng.randrange(10)
        frames = _draw(rng, kind)
        if kind == 5:
            return frames
        try:
            P.decode(frames, TOKEN.encode())
        except Exception:  # noqa: BLE001 - refused here, so refused by the daemon too
            return frames


def _draw(rng: random.Random, kind: int) -> list[bytes]:
    if kind == 0:  # random frames
        return [rng.randbytes(rng.randrange(0, 64)) for _ in range(rng.randrange(1, 5))]
    if kind == 1:  # truncated valid message
        frames = pack({"v": 1, "type": "queue", "id": 1}, TOKEN.encode())
        return frames[:rng.randrange(0, 3)] or [b""]
    if kind == 2:  # wrong secret
        t = rng.choice(list(VALID))
        return pack({"v": 1, "type": t, "id": 1, **VALID[t]}, b"not-the-secret")
    if kind == 3:  # wrong version
        t = rng.choice(list(VALID))
        return pack({"v": rng.choice([0, 2, 99, "1", None, 1.0]), "type": t, "id": 1, **VALID[t]}, TOKEN.encode())
    if kind == 4:  # a field of the wrong type or out of range
        t = rng.choice([k for k in VALID if VALID[k]])
        body = dict(VALID[t])
        f = rng.choice(list(body))
        body[f] = _wrong(rng, body[f])
        try:
            return pack({"v": 1, "type": t, "id": 2, **body}, TOKEN.encode())
        except ValueError:
            return [MAGIC, b"{", b"x" * 32]
    if kind == 5:  # unknown job ids (well-formed)
        t = rng.choice(["cancel", "info", "register", "poll", "committed", "refused", "progress"])
        body = dict(VALID[t], job_id=rng.randrange(1000, 2**31 - 1))
        return pack({"v": 1, "type": t, "id": 3, **body}, TOKEN.encode())
    if kind == 6:  # missing or extra fields
        t = rng.choice([k for k in VALID if VALID[k]])
        body = dict(VALID[t])
        if rng.random() < 0.5:
            del body[rng.choice(list(body))]
        else:
            body["zz" + str(rng.randrange(9))] = 1
        return pack({"v": 1, "type": t, "id": 4, **body}, TOKEN.encode())
    if kind == 7:  # replies and unknown types sent as requests
        t = rng.choice(REPLIES + ["", "nope", "SUBMIT", "x" * 300])
        return pack({"v": 1, "type": t, "id": 5}, TOKEN.encode())
    if kind == 8:  # authenticated garbage header, or payload frames
        import hashlib
        import hmac
        raw = rng.choice([b"[1,2]", b"{bad", b'"s"', b"{}", json.dumps({"v": 1}).encode(), rng.randbytes(20)])
        mac = hmac.new(TOKEN.encode(), MAGIC + raw, hashlib.sha256).digest()
        return [MAGIC, raw, mac]
    frames = pack({"v": 1, "type": "queue", "id": 6}, TOKEN.encode(), [b"extra"])
    if rng.random() < 0.5:
        frames[1] = frames[1].replace(b'"id":6', b'"id":"six"')
    return frames


def dump(path) -> list:
    db = sqlite3.connect(path)
    try:
        return [db.execute(q).fetchall() for q in (
            "SELECT id, rec, state FROM jobs ORDER BY id", "SELECT * FROM hosts ORDER BY name",
            "SELECT * FROM steps ORDER BY job_id, n", "SELECT id, job_id, kind, text FROM events ORDER BY id")]
    finally:
        db.close()


def test_ten_thousand_bad_messages(monkeypatch, tmp_path):
    monkeypatch.setenv("MALLEABLE_TOKEN", TOKEN)
    state = tmp_path / "ctl.sqlite"
    with daemon_thread(state, HostPool.local(1), tick=0.5) as (d, c):
        run = c.submit(["sleep", "120"], nodes=1, out=str(tmp_path / "o"))
        wait = c.submit(["true"], nodes=1, out=str(tmp_path / "o"))
        wait_for(lambda: {r["id"]: r["state"] for r in c.rows(P.Queue())} == {run: "RUNNING", wait: "PENDING"},
                 20, "one running and one queued job")
        before = dump(state)
        rng = random.Random(20260810)  # noqa: S311 - seeded test data
        ctx = zmq.Context()
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(c.address)
        kinds: dict[str, int] = {}
        got = 0
        try:
            for start in range(0, N_MESSAGES, 250):
                n = min(250, N_MESSAGES - start)
                for _ in range(n):
                    s.send_multipart([b"", *bad_message(rng)])
                for _ in range(n):
                    assert s.poll(10_000), f"no reply after {got} replies"
                    frames = s.recv_multipart()[1:]
                    try:
                        reply, _ = P.decode(frames, TOKEN.encode())
                    except Exception as e:  # noqa: BLE001 - the test reports it
                        raise AssertionError(f"undecodable reply: {e}") from None
                    assert isinstance(reply, P.Error), reply
                    kinds[reply.kind] = kinds.get(reply.kind, 0) + 1
                    got += 1
        finally:
            s.close(0)
            ctx.term()
        assert got == N_MESSAGES
        assert set(kinds) <= {"ProtocolError", "AuthError", "UnknownJob", "Refused"}, kinds
        assert kinds.get("AuthError", 0) > 500 and kinds.get("ProtocolError", 0) > 3000
        assert c.status()["rejected"] >= N_MESSAGES  # still serving, every message rejected
        assert dump(state) == before
        assert {r["id"]: r["state"] for r in c.rows(P.Queue())} == {run: "RUNNING", wait: "PENDING"}
