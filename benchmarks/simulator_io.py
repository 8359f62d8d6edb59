"""I/O in the simulator: what the I/O model costs when unused, and the burst-buffer policies' speed.

1. Rigid EASY on the KTH-SP2 log (27,979 jobs, no I/O): the plain simulator of this checkout against the same
   code before the I/O model existed (``--before``, a commit; run from a temporary worktree), and the I/O-aware
   simulator on the same jobs (each one compute phase). Rounds alternate; min/median/max of the simulation seconds.
2. fcfs-bb and plan-2 on the whole log with burst buffers and phases (seed 004's set-up): jobs/s, passes, and plan
   evaluations per planning pass (the paper: 189 at most per invocation, 8,742 for its predecessor).

Writes ``results/simulator_io.json`` and ``.png`` and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TRACE = HERE / "traces" / "KTH-SP2-1996-2.1-cln.swf.gz"

CASE = """
import json, sys
from malleable.controller.sim import read_swf
w = read_swf(sys.argv[1])
w = w.head(len(w))
keep = w.procs <= 96
from malleable.controller.sim._workload import Workload
w = Workload(w.ids[keep], w.submit[keep], w.run[keep], w.estimate[keep], w.procs[keep], 96)
if sys.argv[2] == "plain":
    from malleable.controller.sim import simulate
    r = simulate(w, "easy")
else:
    from malleable.controller.sim import simulate_io
    r = simulate_io(w, "easy", pfs_bw=5e9, link_bw=1.25e9).result
import malleable
print(json.dumps({"seconds": r.sim_seconds, "jobs": len(w), "mean_wait": float(r.wait.mean()),
                  "package": malleable.__file__}))
"""


def _case(pythonpath: str, mode: str) -> dict:
    env = dict(os.environ, PYTHONPATH=pythonpath)
    p = subprocess.run([sys.executable, "-c", CASE, str(TRACE), mode], capture_output=True, text=True, env=env,
                       timeout=900, cwd=tempfile.gettempdir())
    if p.returncode:
        raise SystemExit(f"case {mode} failed: {p.stderr.strip().splitlines()[-1]}")
    return json.loads(p.stdout)


SUBPACKAGES = ("runtime", "controller", "adhocfs", "apps", "launch")   # pyproject.toml's package-dir


def _view(tree: Path, where: Path) -> str:
    """A PYTHONPATH under which ``import malleable`` loads the checkout ``tree`` (the package-dir layout as
    symlinks: ``malleable/*`` plus one link per subpackage)."""
    pkg = where / "malleable"
    pkg.mkdir(parents=True)
    for f in (tree / "malleable").iterdir():
        (pkg / f.name).symlink_to(f)
    for sub in SUBPACKAGES:
        (pkg / sub).symlink_to(tree / sub)
    return str(where)


def _checkout(commit: str, where: Path) -> str:
    """A PYTHONPATH for ``commit`` (a detached worktree under ``where``)."""
    wt = where / "wt"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(wt), commit], check=True,
                   capture_output=True)
    return _view(wt, where / "before")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default="69d42c4", help="commit before the I/O model (default 69d42c4)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(HERE / "results"))
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        old = _checkout(args.before, Path(tmp))
        here = _view(ROOT, Path(tmp) / "now")
        try:
            times: dict[str, list[float]] = {"before (plain)": [], "now (plain)": [], "now (I/O-aware)": []}
            waits: dict[str, float] = {}
            for _ in range(args.rounds):
                for name, path, mode in (("before (plain)", old, "plain"), ("now (plain)", here, "plain"),
                                         ("now (I/O-aware)", here, "io")):
                    r = _case(path, mode)
                    assert r["package"].startswith(path), f"loaded {r['package']}, not the code under {path}"
                    times[name].append(r["seconds"])
                    waits[name] = r["mean_wait"]
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(Path(tmp) / "wt")],
                           capture_output=True)
    rows = []
    for name, ts in times.items():
        rows.append({"case": f"easy, KTH-SP2 rigid, {name}", "min_s": min(ts), "median_s": statistics.median(ts),
                     "max_s": max(ts), "jobs_per_s": 27979 / statistics.median(ts), "mean_wait_s": waits[name]})
    from malleable.controller.experiments._exp004 import run_004
    from malleable.controller.experiments._io004 import bb_workload, kth

    w = bb_workload(kth())
    for pol in ("fcfs-bb", "plan-2"):
        r = run_004(w, pol)
        rows.append({"case": f"{pol}, KTH-SP2 with burst buffers and phases", "min_s": r["seconds"],
                     "median_s": r["seconds"], "max_s": r["seconds"], "jobs_per_s": r["jobs"] / r["seconds"],
                     "mean_wait_s": r["mean_wait_h"] * 3600, "passes": r["passes"],
                     "plan_evaluations_per_pass": (r["plan_evaluations"] / r["plan_passes"]
                                                   if r["plan_passes"] else None)})
    print(f"{'case':62} {'min s':>8} {'median s':>9} {'max s':>8} {'jobs/s':>9}  notes")
    for r in rows:
        note = (f"{r['plan_evaluations_per_pass']:.0f} plans per planning pass"
                if r.get("plan_evaluations_per_pass") else f"mean wait {r['mean_wait_s']:.0f} s")
        print(f"{r['case']:62} {r['min_s']:8.2f} {r['median_s']:9.2f} {r['max_s']:8.2f} {r['jobs_per_s']:9,.0f}  "
              f"{note}")
    (out / "simulator_io.json").write_text(json.dumps({"rounds": args.rounds, "before": args.before,
                                                      "rows": rows}, indent=1) + "\n")
    _plot(rows, out / "simulator_io.png")
    return 0


def _plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 3.5))
    ax.barh([r["case"] for r in rows], [r["jobs_per_s"] for r in rows], color="tab:blue")
    ax.set_xscale("log")
    ax.set_xlabel("jobs per second (median)")
    ax.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
