"""Controller users are Unix users, and the daemon never acts through a link: ``add-user`` takes existing Unix
users only (not root, not the operator), writes the key file new, by descriptor, and gives it away with fchown, so
a racing user swapping names for symlinks never gains a file; jobs run as their submitter."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import psutil
import pytest

from malleable._secret import parse_credential
from malleable.controller.daemon import _protocol as P
from malleable.controller.daemon._client import Client
from malleable.controller.daemon._hostpool import HostPool
from malleable.controller.daemon._identity import write_private
from malleable.controller.daemon._munge import HELLO_KEY, MUNGE_SOCKET_ENV, MungeHello, new_session
from malleable.errors import AuthError, ConfigError, Refusal
from tests.controller._daemon_util import TOKEN, cli, daemon_thread, isolate, wait_final, wait_for
from tests.controller._users import unix_users

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def env(monkeypatch, tmp_path):
    return isolate(monkeypatch, tmp_path)


def test_add_user_takes_unix_users_only(env):
    state = str(env / "ctl.sqlite")
    with unix_users(1) as (ann,), daemon_thread(env / "ctl.sqlite", HostPool.local(1)) as (d, c):
        kf = env / "ann.key"
        code, out, err = cli("controller", "add-user", ann.name, "--state", state, "--key-file", str(kf))
        assert (code, err) == (0, "") and out == f"wrote the key of {ann.name} to {kf} (mode 0600, owner {ann.name})\n"
        st = kf.lstat()
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600 and (st.st_uid, st.st_gid) == (
            ann.uid, ann.gid)
        assert parse_credential(kf.read_text()).key_id == f"user:{ann.name}"
        for name, why in (("root", "root is root: root is the operator, not a user"),
                          ("nosuchuser42", "no Unix user nosuchuser42 on this host"),
                          ("9lives", "bad user name")):
            code, out, err = cli("controller", "add-user", name, "--state", state)
            assert code == 1 and out == "" and len(err.splitlines()) == 1 and why in err, err
        # the daemon refuses them too, (the daemon runs as root here: its own account)
        with pytest.raises(Refusal, match="root is the operator"):
            c.add_user("root")
        assert [u["name"] for u in c.users()] == [ann.name]
        # a folder anyone may write to without the sticky bit is refused; nothing is written
        open_dir = env / "open"
        open_dir.mkdir()
        open_dir.chmod(0o777)
        code, _, err = cli("controller", "add-user", ann.name, "--state", state, "--key-file", str(open_dir / "k"))
        assert code == 1 and "writable by everyone" in err and list(open_dir.iterdir()) == []


RACER = """
import os, sys
home, target = sys.argv[1], sys.argv[2]
while True:
    try:
        names = os.listdir(home)
    except OSError:
        continue
    for n in names:
        if n.startswith(".key."):
            try:
                os.unlink(os.path.join(home, n))
                os.symlink(target, os.path.join(home, n))
            except OSError:
                pass
