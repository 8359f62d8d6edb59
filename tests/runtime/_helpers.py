"""Helpers for runtime tests: run the adaptation test program under mpiexec and parse its JSON lines."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

PROG = Path(__file__).parent / "progs" / "adapt_prog.py"
# the MPI's own variables come from its backend; the tests oversubscribe this 2-core machine on purpose
MPI_ENV = {"MALLEABLE_ADAPT_TIMEOUT": "30", "MALLEABLE_MAX_PROCS_PER_HOST": "8"}


def run_prog(mpi, n, plan, iters=12, env=None, hosts=None, timeout=180, check=True, keep_going=False):
    """Run adapt_prog.py as n processes of MPI implementation ``mpi`` with a plan.

    Returns (iteration rows, adaptation reports, adaptation errors, completed process). The JSON records are read
    from the file rank 0 appends them to, not from the launcher's output: Open MPI's forwarding from another host
    can drop the last lines of a job under load. The process's ``stdout`` holds those records, then the launcher's
    other lines.
    """
    fd, out = tempfile.mkstemp(prefix="adapt_prog.", suffix=".jsonl")
    os.close(fd)
    e = dict(MPI_ENV, MALLEABLE_PLAN=json.dumps(plan), PROG_ITERS=str(iters), PROG_OUT=out)
    e.update(env or {})
    try:
        proc = mpi.run(n, mpi.python, str(PROG), env=e, timeout=timeout, hosts=hosts, check=check,
                       keep_going=keep_going)
        with open(out) as f:
            records = f.read()
    finally:
        os.unlink(out)
    other = "".join(x + "\n" for x in proc.stdout.splitlines() if not x.startswith("{"))
    proc = subprocess.CompletedProcess(proc.args, proc.returncode, records + other, proc.stderr)
    rows, reports, errors = [], [], []
    for line in proc.stdout.splitlines():
        if not line.startswith("{"):
            continue
        obj = json.loads(line)
        if "report" in obj:
            reports.append(obj)
        elif "adapt_error" in obj:
            errors.append(obj)
        elif "probe" in obj:
            rows.append(obj)
    return rows, reports, errors, proc


def after_failed_spawn(mpi, proc, errors):
    """The sizes a 1 -> 3 (fails) -> 2 plan gives: the later step works, except on Open MPI when the dead joiner's
    spawn never returned (its siblings stuck in MPI_Init block every later spawn): the job then ends at size 1,
    the second step failing too, and the runtime reaps the stuck joiners (the documented limit)."""
    if mpi.name == "openmpi" and "still inside MPI" in proc.stderr:
        assert len(errors) == 2 and "killing joiner" in proc.stderr, proc.stderr[-3000:]
        return [(1, 1), (2, 1), (3, 1), (4, 1), (5, 1)]
    return [(1, 1), (2, 1), (3, 1), (4, 2), (5, 2)]
