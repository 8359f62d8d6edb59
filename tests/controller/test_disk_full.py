"""A full disk under the state (a small tmpfs): a submit whose record could not be saved is not queued and its
answer says so; the daemon keeps running, refuses new work with the reason, and carries on (queues, runs) when
space returns. Every answer matches what the state holds afterwards."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time

import psutil
import pytest

from malleable.controller.daemon._paths import addr_file
from tests.controller._daemon_util import cli, isolate, kill_leftovers, wait_for

pytestmark = pytest.mark.timeout(150)


@pytest.fixture
def env(monkeypatch, tmp_path):
    return isolate(monkeypatch, tmp_path)


@pytest.fixture
def small_disk(tmp_path):
    """A 3 MiB tmpfs, unmounted afterwards."""
    where = tmp_path / "disk"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m,mode=0700", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(path) -> None:
    """Fill the file system of ``path`` to the last byte."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (65536, 4096, 1):
            with contextlib.suppress(OSError):
                while os.write(fd, b"\0" * size) == size:
                    pass
    finally:
        os.close(fd)


def test_a_full_disk_refuses_new_work_and_the_daemon_carries_on(env, small_disk):
    state = str(small_disk / "ctl.sqlite")
    pid = 0
    try:
        code, out, err = cli("controller", "start", "--local", "1", "--state", state, "--tick", "0.2")
        assert code == 0, err
        pid = json.loads(addr_file(state).read_text())["pid"]
        ok = []
        for _ in range(3):
            code, out, err = cli("submit", "--state", state, "--parsable", "-o", str(env / "o%j"), "--", "true")
            assert code == 0, err
            ok.append(int(out))
        wait_for(lambda: {r["id"] for r in json.loads(cli("history", "--state", state, "--json")[1])["jobs"]
                          if r["state"] == "COMPLETED"} == set(ok), 30, "the first jobs to end")
        filler = small_disk / "filler"
        fill(filler)
        refused, accepted = [], []
        for i in range(200):                   # the WAL may have room for a few; then a commit fails
            code, out, err = cli("submit", "--state", state, "--parsable", "-J", f"full{i}", "-o",
                                 str(env / "o%j"), "--", "sh", "-c", "exit 0")
            if code == 0:
                accepted.append(int(out))
            else:
                assert err.count("\n") == 1 and "Traceback" not in err, err
                assert "not queued" in err and "full" in err, err
                refused.append(f"full{i}")
                if len(refused) >= 3:
                    break
        assert len(refused) == 3, "the disk never filled"
        wait_for(lambda: psutil.pid_exists(pid) and cli("controller", "status", "--state", state)[0] == 0, 10,
                 "the daemon to answer")
        code, out, _ = cli("controller", "status", "--state", state, "--json")
        assert "full" in json.loads(out)["state_error"]
        t_full = time.monotonic()
        wait_for(lambda: time.monotonic() - t_full > 8 and cli("queue", "--state", state)[0] == 0, 15,
                 "8 s of a full disk")
        assert psutil.pid_exists(pid)
        names = [j["name"] for j in json.loads(cli("queue", "--state", state, "--json")[1])["jobs"]]
        assert not set(refused) & set(names)
        filler.unlink()                        # space returns
        wait_for(lambda: json.loads(cli("controller", "status", "--state", state, "--json")[1])["state_error"] == "",
                 15, "the daemon to write again")
        code, out, err = cli("submit", "--state", state, "--parsable", "-J", "after", "-o", str(env / "o%j"), "--",
                             "true")
        assert code == 0, err
        after = int(out)
        want = set(ok) | set(accepted) | {after}

        def ended():
            rows = json.loads(cli("history", "--state", state, "--json")[1])["jobs"]
            return rows if {r["id"] for r in rows if r["state"] == "COMPLETED"} >= want else None
        rows = wait_for(ended, 60, "every accepted job to complete")
        assert {r["id"] for r in rows} == want                      # the refused ones never existed
        assert not set(refused) & {r["name"] for r in rows}
    finally:
        if pid:
            cli("controller", "stop", "--state", state, "--cancel-jobs")
            kill_leftovers(pid if psutil.pid_exists(pid) else 0, "")
            wait_for(lambda: not psutil.pid_exists(pid), 10, "the daemon to exit")


def test_a_job_ending_on_a_full_disk_keeps_its_exit_code(env, small_disk):
    """The shepherd cannot write the exit-code file on a full disk; the daemon takes the code from the shepherd's
    own exit status, and the job's end is saved once space returns."""
    state = str(small_disk / "ctl.sqlite")
    go = env / "go"
    pid = 0
    try:
        code, out, err = cli("controller", "start", "--local", "1", "--state", state, "--tick", "0.2")
        assert code == 0, err
        pid = json.loads(addr_file(state).read_text())["pid"]
        code, out, err = cli("submit", "--state", state, "--parsable", "-o", str(env / "o%j"), "--", "sh", "-c",
                             f"while [ ! -e {go} ]; do sleep 0.05; done; exit 3")
        assert code == 0, err
        jid = int(out)
        wait_for(lambda: cli("queue", "--state", state, "--json")[0] == 0 and [
            j["state"] for j in json.loads(cli("queue", "--state", state, "--json")[1])["jobs"]] == ["RUNNING"], 30,
            "the job to run")
        filler = small_disk / "filler"
        fill(filler)
        go.touch()
        wait_for(lambda: not any(p.info["cmdline"] and str(go) in " ".join(p.info["cmdline"])
                                 for p in psutil.process_iter(["cmdline"])), 30, "the job to end")
        filler.unlink()
        rows = wait_for(lambda: [r for r in json.loads(cli("history", "--state", state, "--json")[1])["jobs"]
                                 if r["id"] == jid and r["state"] != "RUNNING"] or None, 30, "the job's end saved")
        assert rows[0]["state"] == "FAILED" and rows[0]["exit_code"] == 3, rows
    finally:
        if pid:
            cli("controller", "stop", "--state", state, "--cancel-jobs")
            kill_leftovers(pid if psutil.pid_exists(pid) else 0, "")
            wait_for(lambda: not psutil.pid_exists(pid), 10, "the daemon to exit")
