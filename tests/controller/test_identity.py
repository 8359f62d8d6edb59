"""Controller users are Unix users, and the daemon never acts through a link: ``add-user`` takes existing Unix
users only (not root, not the operator), writes the key file new, by descriptor, and gives it away with fchown, so
a racing user swapping names for symlinks never gains a file; jobs run as their submitter."""

from __future__ import annotations

import os
import stat
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from malleable._secret import parse_credential
from malleable.controller.daemon._hostpool import HostPool
from malleable.controller.daemon._identity import write_private
from malleable.errors import ConfigError, Refusal
from tests.controller._daemon_util import cli, daemon_thread, isolate
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
