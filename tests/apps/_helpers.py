"""Helpers for the apps' tests: run an app under ``malleable run`` with a plan, load its outputs."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

# the MPI's own variables come from its backend; the tests oversubscribe this 2-core machine on purpose
MPI_ENV = {"MALLEABLE_ADAPT_TIMEOUT": "40", "MALLEABLE_MAX_PROCS_PER_HOST": "8"}


def app_cmd(app: str, *args: str) -> list[str]:
    """``python -m malleable.apps.APP ARGS``."""
    return [sys.executable, "-m", f"malleable.apps.{app}", *args]


def malleable_run(n: int, cmd: list[str], plan: list | None = None, timeout: float = 150,
                  ) -> subprocess.CompletedProcess:
    """Run ``cmd`` the way ``malleable run -n N [--plan]`` does (one anchor + spawned processes); check it."""
    from malleable.runtime._cli import build_run_argv

    ns = argparse.Namespace(procs=n, hosts=None, hostfile=None,
                            plan=None if plan is None else json.dumps(plan), timeout=None,
                            launcher_exec=None, no_auto_cleanup=False, max_procs_per_host=None, cmd=["--", *cmd])
    env = dict(os.environ, **MPI_ENV)
    proc = subprocess.run(build_run_argv(ns), capture_output=True, text=True, timeout=timeout, env=env)
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
