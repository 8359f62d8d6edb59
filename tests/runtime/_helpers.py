"""Helpers for runtime tests: run the adaptation test program under mpiexec and parse its JSON lines."""

from __future__ import annotations

import json
import sys
from pathlib import Path

PROG = Path(__file__).parent / "progs" / "adapt_prog.py"
MPI_ENV = {"MPIR_CVAR_CH4_NETMOD": "ofi", "MALLEABLE_ADAPT_TIMEOUT": "30"}


def run_prog(run_mpi, n, plan, iters=12, env=None, hosts=None, timeout=180, check=True, mpi_args=()):
    """Run adapt_prog.py as n processes with a plan; return (iteration rows, adaptation reports, proc)."""
    e = dict(MPI_ENV, MALLEABLE_PLAN=json.dumps(plan), PROG_ITERS=str(iters))
    e.update(env or {})
    proc = run_mpi(n, sys.executable, str(PROG), env=e, timeout=timeout, hosts=hosts, check=check, mpi_args=mpi_args)
    rows, reports, errors = [], [], []
    for line in proc.stdout.splitlines():
        if not line.startswith("{"):
            continue
        obj = json.loads(line)
        if "report" in obj:
            reports.append(obj)
        elif "adapt_error" in obj:
            errors.append(obj)
        else:
            rows.append(obj)
    return rows, reports, errors, proc