"""


def test_a_racing_symlink_never_gains_a_file(env):
    """The user owns the key's folder and, in a process of their own, swaps the temporary file for symlinks to a
    root file as fast as they can while the key is written over and over: the root file keeps its owner and
    bytes (the key writer of before lost this race within a few hundred tries)."""
    with unix_users(1) as (ann,):
        target = env / "root-only"
        target.write_bytes(b"root's secret\n")
        target.chmod(0o600)
        folder = Path(tempfile.mkdtemp(prefix="mlb-race-", dir="/tmp"))
        os.chmod(folder, 0o755)
        os.chown(folder, ann.uid, ann.gid)                       # the user's own folder: they may rename in it
        racer = subprocess.Popen(["/usr/bin/python3", "-c", RACER, str(folder), str(target)], user=ann.uid,
                                 group=ann.gid, extra_groups=[], stdin=subprocess.DEVNULL)
        refused = written = 0
        try:
            for i in range(3000):
                try:
                    write_private(str(folder / "key"), b"user:x:key\n", ann)
                    written += 1
                except ConfigError as e:
                    assert "swapped" in str(e) or "not a plain file" in str(e), e
                    refused += 1
                st = target.lstat()
                assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, 0o600), f"try {i}: target given away"
                assert target.read_bytes() == b"root's secret\n"
                if refused >= 20 and i >= 200:
                    break
        finally:
            racer.kill()
            racer.wait(10)
            shutil.rmtree(folder, ignore_errors=True)
        assert refused >= 1, "the racer never got in: the test proved nothing"


@pytest.fixture
def workdir():
    """A folder every test user can enter (pytest's own are root's, mode 0700), removed after."""
    d = Path(tempfile.mkdtemp(prefix="mlb-users-", dir="/tmp"))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _home(workdir: Path, u) -> Path:
    h = workdir / u.name
    h.mkdir()
    os.chown(h, u.uid, u.gid)
    os.chmod(h, 0o700)
    return h


def test_jobs_run_as_their_submitter(env, workdir):
    """The daemon runs as root (with the operator's secret in its environment); each user's job runs as that Unix
    user: its files are that user's, it cannot read the daemon's environment nor the other user's folder, and the
    other user's key cannot cancel it (the operator's can)."""
    with unix_users(2) as (ann, bob), daemon_thread(env / "ctl.sqlite", HostPool.local(2)) as (d, c):
        assert os.environ["MALLEABLE_TOKEN"] == TOKEN                         # what a job must not reach
        keys = {u.name: c.add_user(u.name) for u in (ann, bob)}
        homes = {u.name: _home(workdir, u) for u in (ann, bob)}
        probe = (f"id -u > id.txt; id -g >> id.txt; cat /proc/{os.getpid()}/environ > environ.txt 2>&1; "
                 f"echo \"environ $?\" > probe.txt; ls {homes[bob.name]} >> probe.txt 2>&1; echo \"ls $?\" >> probe.txt; "
                 "env > env.txt; sleep 60")
        with Client(c.address, key=keys[ann.name]) as a:
            jid = a.submit(["sh", "-c", probe], 1, out="job.out", cwd=str(homes[ann.name]),
                           env={"PATH": os.environ["PATH"]})
        rec = c.info(jid).job
        assert (rec["user"], rec["uid"], rec["gid"]) == (ann.name, ann.uid, ann.gid)
        probe_file = homes[ann.name] / "probe.txt"
        wait_for(lambda: probe_file.exists() and "ls " in probe_file.read_text(), 30, "the job's probe")
        assert (homes[ann.name] / "id.txt").read_text().split() == [str(ann.uid), str(ann.gid)]
        lines = probe_file.read_text().splitlines()
        assert lines[0] == "environ 1" and lines[-1] == "ls 2", lines     # refused, not read
        assert TOKEN not in (homes[ann.name] / "environ.txt").read_text()
        assert TOKEN not in (homes[ann.name] / "env.txt").read_text()
        for f in ("job.out", "id.txt", "probe.txt", "env.txt"):
            st = (homes[ann.name] / f).lstat()
            assert (st.st_uid, st.st_gid) == (ann.uid, ann.gid), f
        with Client(c.address, key=keys[bob.name]) as b:
            with pytest.raises(Refusal, match=f"job {jid} belongs to {ann.name}"):
                b.call(P.Cancel(jid))
        assert c.info(jid).job["state"] == "RUNNING"
        c.call(P.Cancel(jid))                                                 # the operator may
        assert wait_final(c, [jid], 60) == {jid: "CANCELLED"}



def test_a_users_staging_reads_and_writes_as_that_user(env, workdir):
    """A daemon running as root stages a user's job as that Unix user: the user's own file goes in and comes back
    out owned by the user; a file only root may read is refused (the job fails at its stage-in, nothing copied)."""
    from tests.controller._daemon_util import kill_tagged

    with unix_users(1) as (ann,), daemon_thread(env / "ctl.sqlite", HostPool.local(2), "fcfs-bb",
                                                bb_capacity=64 << 20) as (d, c):
        try:
            key = c.add_user(ann.name)
            home = _home(workdir, ann)
            mine = home / "in.txt"
            mine.write_text("ann's data\n")
            os.chown(mine, ann.uid, ann.gid)
            secret = workdir / "root-only.txt"
            secret.write_text("root's data\n")
            os.chmod(secret, 0o600)
            job = {"cwd": str(home), "env": {"PATH": os.environ["PATH"]}, "bb": float(16 << 20)}
            with Client(c.address, key=key) as a:
                ok = a.submit(["true"], 1, out="ok.out", stage_in=[f"{mine}:/in.txt"],
                              stage_out=[f"/in.txt:{home}/out.txt"], **job)
                bad = a.submit(["true"], 1, out="bad.out", stage_in=[f"{secret}:/x.txt"], **job)
            final = wait_final(c, [ok, bad], 120)
            assert final == {ok: "COMPLETED", bad: "FAILED"}, [c.info(j).events for j in (ok, bad)]
            wait_for(lambda: (c.info(ok).job.get("fs") or {}).get("phase") == "stopped", 60, "the stage-out")
            assert "Permission denied" in c.info(bad).job["reason"], c.info(bad).job["reason"]
            out = home / "out.txt"
            assert out.read_text() == "ann's data\n"
            st = out.lstat()
            assert (st.st_uid, st.st_gid) == (ann.uid, ann.gid)
        finally:
            kill_tagged(d.fs.cid)

def test_a_user_job_cannot_write_where_its_user_cannot(env, workdir):
    """Output paths are opened by the job's user: a path only root may write is refused to the job (exit code
    126, nothing created), as it would be to the user; the operator's key with a name that is no Unix user runs
    as the daemon, a user key without a Unix account is refused."""
    with unix_users(1) as (ann,), daemon_thread(env / "ctl.sqlite", HostPool.local(1)) as (d, c):
        key = c.add_user(ann.name)
        home = _home(workdir, ann)
        with Client(c.address, key=key) as a:
            jid = a.submit(["true"], 1, out=str(env / "root-only.out"), cwd=str(home),
                           env={"PATH": os.environ["PATH"]})
        assert wait_final(c, [jid], 60) == {jid: "FAILED"}
        assert c.info(jid).job["exit_code"] == 126 and not (env / "root-only.out").exists()
        c.remove_user(ann.name)
        ghost = c.add_user("nosuchuser42")                                    # the API may name anyone...
        with Client(c.address, key=ghost) as g, pytest.raises(Refusal, match="no Unix user on this host"):
            g.submit(["true"], 1, out="x.out")                               # ...but such a key cannot submit
        assert c.rows(P.Queue()) == []


AS_USER = """
import json, os, sys
from malleable.controller.daemon import _protocol as P
from malleable.controller.daemon._client import Client
from malleable.errors import MalleableError
uid, gid, state, address = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[5]
os.setgroups([])
os.setgid(gid)
os.setuid(uid)                       # from here on this process is the user: the kernel says so to the daemon
out = {}
try:
    with (Client(address, munge=True) if address else Client(state=state)) as c:
        out["address"] = c.address
        for step in json.loads(sys.argv[4]):
            try:
                if step[0] == "submit":
                    out["submit"] = c.submit(["sleep", "60"], 1, out="job.out", cwd=step[1], user=step[2],
                                             env={"PATH": "/usr/bin:/bin"})
                elif step[0] == "cancel":
                    c.call(P.Cancel(step[1]))
                    out["cancel"] = "ok"
                elif step[0] == "queue":
                    out["queue"] = [[r["id"], r["user"], r["uid"]] for r in c.rows(P.Queue())]
            except MalleableError as e:
                out[step[0]] = f"{type(e).__name__}: {e}"
