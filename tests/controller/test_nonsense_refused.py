"""Nonsense on the command line and in files is one line naming the mistake, exit 1, no traceback, and nothing
starts: outputs into a missing folder, a timeout that is not a number, empty and self-containing file-system
paths, absurd pool sizes and ports, a policy spec naming a function that is not a policy, a workload whose run
time is infinite."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from malleable.controller.daemon._paths import addr_file, lock_file
from tests.controller._daemon_util import isolate

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def env(monkeypatch, tmp_path):
    return isolate(monkeypatch, tmp_path)


def refused(*argv: str, text: str, extra: dict | None = None) -> str:
    p = subprocess.run([sys.executable, "-m", "malleable", *argv], capture_output=True, text=True, timeout=60,
                       env={**os.environ, **(extra or {})})
    assert p.returncode == 1, (argv, p.returncode, p.stdout, p.stderr)
    assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr, p.stderr
    assert text in p.stderr, p.stderr
    return p.stderr


def test_simulate_outputs_into_a_missing_folder(env):
    for opt in ("--json", "--plot", "--jobs-csv"):
        refused("simulate", "--synthetic", "5", opt, str(env / "missing" / "out.x"),
                text=f"{opt} {env / 'missing' / 'out.x'}: no folder {env / 'missing'}")
    assert not (env / "missing").exists()


def test_a_workload_with_an_infinite_run_time(env):
    w = env / "w.jsonl"
    w.write_text('{"id": 1, "submit": 0, "run": Infinity, "procs": 1}\n')
    refused("simulate", "--workload", str(w), text="'run' must be a finite number >= 0")
    w.write_text('{"id": 1, "submit": 0, "run": 5, "estimate": NaN, "procs": 1}\n')
    refused("simulate", "--workload", str(w), text="'estimate' must be a finite number >= 0")


def test_policies_must_be_policies(env):
    refused("simulate", "--synthetic", "5", "--policy", "os:system", text="'os:system' is not a policy")
    refused("simulate", "--synthetic", "5", "--policy", "builtins:print", text="'builtins:print' is not a policy")
    state = str(env / "ctl.sqlite")
    refused("controller", "start", "--local", "1", "--state", state, "--policy", "os:system",
            text="'os:system' is not a policy")
    p = subprocess.run([sys.executable, "-m", "malleable", "simulate", "--synthetic", "5", "--policy",
                        "malleable.controller.sched._rigid:easy"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "makespan" in p.stdout, p.stderr          # a module:function policy is fine


def test_absurd_pools_ports_and_timeouts(env):
    state = str(env / "ctl.sqlite")
    refused("controller", "start", "--local", "100000000", "--state", state, text="--local takes 1 to 4096")
    refused("controller", "start", "--local", "1", "--port", "99999", "--state", state,
            text="--port must be between 0 (a free one) and 65535, got 99999")
    assert not Path(state).exists() and not addr_file(state).exists() and not lock_file(state).exists()
    for value in ("nan", "-1", "inf"):
        refused("submit", "--state", state, "--timeout", value, "--", "true",
                text=f"--timeout must be a number of seconds between 0 and 86400, got {float(value)}")
        refused("queue", "--state", state, "--timeout", value, text="--timeout must be a number of seconds")


def test_file_system_paths_that_make_no_sense(env):
    p = subprocess.run([sys.executable, "-m", "malleable", "fs", "start", "--meta", "127.0.0.1", "--data",
                        "127.0.0.1"], capture_output=True, text=True, timeout=60, check=True)
    addr = p.stdout.splitlines()[-1]
    fs = {"MALLEABLE_FS": addr}
    try:
        (env / "x").write_text("hello\n")
        refused("fs", "put", str(env / "x"), "", text="fs: error: put: invalid path ''", extra=fs)
        subprocess.run([sys.executable, "-m", "malleable", "fs", "mkdir", "/d"], env={**os.environ, **fs},
                       check=True, timeout=60)
        refused("fs", "mv", "/d", "/d/e", text="mv: cannot rename /d to /d/e", extra=fs)
        refused("fs", "mv", "/d", "/d", text="mv: cannot rename /d to /d", extra=fs)
        ls = subprocess.run([sys.executable, "-m", "malleable", "fs", "ls", "/"], env={**os.environ, **fs},
                            capture_output=True, text=True, timeout=60, check=True)
        assert ls.stdout.split() == ["d"]                                   # nothing moved, nothing made
    finally:
        subprocess.run([sys.executable, "-m", "malleable", "fs", "stop"], env={**os.environ, **fs}, timeout=60,
                       capture_output=True, check=False)
