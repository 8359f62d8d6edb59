"""Regenerate the committed experiment results and the generated tables of docs/experiments.md.

    python benchmarks/experiments.py [--seeds N] [--workers N] [--dask ADDRESS] [--scratch DIR] [--docs-only]

Runs every experiment of ``malleable simulate --experiment all`` (10 seeds by default) into a scratch folder, then
copies each ``<name>.json``, ``<name>.html`` and the runs table (as ``runs.jsonl.gz``, without the run records,
which are in the results files) into
``benchmarks/results/experiments/`` and rewrites the generated parts of docs/experiments.md from those files. The
scratch folder keeps finished runs, so a run that stops is resumed by repeating the command with the same
``--scratch``. ``--docs-only`` rewrites the docs from the committed results without running anything.

Prints, and (for a run that ran everything, not a resumed one) writes to ``results/experiments/timing.json``: per
experiment its runs and CPU-seconds, the wall
time of the whole run, the cores and the load average of the machine before and after (other work on a shared
machine lengthens the wall time, not the CPU time), and the wall time the runs would take on 2 idle cores (their
CPU times list-scheduled in the driver's order).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "experiments"
COMMITTED_RUNS = RESULTS / "runs.jsonl.gz"     # the runs table, compressed (a fifth of the size)
DOC = HERE.parent / "docs" / "experiments.md"


def write_docs() -> None:
    """Rewrite the generated sections of docs/experiments.md from the committed results."""
    from malleable.controller.experiments import EXPERIMENTS
    from malleable.controller.report import DOCUMENTS, document_section, read_results, summary_table, update_generated

    docs = [read_results(RESULTS / f"{name}.json") for name in EXPERIMENTS]
    sections = {"summary": summary_table(docs)}
    for key in DOCUMENTS:
        sections[key] = document_section([d for d in docs if d["name"].split("-")[0] == key],
                                         "../benchmarks/results/experiments")
    DOC.write_text(update_generated(DOC.read_text(), sections))
    print(f"wrote the generated tables of {DOC}")


def projected_wall(rows: list[dict], cores: int = 2) -> float:
    """The wall time of the runs on ``cores`` idle cores: their measured CPU times list-scheduled in the order the
    driver submits them (longest estimate first), each run to the first free core."""
    free = [0.0] * cores
    for r in sorted(rows, key=lambda r: -float(r.get("cost", 1.0))):
        k = free.index(min(free))
        free[k] += float(r.get("cpu_seconds", 0.0))
    return max(free)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--workers", type=int, help="local processes (default: all cores)")
    ap.add_argument("--dask", metavar="ADDRESS", help="a Dask scheduler to run on instead")
    ap.add_argument("--scratch", metavar="DIR", help="the folder runs go to first (default: a new temporary one)")
    ap.add_argument("--docs-only", action="store_true", help="only rewrite the docs from the committed results")
    args = ap.parse_args(argv)
    if args.docs_only:
        write_docs()
        return 0
    from malleable.controller.experiments import EXPERIMENTS, RUNS_TABLE, run_experiments

    scratch = Path(args.scratch) if args.scratch else Path(tempfile.mkdtemp(prefix="malleable-experiments-"))
    table = scratch / RUNS_TABLE
    before = len(table.read_text().splitlines()) if table.exists() else 0      # a resumed run ran only the rest
    load0 = os.getloadavg()
    t0 = time.perf_counter()
    docs = run_experiments(list(EXPERIMENTS), scratch, seeds=args.seeds, workers=args.workers, dask=args.dask,
                           progress=sys.stderr.isatty(),
                           command=["python", "benchmarks/experiments.py", *(sys.argv[1:] if argv is None else argv)])
    wall = time.perf_counter() - t0
    load1 = os.getloadavg()
    RESULTS.mkdir(parents=True, exist_ok=True)
    for d in docs:
        for ext in ("json", "html"):
            shutil.copyfile(scratch / f"{d['name']}.{ext}", RESULTS / f"{d['name']}.{ext}")
    rows = []
    with open(scratch / RUNS_TABLE) as src, gzip.open(COMMITTED_RUNS, "wt") as dst:
        for line in src:                      # the run records are in the results files already
            row = json.loads(line)
            row["record"] = None
            rows.append(row)
            dst.write(json.dumps(row, separators=(",", ":")) + "\n")
    cpu = sum(d["runs"]["cpu_seconds"] for d in docs)
    rows = [r for r in rows if not r["quick"] and int(r["seed"]) < args.seeds]
    projected = projected_wall(rows)
    timing = {"wall_seconds": round(wall, 1), "runs_already_done": before, "cpu_seconds": round(cpu, 1),
              "projected_wall_seconds_on_2_idle_cores": round(projected, 1), "cores": os.cpu_count(),
              "workers": args.workers or os.cpu_count(), "dask": args.dask, "seeds": args.seeds,
              "load_before": [round(x, 2) for x in load0], "load_after": [round(x, 2) for x in load1],
              "experiments": {d["name"]: d["runs"] for d in docs}}
    if before == 0:                           # a measured run of everything (a resumed one keeps the last such)
        (RESULTS / "timing.json").write_text(json.dumps(timing, indent=1) + "\n")
    print(f"{'experiment':10} {'runs':>6} {'CPU s':>8}  verdicts")
    for d in docs:
        v = d["verdicts"]
        print(f"{d['name']:10} {d['runs']['count']:6d} {d['runs']['cpu_seconds']:8.0f}  {v['reproduced']} reproduced, "
              f"{v['confounded']} confounded, {v['not reproduced']} not reproduced")
    print(f"all: {wall / 60:.1f} min wall, {cpu / 60:.1f} CPU-min, {os.cpu_count()} cores; load average "
          f"{load0[0]:.1f} before, {load1[0]:.1f} after (1 min); on 2 idle cores the runs would take "
          f"{projected / 60:.1f} min")
    write_docs()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