except MalleableError as e:
    out["error"] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
"""


def as_user(u, state, *steps, address: str = "") -> dict:
    """Run ``steps`` through the daemon's local socket in a process of Unix user ``u`` (it imports as root, then
    drops to the user before connecting: this Python lives under /root, which the user cannot read)."""
    import json
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLEABLE_") or k == MUNGE_SOCKET_ENV}
    p = subprocess.run([sys.executable, "-c", AS_USER, str(u.uid), str(u.gid), str(state), json.dumps(steps),
                        address],
                       capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_local_requests_carry_the_senders_unix_user(workdir, monkeypatch):
    """On the daemon's host a request needs no key: the local socket gives the daemon the sender's uid
    (SO_PEERCRED). A user added by the operator submits as themself whatever the request claims, cannot cancel
    another user's job; a Unix user never added is refused; root is the operator."""
    isolate(monkeypatch, workdir)
    state = workdir / "ctl.sqlite"
    with unix_users(3) as (ann, bob, eve), daemon_thread(state, HostPool.local(2)) as (d, c):
        assert d.gate.local_address == f"ipc://{state}.sock"
        for u in (ann, bob):
            c.add_user(u.name)
        home = _home(workdir, ann)
        got = as_user(ann, state, ["submit", str(home), bob.name], ["queue"])
        assert got["address"] == d.gate.local_address and isinstance(got["submit"], int), got
        jid = got["submit"]
        assert got["queue"] == [[jid, ann.name, ann.uid]]                      # the kernel's word, not the claim
        wait_for(lambda: (home / "job.out").exists(), 30, "ann's job opening its output")
        assert (home / "job.out").stat().st_uid == ann.uid
        got = as_user(bob, state, ["cancel", jid])
        assert got["cancel"] == f"Refusal: job {jid} belongs to {ann.name}: user {bob.name} may cancel only their own jobs"
        got = as_user(eve, state, ["queue"])
        assert got["queue"].startswith(f"AuthError: Unix user {eve.name} (uid {eve.uid}) is not a user of this "
                                       "controller"), got
        assert c.info(jid).job["state"] == "RUNNING"
        monkeypatch.delenv("MALLEABLE_TOKEN")                                  # root, keyless, on the local socket
        with Client(state=str(state)) as root:
            assert root.address == d.gate.local_address
            root.call(P.Cancel(jid))
        assert wait_final(c, [jid], 60) == {jid: "CANCELLED"}
    assert not (workdir / "ctl.sqlite.sock").exists()


