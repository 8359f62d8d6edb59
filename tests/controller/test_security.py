"""Users and job keys on the controller: key ids in the wire seal, who may do what (a job key cancelling another
job or forging its resize acknowledgement is refused), jobs never see the operator's secret, the state file is
private and keeps no secret-looking variable, replays and clock skew told apart from a wrong secret, CURVE with
personal keys."""

from __future__ import annotations

import json
import os
import stat
import sys
import time

import pytest
import zmq

from malleable import _wire as W
from malleable._secret import Credential, load_credential, parse_credential
from malleable.controller.daemon import _protocol as P
from malleable.controller.daemon._access import OPERATOR, Principal, authorize, principal_of
from malleable.controller.daemon._client import Client, ControllerUnavailable
from malleable.controller.daemon._events import Reply, Request
from malleable.controller.daemon._hostpool import HostPool
from malleable.controller.daemon._keys import job_credential, user_credential
from malleable.errors import AuthError, Refusal, ReplayError
from tests.controller._daemon_util import HEAT, TOKEN, cli, daemon_thread, isolate, wait_final, wait_for

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def env(monkeypatch, tmp_path):
    return isolate(monkeypatch, tmp_path)


# ------------------------------------------------------------------------------------------------ the wire
def test_key_ids_in_the_seal():
    secret = b"a" * 64
    tx, rx = W.Wire(secret, key_id="user:ann"), W.Wire(secret, key_id="user:ann")
    frames = tx.pack({"v": 1, "type": "x"})
    assert len(frames[2]) == W.SEAL_SIZE + len("user:ann") and W.key_id_of(frames) == "user:ann"
    assert rx.unpack(frames, (1,))[0]["type"] == "x"
    # the shared secret's seal is unchanged (adhocfs and older peers): 56 bytes, no key id
    assert len(W.Wire(secret).pack({"v": 1, "type": "x"})[2]) == W.SEAL_SIZE
    # a message claiming another key id is refused before its MAC is even computed
    with pytest.raises(AuthError, match="sealed with key 'user:ann'"):
        W.Wire(secret, key_id="user:bob").unpack(tx.pack({"v": 1, "type": "x"}), (1,))
    with pytest.raises(AuthError, match="sealed with key 'user:ann'"):
        W.Wire(secret).unpack(tx.pack({"v": 1, "type": "x"}), (1,))
    # rewriting the key id in a captured seal (to speak as someone else) breaks the MAC
    frames = tx.pack({"v": 1, "type": "x"})
    frames[2] = frames[2][:24] + b"user:bob" + frames[2][32:]
    with pytest.raises(AuthError, match="not authenticated"):
        W.Wire(secret, key_id="user:bob").unpack(frames, (1,))
    with pytest.raises(Exception, match="bad key id"):
        W.Wire(secret, key_id="has space")


def test_keyring_picks_the_key_and_forgets_revoked_ones():
    keys = {"": b"operator", "user:ann": b"ann-secret", "job:3": b"job-secret"}
    ring = W.Keyring(keys.get)
    for kid, secret in keys.items():
        frames = W.Wire(secret, key_id=kid).pack({"v": 1, "type": "t", "who": kid})
        got, header, _ = ring.unpack(frames, (1,))
        assert got == kid and header["who"] == kid
        reply = ring.pack(kid, {"v": 1, "type": "ok"})              # the answer goes back under the same key
        assert W.Wire(secret, key_id=kid).unpack(reply, (1,))[0]["type"] == "ok"
    # a job key cannot pass for the operator: its secret does not make the operator's MAC
    forged = W.Wire(b"job-secret").pack({"v": 1, "type": "t"})
    with pytest.raises(AuthError, match="not authenticated"):
        ring.unpack(forged, (1,))
    assert len(ring) == 3
    del keys["job:3"]                                               # the job ended
    with pytest.raises(AuthError, match="unknown key 'job:3'"):
        ring.unpack(W.Wire(b"job-secret", key_id="job:3").pack({"v": 1, "type": "t"}), (1,))
    assert ring.prune() == 2
    keys["user:ann"] = b"new-secret"                                # a new key under the same name
    with pytest.raises(AuthError):
        ring.unpack(W.Wire(b"ann-secret", key_id="user:ann").pack({"v": 1, "type": "t"}), (1,))
    assert ring.unpack(W.Wire(b"new-secret", key_id="user:ann").pack({"v": 1, "type": "t"}), (1,))[0] == "user:ann"


