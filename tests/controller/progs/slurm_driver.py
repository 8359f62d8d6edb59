"""Runs inside a Slurm allocation (salloc): starts the controller with --slurm, submits jobs, waits for them,
stops the controller, and writes what it saw as JSON to argv[1]. Used by tests/controller/test_slurm_pool.py.

Env: DRIVER_MALLEABLE=1 also submits a malleable heat job (tests/controller/progs/heat_prog.py), 1..3 hosts."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

OUT = Path(sys.argv[1])
HERE = Path(__file__).parent
M = [sys.executable, "-m", "malleable"]
STATE = str(OUT.parent / "ctl.sqlite")
res: dict = {"nodelist": os.environ.get("SLURM_JOB_NODELIST"), "slurm_job": os.environ.get("SLURM_JOB_ID"),
             "log": []}


def run(*args: str, env: dict | None = None, timeout: float = 30) -> subprocess.CompletedProcess:
    env = dict(os.environ if env is None else env, MALLEABLE_CONTROLLER_STATE=STATE)
    p = subprocess.run([*M, *args], capture_output=True, text=True, timeout=timeout, env=env,
                       stdin=subprocess.DEVNULL)
    res["log"].append({"cmd": list(args), "rc": p.returncode, "out": p.stdout[-2000:], "err": p.stderr[-2000:]})
    return p


def save() -> None:
    OUT.write_text(json.dumps(res, indent=1))


def wait_done(ids: list[int], limit: float) -> dict:
    end = time.monotonic() + limit
    while True:
        p = run("history", "--json")
        rows = {r["id"]: r for r in json.loads(p.stdout)["jobs"]} if p.returncode == 0 else {}
        if all(rows.get(i, {}).get("state") in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT") for i in ids):
            return rows
        if time.monotonic() > end:
            return rows
        time.sleep(0.3)


try:
    p = run("controller", "start", "--slurm", "--bind", "10.77.0.1", "--policy", "malleable-fill",
            "--tick", "0.5")
    res["start_rc"] = p.returncode
    if p.returncode:
        raise SystemExit(1)
    res["pid"] = json.loads(run("controller", "status", "--json").stdout).get("pid")
    res["status"] = json.loads(run("controller", "status", "--json").stdout)
    res["nodes"] = json.loads(run("nodes", "--json").stdout)["nodes"]
    a = run("submit", "-N", "3", "-J", "where", "-t", "1:00", "-o", "where-%j.out", "--parsable", "--",
            sys.executable, str(HERE / "where_prog.py"), "none")
    b = run("submit", "-N", "1", "-J", "exit3", "-t", "1:00", "-o", "exit3-%j.out", "--parsable", "--",
            "sh", "-c", "hostname; exit 3")
    ids = [int(a.stdout.split()[0]), int(b.stdout.split()[0])]
    res["rigid"] = ids
    save()
    res["history_rigid"] = wait_done(ids, 20)
    if os.environ.get("DRIVER_MALLEABLE") == "1":
        # a malleable job: starts on one host, grows into the rest of the allocation (runtime spawns placed by
        # hydra's Slurm launcher, i.e. srun), finishes
        env = dict(os.environ, PROG_ITERS="60", PROG_SLEEP="0.05", MALLEABLE_ADAPT_TIMEOUT="20")
        c = run("submit", "--min", "1", "--max", "3", "-J", "heat", "-t", "1:00", "-o", "heat-%j.out",
                "--parsable", "--", sys.executable, str(HERE / "heat_prog.py"), env=env)
        jid = res["malleable"] = int(c.stdout.split()[0])
        save()
        res["history_malleable"] = wait_done([jid], 30)
        res["info_malleable"] = run("info", str(jid)).stdout
    res["history"] = json.dumps(json.loads(run("history", "--json").stdout)["jobs"])
finally:
    res["stop_rc"] = run("controller", "stop", "--cancel-jobs", timeout=40).returncode if "pid" in res else None
    save()