@pytest.fixture
def munged(workdir, monkeypatch):
    """A MUNGE daemon of our own (a fresh key, its socket in ``workdir``), stopped after; as Slurm's hosts run."""
    if not shutil.which("munged"):
        pytest.skip("needs Debian's munge package (.ci/run installs it)")
    d = workdir / "munge"
    d.mkdir(mode=0o755)
    (d / "key").write_bytes(os.urandom(128))
    (d / "key").chmod(0o600)
    sock = d / "sock"
    subprocess.run(["munged", "--force", f"--socket={sock}", f"--key-file={d / 'key'}", f"--pid-file={d / 'pid'}",
                    f"--seed-file={d / 'seed'}", f"--log-file={d / 'log'}"], check=True, timeout=30)
    try:
        wait_for(lambda: sock.exists(), 10, "munged's socket")
        monkeypatch.setenv(MUNGE_SOCKET_ENV, str(sock))
        yield sock
    finally:
        subprocess.run(["munged", "--stop", f"--socket={sock}"], capture_output=True, timeout=30)
        wait_for(lambda: not (d / "pid").exists() or not psutil.pid_exists(int((d / "pid").read_text() or 0)),
                 15, "munged stopped")


def test_munge_proves_the_unix_user_across_hosts(workdir, munged, monkeypatch):
    """Over TCP without keys: a MUNGE credential (decoded by the daemon's munged) opens a session as the sender's
    Unix user. A user submits as themself, cannot cancel another's job; a Unix user never added, a replayed or
    forged credential are refused."""
    isolate(monkeypatch, workdir)
    state = workdir / "ctl.sqlite"
    with unix_users(3) as (ann, bob, eve), daemon_thread(state, HostPool.local(2)) as (d, c):
        for u in (ann, bob):
            c.add_user(u.name)
        home = _home(workdir, ann)
        got = as_user(ann, state, ["submit", str(home), bob.name], ["queue"], address=c.address)
        assert got["address"] == c.address and isinstance(got["submit"], int), got
        jid = got["submit"]
        assert got["queue"] == [[jid, ann.name, ann.uid]]
        got = as_user(bob, state, ["cancel", jid], address=c.address)
        assert got["cancel"] == f"Refusal: job {jid} belongs to {ann.name}: user {bob.name} may cancel only their own jobs"
        got = as_user(eve, state, ["queue"], address=c.address)
        assert got["error"].startswith(f"AuthError: Unix user {eve.name} (uid {eve.uid}) is not a user"), got
        cred, _ = new_session()
        with Client(c.address, key=HELLO_KEY) as h:
            h.call(MungeHello(cred))
            with pytest.raises(AuthError, match="MUNGE credential refused: Replayed credential"):
                h.call(MungeHello(cred))                                    # munged decodes a credential once
            with pytest.raises(AuthError, match="MUNGE credential refused"):
                h.call(MungeHello("MUNGE:" + "A" * 120 + ":"))
            with pytest.raises(AuthError, match="only munge_hello"):
                h.call(P.Cancel(jid))                                         # the hello seal proves nothing
        assert c.info(jid).job["state"] in ("STARTING", "RUNNING")
        with Client(c.address, munge=True) as root:                           # root's credential: the operator
            root.call(P.Cancel(jid))
        assert wait_final(c, [jid], 60) == {jid: "CANCELLED"}


NOT_ROOT = """
import json, os, sys
from malleable.controller.daemon._identity import refuse_name, run_as
from malleable.errors import Refusal
uid, gid, name, other = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
os.setgroups([])
os.setgid(gid)
os.setuid(uid)
out = {"operator": run_as("operator", "", name), "own": refuse_name(name), "other": refuse_name(other)}
try:
    run_as("user", other, other)
except Refusal as e:
    out["user"] = str(e)
print(json.dumps(out))
"""


def test_a_daemon_of_an_ordinary_user_takes_jobs_from_that_user_only():
    """A daemon that is not root cannot run a job as anyone else: only its own user (the operator) submits, and
    that user's own name is no controller user."""
    import json
    import sys

    with unix_users(2) as (ann, bob):
        p = subprocess.run([sys.executable, "-c", NOT_ROOT, str(ann.uid), str(ann.gid), ann.name, bob.name],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        out = json.loads(p.stdout)
    assert out["operator"] == [ann.uid, ann.gid]                              # as the daemon itself
    assert out["own"] == f"{ann.name} is the operator's own account (the one this runs as): it needs no user key"
    assert out["other"] == ""
    assert out["user"] == (f"submit: the controller runs as Unix user {ann.name}, not root, so its jobs run as that "
                           f"user: only the operator may submit (user {bob.name} may not)")