def test_credentials_from_the_environment_and_key_files(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    for k in ("MALLEABLE_KEY", "MALLEABLE_TOKEN", "MALLEABLE_KEY_FILE"):
        monkeypatch.delenv(k, raising=False)
    ann = user_credential(b"op", "ann", "n" * 32)
    assert repr(ann) == "Credential(key_id='user:ann')"          # the secret never shows in a repr
    kf = tmp_path / "malleable" / "user-key"
    kf.parent.mkdir()
    kf.write_text(ann.text + "\n")
    kf.chmod(0o644)
    with pytest.raises(AuthError, match="must be 0600"):
        load_credential()
    kf.chmod(0o600)
    assert load_credential() == ann
    monkeypatch.setenv("MALLEABLE_TOKEN", "op")
    assert load_credential() == Credential("", b"op")               # the environment wins over files
    job = job_credential(b"op", "cid", 7)
    monkeypatch.setenv("MALLEABLE_KEY", job.text)
    assert load_credential() == job and job.key_id == "job:7"
    monkeypatch.setenv("MALLEABLE_KEY", "job:7:not-hex")
    with pytest.raises(AuthError, match="MALLEABLE_KEY is not a malleable key"):
        load_credential()
    assert parse_credential(ann.text) == ann


# ------------------------------------------------------------------------------------------------ the rules
def test_access_rules():
    ann, bob, job3 = principal_of("user:ann"), principal_of("user:bob"), principal_of("job:3")
    assert (ann, job3, principal_of("")) == (Principal("user", "ann"), Principal("job", job=3), OPERATOR)
    for bad in ("user:", "user:1x", "job:x", "admin:root", "user:a:b"):
        with pytest.raises(ValueError):
            principal_of(bad)
    committed = P.Committed(3, 1, "expand", 1, 2, 0.1, [], [], 0)
    for who in (OPERATOR, ann, job3):
        for m in (P.Queue(), P.Nodes(), P.History(0), P.Info(3), P.Status()):
            authorize(who, m)                                          # everyone reads
    authorize(OPERATOR, P.Shutdown(True))
    authorize(job3, committed)
    authorize(job3, P.Cancel(3))                                       # a job may cancel itself
    authorize(ann, P.Cancel(5), owner="ann")
    refused = [
        (ann, P.Shutdown(False), "only the operator"),
        (job3, P.AddUser("x", "n" * 16), "only the operator"),
        (ann, P.Users(), "only the operator"),
        (bob, P.Cancel(5), "belongs to ann"),
        (job3, P.Cancel(4), "speaks only for job 3"),
        (job3, dataclass_replace(committed, job_id=4), "speaks only for job 3"),
        (ann, committed, "only job 3's own key"),
        (job3, P.Submit("x", ["true"], 1, 1, 1, False, 0.0, "", "", "/", {}), "may not submit"),
    ]
    for who, m, why in refused:
        with pytest.raises(Refusal, match=why):
            authorize(who, m, owner="ann" if isinstance(m, P.Cancel) else None)


def dataclass_replace(m, **kw):
    import dataclasses

    return dataclasses.replace(m, **kw)


def test_core_refuses_a_forged_acknowledgement_and_changes_nothing(tmp_path):
    """A job's key acknowledging the resize order of another job: refused, the order stays in flight and the host
    it would have freed stays with its job (the controller would have handed out a host still in use)."""
    from malleable.controller import ResizeJob, StartJob
    from tests.controller._core_shell import Shell

    sh = Shell(str(tmp_path / "s.sqlite"), ("h1", "h2", "h3"), lambda s, t: [])
    a = sh.submit(P.Submit("a", ["x"], 2, 1, 3, True, 600.0, "", "", "/", {}, user="ann"), 0.0)
    b = sh.submit(P.Submit("b", ["x"], 1, 1, 1, False, 600.0, "", "", "/", {}, user="bob"), 0.0)
    sh.policy = lambda s, t: [StartJob(a, ("h1", "h2")), StartJob(b, ("h3",))]
    sh.schedule(1.0)
    sh.policy = lambda s, t: []
    sh.launched(a, 100, 1.0, 1.0)
    sh.launched(b, 101, 1.0, 1.0)
    sh.register(P.Register(a, 100, "h1", 2, ["h1", "h2"]), 1.0)
    sh.policy = lambda s, t: [ResizeJob(a, ("h1",))]
    sh.schedule(2.0)
    sh.policy = lambda s, t: []
    order = sh.jobs[a].order
    assert order is not None and order.kind == "shrink" and order.removed == ("h2",)
    before = (vars(sh.core.hosts["h2"]).copy(), list(sh.jobs[a].hosts))
    forged = P.Committed(a, order.seq, "shrink", 2, 1, 0.1, ["h2"], ["h1"], 0)
    with pytest.raises(Refusal, match=f"speaks only for job {b}"):
        sh.core.handle(Request(3.0, forged, Principal("job", job=b)))
    with pytest.raises(Refusal, match="only job"):
        sh.core.handle(Request(3.0, forged, Principal("user", "ann")))
    assert sh.jobs[a].order == order and (vars(sh.core.hosts["h2"]), sh.jobs[a].hosts) == before
    out = sh.core.handle(Request(3.0, forged, Principal("job", job=a)))        # the job itself: accepted
    assert [x.msg for x in out if type(x) is Reply] == [P.Ok()] and sh.jobs[a].order is None
    # a user's key submits as that user, whatever the message says; nothing secret-looking is kept
    sub = P.Submit("c", ["x"], 1, 1, 1, False, 600.0, "", "", "/", {"PATH": "/bin", "DB_PASSWORD": "pw",
                                                                     "aws_secret_access_key": "k"}, user="root")
    out = sh.core.handle(Request(4.0, sub, Principal("user", "bob")))
    c = next(x.msg.job_id for x in out if type(x) is Reply)
    assert sh.jobs[c].user == "bob" and sh.jobs[c].env == {"PATH": "/bin"}


# ------------------------------------------------------------------------------------------------ live
def job_env_of(path, timeout=20) -> dict[str, str]:
    wait_for(lambda: path.exists() and "MALLEABLE_KEY=" in path.read_text(), timeout, f"{path} written by the job")
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def test_job_keys_users_and_the_state_file(env, monkeypatch):
    state = env / "ctl.sqlite"
    monkeypatch.setenv("SUBMITTER_TOKEN", "tok-value-123")
    monkeypatch.setenv("PLAIN_SETTING", "kept")
    with daemon_thread(state, HostPool.local(3)) as (d, c):
        ann = c.add_user("ann")
        bob = c.add_user("bob")
        with Client(c.address, key=ann) as a:
            mine = a.submit(["sh", "-c", "env > env.txt; sleep 60"], 1, out=str(env / "a.out"))
        with Client(c.address, key=bob) as b:
            other = b.submit(["sleep", "60"], 1, out=str(env / "b.out"), user="ann")   # the key decides: bob
        jenv = job_env_of(env / "env.txt")
        assert "MALLEABLE_TOKEN" not in jenv and TOKEN not in (env / "env.txt").read_text()
        assert "SUBMITTER_TOKEN" not in jenv and jenv["PLAIN_SETTING"] == "kept"
        key = parse_credential(jenv["MALLEABLE_KEY"])
        assert key.key_id == f"job:{mine}"
        rows = {r["id"]: r for r in c.rows(P.Queue())}
        assert (rows[mine]["user"], rows[other]["user"]) == ("ann", "bob")
        wait_for(lambda: all(r["state"] == "RUNNING" for r in c.rows(P.Queue())), 20, "both jobs running")
        with Client(c.address, key=key) as jc:
            assert {r["id"] for r in jc.rows(P.Queue())} == {mine, other}       # a job reads the queue
            for m, why in ((P.Cancel(other), f"speaks only for job {mine}"),
                           (P.Committed(other, 1, "shrink", 2, 1, 0.1, ["local3"], [], 0), "speaks only for"),
                           (P.Progress(other, "p", {"fraction": 0.5}), "speaks only for"),
                           (P.Shutdown(False), "only the operator"),
                           (P.Submit("x", ["true"], 1, 1, 1, False, 0.0, "", "", "/", {}), "may not submit")):
                with pytest.raises(Refusal, match=why):
                    jc.call(m)
        with Client(c.address, key=ann) as a:
            with pytest.raises(Refusal, match="belongs to bob"):
                a.call(P.Cancel(other))
            with pytest.raises(Refusal, match="only the operator"):
                a.users()
        assert {r["id"]: r["state"] for r in c.rows(P.Queue())} == {mine: "RUNNING", other: "RUNNING"}
        with Client(c.address, key=ann) as a:
            a.call(P.Cancel(mine))
        wait_final(c, [mine], 60)
        with Client(c.address, key=key, timeout=3) as jc:                      # the job ended: its key is void
            with pytest.raises(AuthError, match=f"did not accept the key job:{mine}"):
                jc.rows(P.Queue())
        assert [u["name"] for u in c.users()] == ["ann", "bob"]
        c.remove_user("ann")
        with Client(c.address, key=ann, timeout=3) as a:
            with pytest.raises(AuthError, match="did not accept the key user:ann"):
                a.rows(P.Queue())
        again = c.add_user("bob")                                               # a new key: the old one is void
        with Client(c.address, key=bob, timeout=3) as b:
            with pytest.raises(AuthError):
                b.rows(P.Queue())
        with Client(c.address, key=again) as b:
            b.call(P.Cancel(other))
        wait_final(c, [other], 60)
    for f in (state, state.with_name(state.name + "-wal")):
        if f.exists():
            assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
    raw = b"".join(p.read_bytes() for p in env.glob("ctl.sqlite*") if p.is_file())
    assert b"tok-value-123" not in raw and b"SUBMITTER_TOKEN" not in raw and TOKEN.encode() not in raw
    assert ann.secret not in raw and again.secret not in raw                      # keys are derived, never stored


def test_replays_and_clock_skew_are_told_apart_from_a_wrong_secret(env, monkeypatch):
    with daemon_thread(env / "ctl.sqlite", HostPool.local(1)) as (d, c):
        with Client(c.address, token=b"not-the-secret", timeout=5) as bad:
            with pytest.raises(AuthError, match="did not accept the shared secret") as e:
                bad.rows(P.Queue())
            assert not isinstance(e.value, ReplayError)
        # a captured request sent again: authentic, refused as a replay, under the request's id
        ctx = zmq.Context()
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(c.address)
        try:
            ann = c.add_user("ann")
            frames = P.encode(P.Submit("x", ["true"], 1, 1, 1, False, 0.0, "", "", "/", {}), ann, 41)
            for expect in (P.Submitted, P.Error):
                s.send_multipart([b"", *frames])
                assert s.poll(5000)
                reply, rid = P.decode(s.recv_multipart()[1:], ann)
                assert rid == 41 and isinstance(reply, expect), reply
            assert reply.kind == "ReplayError" and "replayed" in reply.msg
        finally:
            s.close(0)
            ctx.term()
        assert len(c.rows(P.History(0))) == 1                                  # submitted once
        # this host's clock 10 minutes ahead: the daemon refuses, and the client says it is the clock
        wire = W.shared(TOKEN.encode())
        wire.clock = lambda: time.time() + 600
        try:
            with pytest.raises(ReplayError, match=r"refused the request: message sent -6\d\d\.\d s from this "):
                c.rows(P.Queue())
        finally:
            wire.clock = time.time
        assert [r["id"] for r in c.rows(P.History(0))] == [1]                  # answers again


def test_encryption_with_personal_keys_and_a_malleable_job(env, monkeypatch):
    """MALLEABLE_ENCRYPT=1: CURVE on the daemon, the command line (operator and user keys) and a malleable job's
    runtime link (its job key and the daemon's public key from its environment); a peer without encryption gets
    nothing."""
    monkeypatch.setenv("MALLEABLE_ENCRYPT", "1")
    state = env / "ctl.sqlite"
    with daemon_thread(state, HostPool.local(2), "malleable-fill") as (d, c):
        assert d.curve_public and json.loads((env / "ctl.sqlite.addr").read_text())["curve"] == d.curve_public
        ann = c.add_user("ann")
        job_env = dict(os.environ, PROG_ITERS="60", PROG_SLEEP="0.05", MALLEABLE_ADAPT_TIMEOUT="30")
        with Client(state=str(state), key=ann) as a:                          # public key from the address file
            jid = a.submit([sys.executable, HEAT], 1, 1, 2, True, 120.0, out=str(env / "heat.out"), env=job_env)
        assert wait_final(c, [jid], 90) == {jid: "COMPLETED"}
        assert [s["kind"] for s in c.info(jid).steps] == ["start", "expand"]   # the job's link spoke, encrypted
        done = [json.loads(x) for x in (env / "heat.out").read_text().splitlines() if '"done"' in x]
        assert done and done[-1]["ok"]
        monkeypatch.delenv("MALLEABLE_ENCRYPT")
        with Client(c.address, key=ann, timeout=2) as plain:
            with pytest.raises(ControllerUnavailable):
                plain.rows(P.Queue())
        monkeypatch.setenv("MALLEABLE_ENCRYPT", "1")
        from malleable.errors import ConfigError

        with pytest.raises(ConfigError, match="public key is unknown"):
            Client(c.address, key=ann)                                          # no address file, no key


def test_user_commands(env):
    state = str(env / "ctl.sqlite")
    with daemon_thread(env / "ctl.sqlite", HostPool.local(1)) as (d, c):
        code, out, err = cli("controller", "add-user", "ann", "--state", state)
        assert code == 0 and "give this key to ann" in err
        key = parse_credential(out.strip())
        assert key.key_id == "user:ann"
        kf = env / "keys" / "bob.key"
        code, out, _ = cli("controller", "add-user", "bob", "--state", state, "--key-file", str(kf))
        assert code == 0 and out.startswith(f"wrote the key of bob to {kf} (mode 0600")
        assert stat.S_IMODE(kf.stat().st_mode) == 0o600 and parse_credential(kf.read_text()).key_id == "user:bob"
        code, out, _ = cli("controller", "users", "--state", state)
        assert code == 0 and [ln.split()[0] for ln in out.splitlines()] == ["USER", "ann", "bob"]
        assert cli("controller", "add-user", "9lives", "--state", state)[0:2] == (1, "")
        assert cli("controller", "remove-user", "ann", "--state", state) == (
            0, "removed user ann: their key no longer works\n", "")
        assert cli("controller", "remove-user", "ann", "--state", state) == (
            1, "", "malleable controller: error: no user ann\n")
        code, out, _ = cli("controller", "users", "--state", state, "--json")
        assert [u["name"] for u in json.loads(out)["users"]] == ["bob"]


def test_users_session_in_the_docs_runs(env):
    """The console session of docs/controller.md's "Users and keys", command by command, output compared (times,
    addresses, the login name and the key file's home folder normalised); it starts and stops its controller."""
    import getpass
    import re
    import subprocess
    from pathlib import Path

    from malleable._secret import user_key_path

    doc = Path(__file__).resolve().parents[2] / "docs" / "controller.md"
    section = doc.read_text().split("## Users and keys", 1)[1]
    block = re.search(r"```console\n(.*?)```", section, re.S).group(1)
    steps: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ export MALLEABLE_CONTROLLER_STATE="):
            continue                            # the state file is the test's own
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line)

    def norm(text: str) -> str:
        text = text.replace(str(user_key_path()), "KEYFILE").replace("/root/.config/malleable/user-key", "KEYFILE")
        text = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", "TIME", text)
        text = re.sub(r" \d+:\d\d ", " T ", text)
        text = re.sub(r"tcp://[\d.]+:\d+", "ADDR", text)
        text = re.sub(r"\(pid \d+, state \S+, log \S+\)", "(PID, STATE)", text)
        return re.sub(rf"\b{re.escape(getpass.getuser())}\b", "root", text).rstrip("\n")

    e = dict(os.environ, MALLEABLE_CONTROLLER_STATE=str(env / "ctl.sqlite"),
             PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    assert steps[0][0] == "malleable controller start --local 2"
    assert steps[-1][0] == "malleable controller stop --cancel-jobs"
    try:
        for cmd, want in steps:
            p = subprocess.run(["sh", "-c", cmd], cwd=env, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, timeout=60)
            assert norm(p.stdout) == norm("\n".join(want)), (cmd, p.stdout)
    finally:
        subprocess.run([sys.executable, "-m", "malleable", "controller", "stop", "--cancel-jobs"], env=e,
                       capture_output=True, timeout=60)
