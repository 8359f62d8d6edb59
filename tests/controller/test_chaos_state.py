"""Seeded chaos on the controller's state: two ``controller start`` racing on one state on a small tmpfs, then a
seeded schedule of submissions, a disk filled and freed, and more starts racing the living daemon. One daemon
serves from start to end; every submit answered with an id runs exactly once, every submit refused says "not
queued" and never runs; nothing but the daemon ever holds the state.

The seed is ``MALLEABLE_CHAOS_SEED`` (default below); a failure names it, so a run can be repeated.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import psutil
import pytest

from malleable.controller.daemon._paths import addr_file, lock_file
from tests.controller._daemon_util import cli, isolate, kill_leftovers, wait_for
from tests.controller.test_disk_full import fill, small_disk  # noqa: F401 - the fixture

pytestmark = pytest.mark.timeout(240)

SEED = int(os.environ.get("MALLEABLE_CHAOS_SEED", "20261126"))


@pytest.fixture
def env(monkeypatch, tmp_path):
    return isolate(monkeypatch, tmp_path)


def starts(state: str, n: int) -> list[tuple[int, str, str]]:
    argv = [sys.executable, "-m", "malleable", "controller", "start", "--local", "2", "--state", state,
            "--tick", "0.2"]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(n)]
    return [(p.wait(60), *p.communicate()) for p in procs]


def test_chaos_full_disk_and_racing_starts(env, small_disk):  # noqa: F811 - the fixture
    rng = random.Random(SEED)
    state = str(small_disk / "ctl.sqlite")
    filler = small_disk / "filler"
    pid = 0
    try:
        first = starts(state, 2)
        assert sorted(r[0] for r in first) == [0, 1], (SEED, first)
        pid = json.loads(addr_file(state).read_text())["pid"]
        accepted: list[int] = []
        refused: list[str] = []
        for step in range(40):
            what = rng.choice(["submit"] * 5 + ["fill", "free", "race"])
            if what == "submit":
                name = f"s{step}"
                code, out, err = cli("submit", "--state", state, "--parsable", "-J", name, "-o", os.devnull, "--",
                                     "sh", "-c", f"exit 0 # {rng.random()}")
                if code == 0:
                    accepted.append(int(out))
                else:
                    assert "not queued" in err and err.count("\n") == 1, (SEED, step, err)
                    refused.append(name)
            elif what == "fill" and not filler.exists():
                fill(filler)
            elif what == "free" and filler.exists():
                filler.unlink()
            elif what == "race":
                for code, _, err in starts(state, rng.randint(1, 2)):
                    assert code == 1 and f"pid {pid} holds the lock" in err, (SEED, step, err)
            assert psutil.pid_exists(pid) and int(lock_file(state).read_text()) == pid, (SEED, step)
        if filler.exists():
            filler.unlink()
        assert accepted, SEED
        print(f"seed {SEED}: {len(accepted)} accepted, {len(refused)} refused as not queued")  # noqa: T201

        def done():
            rows = json.loads(cli("history", "--state", state, "--json")[1])["jobs"]
            final = all(r["state"] in ("COMPLETED", "FAILED") for r in rows)
            return rows if final and len(rows) >= len(accepted) else None
        rows = wait_for(done, 90, f"every accepted job to end (seed {SEED})")
        assert sorted(r["id"] for r in rows) == sorted(accepted), SEED          # exactly these
        assert not {r["name"] for r in rows} & set(refused), SEED
        for r in rows:                         # each ran once and kept its code (one ending on the full disk too)
            events = json.loads(cli("info", "--state", state, "--json", str(r["id"]))[1])["events"]
            assert [e["kind"] for e in events].count("start") == 1, (SEED, r["id"], events)
            assert r["state"] == "COMPLETED" and r["exit_code"] == 0, (SEED, r)
        assert json.loads(addr_file(state).read_text())["pid"] == pid
    finally:
        if filler.exists():
            filler.unlink()
        if pid:
            cli("controller", "stop", "--state", state, "--cancel-jobs")
            kill_leftovers(pid if psutil.pid_exists(pid) else 0, "")
            wait_for(lambda: not psutil.pid_exists(pid), 10, "the daemon to exit")
