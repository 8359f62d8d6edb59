"""A controller daemon as a separate process for the benchmarks: start it on a state file, stop it."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

TOKEN = "bench-controller-token"  # noqa: S105 - a benchmark secret


def scratch() -> str:
    """A temporary folder for one benchmark part's state files, removed when the benchmark exits (its
    databases reach hundreds of MB)."""
    tmp = tempfile.mkdtemp(prefix="ctlbench-")
    atexit.register(shutil.rmtree, tmp, True)
    return tmp


def _daemon(state: str, *pool: str, policy: str = "easy", env: dict | None = None, python: str = "") -> int:
    e = dict(os.environ, MALLEABLE_TOKEN=TOKEN, **(env or {}))
    # -P: another tree's Python must not import this tree's modules from the working directory
    out = subprocess.run([python or sys.executable, "-P", "-m", "malleable", "controller", "start", *pool,
                          "--policy", policy, "--state", state, "--tick", "0.2"],
                         env=e, capture_output=True, text=True, timeout=60)
    if out.returncode:
        raise RuntimeError(out.stderr)
    return json.loads(Path(state + ".addr").read_text())["pid"]


def _stop(state: str, python: str = "", pid: int = 0) -> None:
    """Stop the daemon on ``state``; given its ``pid``, leave the jobs queued (cancelling 100,000 takes minutes)
    and make sure it is gone."""
    import psutil

    cancel = [] if pid else ["--cancel-jobs"]
    subprocess.run([python or sys.executable, "-P", "-m", "malleable", "controller", "stop", *cancel, "--state", state],
                   env=dict(os.environ, MALLEABLE_TOKEN=TOKEN), capture_output=True, timeout=60, check=False)
    if pid and psutil.pid_exists(pid):
        p = psutil.Process(pid)
        try:
            p.wait(30)
        except psutil.TimeoutExpired:
            p.kill()
            p.wait(10)
