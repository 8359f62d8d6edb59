"""Helpers for the apps' tests: run an app under ``malleable run`` with a plan, load its outputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests._procs import run_all_or_kill

# the MPI's own variables come from its backend; the tests oversubscribe this 2-core machine on purpose
MPI_ENV = {"MALLEABLE_ADAPT_TIMEOUT": "40", "MALLEABLE_MAX_PROCS_PER_HOST": "8"}


def app_cmd(app: str, *args: str, python: str = sys.executable) -> list[str]:
    """``python -m malleable.apps.APP ARGS``."""
    return [python, "-m", f"malleable.apps.{app}", *args]


def malleable_run(n: int, cmd: list[str], plan: list | None = None, timeout: float = 150, mpi=None,
                  ) -> subprocess.CompletedProcess:
    """Run ``cmd`` with ``malleable run -n N [--plan]`` of MPI implementation ``mpi`` (default: this venv's)."""
    argv = [mpi.python if mpi else sys.executable, "-m", "malleable", "run", "-n", str(n)]
    if plan is not None:
        argv += ["--plan", json.dumps(plan)]
    env = dict(os.environ, **MPI_ENV)
    proc = run_all_or_kill([*argv, "--", *cmd], timeout, env=env)
    if proc.returncode:
        raise AssertionError(f"malleable run exited {proc.returncode}\n--- stdout\n{proc.stdout}\n"
                             f"--- stderr\n{proc.stderr}")
    return proc


def load_stats(path: Path) -> dict:
    """The JSON an app's ``--stats`` option wrote."""
    return json.loads(Path(path).read_text())


def sizes(stats: dict, phase: str) -> list[int]:
    """Process counts of a phase's segments, in order."""
    return [s["procs"] for s in stats["stats"] if s["phase"] == phase]
