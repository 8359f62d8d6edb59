"""Subcommands of the apps part (registered by malleable.cli): ``malleable demo``."""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from malleable.apps._args import size_arg
from malleable.errors import ConfigError

__all__ = ["demo_plan", "register", "run_demo"]

log = logging.getLogger(__name__)

DEMO_SIZES = (2, 4, 2)  # the job starts with 1 process, grows to 2, then 4, then shrinks back to 2


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``malleable demo``."""
    p = sub.add_parser(
        "demo",
        help="run the malleable Jacobi app growing 1→2→4 and shrinking to 2; check it against serial NumPy",
        description=(
            "Run the Jacobi heat-equation app (python -m malleable.apps.jacobi) as a malleable job started "
            "with one process: a plan grows it to 2 and 4 processes and shrinks it back to 2 while it "
            "iterates. Prints, per phase, the process count, the iteration time and the MTCT (MPI time / "
            "phase time), then checks the final grid bit for bit against a serial NumPy computation and "
            "says PASS or FAIL (exit status 0 or 1)."),
        epilog="examples: malleable demo;  malleable demo --n 1024 --iters 800;  malleable demo --io;  "
               "malleable demo --hosts node1,node2,node3,node4 --launcher-exec $(malleable testbed launcher)",
    )
    p.add_argument("--n", type=int, default=512, help="grid size (default 512)")
    p.add_argument("--iters", type=int, help="iterations, >= 8 (default 400; with --io 4000)")
    p.add_argument("--hosts", help="comma-separated hosts to spread the job over (the anchor runs on the first)")
    p.add_argument("--launcher-exec",
                   help="ssh stand-in hydra uses to reach the hosts (the test cluster's: malleable testbed launcher)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds an adaptation step may wait (default 60)")
    p.add_argument("--keep", metavar="DIR", help="keep the grid (u.npy) and the stats (stats.json) in DIR")
    p.add_argument("--io", action="store_true",
                   help="instead: the Jacobi job checkpoints into its own adhocfs, which grows from 1 to 2 data "
                        "servers under the checkpoints and shrinks back after; per-phase table, same final check")
    p.add_argument("--checkpoint-pad", type=size_arg, default=16 << 20, metavar="SIZE",
                   help="with --io: filler per checkpoint (default 16M, at least 1M)")
    p.set_defaults(func=run_demo)


def demo_plan(iters: int) -> list[dict[str, int]]:
    """The demo's plan: 2, 4 and 2 processes after a quarter, half and three quarters of the iterations."""
    return [{"at_probe": iters * (k + 1) // 4 + 1, "procs": p} for k, p in enumerate(DEMO_SIZES)]


def _check(args: argparse.Namespace) -> None:
    if args.n < 3:
        raise ConfigError(f"--n must be >= 3, got {args.n}")
    if args.iters < 8:
        raise ConfigError(f"--iters must be >= 8 (the plan adapts three times), got {args.iters}")
    if args.timeout <= 0:
        raise ConfigError(f"--timeout must be > 0, got {args.timeout}")


def _table(stats: dict[str, Any]) -> list[str]:
    lines = [f"{'phase':<8} {'procs':>5} {'iterations':>10} {'iter time':>12} {'MTCT':>6}"]
    for s in stats["stats"]:
        if s["kind"] == "init":
            continue
        lines.append(f"{s['phase']:<8} {s['procs']:>5} {s['iterations']:>10} "
                     f"{s['iter_seconds'] * 1e3:>9.3f} ms {s['mtct']:>6.3f}")
    for a in stats["adaptations"]:
        lines.append(f"  {a['kind']:<6} {a['old_size']} -> {a['new_size']} before iteration {a['iteration']}: "
                     f"{a['seconds']:.3f} s")
    return lines


def run_demo(args: argparse.Namespace) -> int:
    """Run the demo; returns 0 on PASS, 1 on FAIL.

    Raises:
        ConfigError: bad options.
    """
    from malleable.apps.jacobi import reference
    from malleable.runtime._cli import build_run_argv

    if args.iters is None:
        args.iters = 4000 if args.io else 400
    if args.io:
        if args.hosts or args.launcher_exec:
            raise ConfigError("--io runs on this machine only: --hosts and --launcher-exec do not apply")
        from malleable.apps._demo_io import run_io_demo

        return run_io_demo(args)
    _check(args)
    plan = demo_plan(args.iters)
    with tempfile.TemporaryDirectory(prefix="malleable-demo-") as tmp:
        where = Path(args.keep) if args.keep else Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        grid, stats_file = where / "u.npy", where / "stats.json"
        cmd = [sys.executable, "-m", "malleable.apps.jacobi", "--n", str(args.n), "--iters", str(args.iters),
               "--check-every", str(max(1, args.iters // 4)), "--out", str(grid), "--stats", str(stats_file)]
        ns = argparse.Namespace(procs=1, hosts=args.hosts, hostfile=None, plan=json.dumps(plan),
                                timeout=args.timeout, launcher_exec=args.launcher_exec, no_auto_cleanup=False,
                                max_procs_per_host=max(DEMO_SIZES), cmd=["--", *cmd])
        argv = build_run_argv(ns)
        env = dict(os.environ)
        if args.launcher_exec:
            env["MALLEABLE_LAUNCHER_EXEC"] = args.launcher_exec
        steps = ", ".join(f"{s['procs']} at iteration {s['at_probe'] - 1}" for s in plan)
        out = sys.stdout  # the demo's own user-facing report
        out.write(f"malleable demo: Jacobi {args.n}x{args.n}, {args.iters} iterations, 1 process, then "
                  f"{steps}{' on ' + args.hosts if args.hosts else ''}\n")
        out.flush()
        log.info("running %s", json.dumps(argv))
        try:
            proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=args.timeout * 10 + 120)
        except subprocess.TimeoutExpired:
            out.write("FAIL: the job did not finish in time\n")
            return 1
        if proc.returncode or not grid.exists() or not stats_file.exists():
            out.write(f"FAIL: the job exited with status {proc.returncode}\n{proc.stdout}{proc.stderr}")
            return 1
        stats = json.loads(stats_file.read_text())
        for line in _table(stats):
            out.write(line + "\n")
        if stats.get("hosts"):
            out.write(f"final processes on hosts: {', '.join(stats['hosts'])}\n")
        import numpy as np

        same = bool(np.array_equal(np.load(grid), reference(args.n, args.iters)))
        out.write(("PASS" if same else "FAIL") + f": final grid {'equals' if same else 'differs from'} the "
                  "serial NumPy reference bit for bit\n")
        out.flush()
        return 0 if same else 1
