"""``malleable simulate``: replay an SWF trace or a synthetic workload under a policy and report the metrics."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from malleable.errors import ConfigError

if TYPE_CHECKING:
    from ._workload import Workload

__all__ = ["add_simulate_parser", "cmd_simulate"]

log = logging.getLogger(__name__)


def add_simulate_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``simulate`` on the ``malleable`` subparsers."""
    p = sub.add_parser("simulate", help="replay a workload trace under a scheduling policy",
                       description="Replay an SWF trace (or a synthetic workload) with a scheduling policy and "
                                   "print mean wait, bounded slowdown, makespan and utilisation.")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--trace", metavar="FILE", help="SWF file (plain or .gz)")
    src.add_argument("--synthetic", metavar="N", type=int, help="generate N synthetic jobs instead of a trace")
    src.add_argument("--workload", metavar="FILE",
                     help="a JSON-lines workload (one job per line, e.g. from 'malleable history --export')")
    src.add_argument("--sweep", metavar="SPEC",
                     help="run a sweep file (TOML: traces x policies x parameter grids x seeds) in parallel and "
                          "write one table (--table); runs already in the table are not run again")
    src.add_argument("--experiment", metavar="NAME",
                     help="run source documents' experiments (comma-separated names or all: 001, 002, 000-mebf, "
                          "000-sfsj, 000-io, 003-w1, 003-w2, 004) over seeds, print each published-vs-ours table "
                          "with intervals and verdicts, and write the results and report pages to --out")
    p.add_argument("--out", metavar="DIR",
                   help="--experiment: folder for the results (default: a new folder experiments-DATE-TIME here); "
                        "giving the folder of an interrupted run resumes it")
    p.add_argument("--seeds", type=int, metavar="N",
                   help="--experiment: seeds per experiment (default 10, or 2 with --quick)")
    p.add_argument("--quick", action="store_true", help="--experiment: smaller set-up (fewer sizes and runs)")
    p.add_argument("--table", metavar="FILE", help="--sweep: output table, .csv or .json (default: SPEC's name "
                                                   "with .csv, in the current folder)")
    p.add_argument("--workers", type=int, metavar="N",
                   help="--sweep, --experiment: local processes (default: all cores)")
    p.add_argument("--dask", metavar="ADDRESS", help="--sweep, --experiment: run on this Dask scheduler "
                                                     "(tcp://host:8786) instead of local processes")
    p.add_argument("--speedup", choices=["linear", "amdahl", "rho", "declared"], default="amdahl",
                   help="speedup model of resized or moldable jobs (default amdahl; declared: each job's own, "
                        "rho when it has one, else Amdahl, as the live controller)")
    p.add_argument("--failures", metavar="MTBF_S,DOWNTIME_S", default=None,
                   help="inject Poisson node failures: system-wide mean time between failures and downtime (s)")
    p.add_argument("--policy", default="easy", metavar="NAME",
                   help="scheduling policy: a registered name (--list-policies), an entry point of the "
                        "'malleable.policies' group, or package.module:function (default easy)")
    p.add_argument("--list-policies", action="store_true", help="print the registered policy names and exit")
    p.add_argument("--tick", type=float, metavar="S",
                   help="also pass every S seconds while jobs wait or run, as the live controller's --tick")
    p.add_argument("--tau", type=float, default=10.0, help="bounded-slowdown threshold in seconds (default 10)")
    p.add_argument("--limit", type=int, metavar="N", help="only the first N records of the trace")
    p.add_argument("--procs", type=int, help="machine size when the trace header has no MaxProcs/MaxNodes "
                                             "(synthetic: default 256)")
    p.add_argument("--strict", action="store_true", help="fail on the first malformed SWF line")
    p.add_argument("--load", type=float, default=0.7, help="synthetic: offered load (default 0.7)")
    p.add_argument("--seed", type=int, default=0, help="synthetic: random seed (default 0)")
    p.add_argument("--malleable", type=float, default=0.0, metavar="FRACTION",
                   help="make this fraction of jobs malleable (min 0.5x, max 2x their size; default 0)")
    p.add_argument("--pfs-bw", type=float, metavar="BYTES_S",
                   help="I/O: the shared file system's bandwidth; with --link-bw, runs the jobs' phases (a "
                        "--workload with 'phases' needs both)")
    p.add_argument("--link-bw", type=float, metavar="BYTES_S", help="I/O: each node's link to the file system")
    p.add_argument("--bb-bw", type=float, metavar="BYTES_S",
                   help="I/O: each node's bandwidth to the burst buffer (default --link-bw)")
    p.add_argument("--storage-policy", choices=["static", "elastic"], default=None,
                   help="I/O: the file systems of jobs with storage fields (fs_servers, fs_min, fs_max, io_rate): "
                        "static keeps the servers a job starts with (fs_servers, default fs_min); elastic runs "
                        "the live storage policy every --fs-sample seconds (default static)")
    p.add_argument("--fs-server-bw", type=float, metavar="BYTES_S",
                   help="I/O: one data server's bandwidth (needed when jobs have storage fields)")
    p.add_argument("--fs-sample", type=float, default=2.0, metavar="S",
                   help="I/O: seconds between two samples of a job's achieved rate (default 2, as live)")
    p.add_argument("--fs-add-cost", type=float, default=0.29, metavar="S",
                   help="I/O: seconds a data server's addition stalls the job's file system (default 0.29, "
                        "measured live)")
    p.add_argument("--fs-remove-cost", type=float, default=0.09, metavar="S",
                   help="I/O: seconds a data server's removal stalls it (default 0.09, measured live)")
    p.add_argument("--json", metavar="OUT", help="write the summary as JSON")
    p.add_argument("--jobs-csv", metavar="OUT", help="write one CSV row per job")
    p.add_argument("--plot", metavar="OUT", help="write a PNG: utilisation over time and a Gantt window")
    p.add_argument("--batsim-csv", metavar="OUT", help="write a Batsim-style jobs CSV (one row per allocation "
                                                       "segment, as evalys reads it)")
    p.add_argument("--results", metavar="OUT", help="write the run's results file for 'malleable report' (summary, "
                                                    "curves over time, distributions, a Gantt window, the command "
                                                    "and commit)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_simulate)
    return p


def _load(args: argparse.Namespace) -> Workload:
    from ._swf import read_swf
    from ._workload import synthetic

    if args.limit is not None and args.limit < 1:
        raise ConfigError(f"--limit must be >= 1, got {args.limit}")
    if args.workload:
        from ._jobfile import read_jobs

        w = read_jobs(args.workload, procs=args.procs)
        if args.limit:
            w = w.head(args.limit)
    elif args.trace:
        w = read_swf(args.trace, procs=args.procs, strict=args.strict, limit=args.limit)
    else:
        w = synthetic(args.synthetic, machine=args.procs or 256, load=args.load, seed=args.seed)
        if args.limit:
            w = w.head(args.limit)
    if args.malleable:
        w = w.with_malleable(args.malleable, seed=args.seed)
    return w


def cmd_simulate(args: argparse.Namespace) -> int:
    """Run ``malleable simulate``; returns the exit code."""
    from malleable.controller.sched import SPEEDUPS, get_policy

    from ._engine import Simulator
    from ._metrics import summary, write_jobs_csv

    if args.list_policies:
        from malleable.controller.sched import POLICIES

        print("\n".join(sorted(POLICIES)))                      # the CLI's own output
        return 0
    if not args.tau > 0:
        raise ConfigError(f"--tau must be > 0, got {args.tau}")
    if args.experiment:
        return _experiment(args)
    if args.sweep:
        return _sweep(args)
    if not (args.trace or args.synthetic or args.workload):
        raise ConfigError("give one of --trace FILE, --workload FILE, --synthetic N, --sweep SPEC or --experiment NAME")
    _check_outputs(args)
    policy = get_policy(args.policy)
    w = _load(args)
    extra: dict = {"speedup": SPEEDUPS[args.speedup]}
    if args.failures:
        from malleable.controller.experiments import failure_plan
        try:
            mtbf, down = (float(x) for x in args.failures.split(","))
        except ValueError:
            raise ConfigError(f"--failures wants MTBF_S,DOWNTIME_S, got {args.failures!r}") from None
        if not (mtbf > 0 and down > 0):
            raise ConfigError(f"--failures: both values must be > 0, got {args.failures!r}")
        extra["failures"] = failure_plan(w.machine, float(w.submit[0]), float(w.submit[-1]), mtbf, down, args.seed)
    bar = None
    if not args.no_progress and len(w) > 20000 and sys.stderr.isatty():
        from tqdm import tqdm
        bar = tqdm(total=len(w), unit="job", delay=2.0, file=sys.stderr, desc=args.policy)

    def progress(done: int) -> None:
        if bar is not None:
            bar.update(done - bar.n)
    io = None
    try:
        if args.tick is not None:
            extra["tick"] = args.tick
        if (w.phases is not None or w.fs is not None or args.pfs_bw is not None or args.link_bw is not None
                or args.storage_policy is not None):
            io = _run_io(args, w, policy, extra)
            result = io.result
        else:
            result = Simulator(w, policy, name=args.policy, progress=progress if bar is not None else None,
                               nodes=bool(args.plot or args.batsim_csv or args.results), **extra).run()
    finally:
        if bar is not None:
            bar.close()
    s = summary(result, args.tau)
    print(f"{'policy':12} {s['policy']}")                       # the CLI's own output
    print(f"{'jobs':12} {s['jobs']} ({s['skipped']} skipped) on {w.machine} nodes")
    print(f"{'mean wait':12} {s['mean_wait']:.1f} s (max {s['max_wait']:.0f} s)")
    print(f"{'mean bsld':12} {s['mean_bsld']:.3f} (tau {s['tau']:g} s)")
    print(f"{'makespan':12} {s['makespan']:.0f} s")
    print(f"{'utilization':12} {s['utilization']:.4f}")
    if s["resizes"]:
        print(f"{'resizes':12} {s['resizes']} ({s['resized_jobs']} jobs resized)")
    if io is not None:
        moved = sum(io.moved.values())
        s["io_seconds"], s["bytes_moved"] = float(io.io_time.sum()), moved
        print(f"{'I/O':12} {s['io_seconds']:.0f} s in blocking transfers, {moved:.4g} bytes moved")
        if io.storage is not None:
            st = s["storage"] = io.storage.summary()
            print(f"{'storage':12} {st['policy']}: {st['server_seconds']:.1f} server-s over {len(st['jobs'])} "
                  f"file systems, {st['decisions']} changes decided, {st['hosts_taken_back']} hosts taken back")
    print(f"{'simulated in':12} {s['sim_seconds']:.3f} s ({s['jobs'] / max(s['sim_seconds'], 1e-9):,.0f} jobs/s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(s, f, indent=2)
            f.write("\n")
    if args.jobs_csv:
        write_jobs_csv(result, args.jobs_csv, args.tau)
    if args.batsim_csv:
        from ._metrics import write_batsim_csv
        write_batsim_csv(result, args.batsim_csv)
    if args.plot:
        from ._plot import plot_result
        plot_result(result, args.plot)
    if args.results:
        _write_results(args, result, io, s)
    return 0


def _write_results(args: argparse.Namespace, result: object, io: object, s: dict) -> None:
    """The results file of one run (what ``malleable report`` draws)."""
    from ._record import provenance, run_record

    w = result.workload  # type: ignore[attr-defined]
    label = f"{args.policy} on {w.name or 'the workload'}"
    doc = {"kind": "simulation", "title": f"simulation: {label}",
           "summary": {k: v for k, v in s.items() if not isinstance(v, dict)},
           "records": [run_record(result, label=label, tau=args.tau, io=io)],  # type: ignore[arg-type]
           **provenance(_command(args))}
    with open(args.results, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


def _check_outputs(args: argparse.Namespace) -> None:
    """Refuse, before simulating, an output file that cannot be written (a missing or read-only folder, a
    folder given as the file)."""
    import os

    for opt in ("json", "jobs_csv", "plot", "batsim_csv", "results"):
        path = getattr(args, opt, None)
        if not path:
            continue
        name = "--" + opt.replace("_", "-")
        folder = os.path.dirname(os.path.abspath(path))
        if os.path.isdir(path):
            raise ConfigError(f"{name} {path}: is a directory, give a file name")
        if not os.path.isdir(folder):
            raise ConfigError(f"{name} {path}: no folder {folder} (create it first)")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise ConfigError(f"{name} {path}: cannot write in {folder}")


def _run_io(args: argparse.Namespace, w: Workload, policy: object, extra: dict):  # type: ignore[no-untyped-def]
    """The I/O-aware simulator's run (``--pfs-bw``/``--link-bw``, or a workload with phases)."""
    from ._ioengine import IOSimulator
    from ._iofs import StorageModel

    if args.pfs_bw is None or args.link_bw is None:
        raise ConfigError("jobs with phases run on the I/O-aware simulator: give --pfs-bw and --link-bw (bytes/s)")
    if extra.get("failures"):
        raise ConfigError("--failures is not modelled with I/O (the I/O-aware simulator has no node failures)")
    if args.plot or args.batsim_csv:
        raise ConfigError("--plot and --batsim-csv are not available with I/O yet")
    storage = None
    if w.fs is not None or args.storage_policy is not None:
        if w.fs is None:
            raise ConfigError("--storage-policy: no job of the workload has storage fields (fs_servers, fs_min, "
                              "fs_max, io_rate)")
        if args.fs_server_bw is None:
            raise ConfigError("jobs with storage fields have file systems of their own: give --fs-server-bw "
                              "(bytes/s)")
        storage = StorageModel(args.fs_server_bw, args.storage_policy or "static", args.fs_sample,
                               args.fs_add_cost, args.fs_remove_cost)
    return IOSimulator(w, policy, pfs_bw=args.pfs_bw, link_bw=args.link_bw, bb_bw=args.bb_bw,  # type: ignore[arg-type]
                       speedup=extra["speedup"], tick=extra.get("tick"), name=args.policy, storage=storage).run()


def _sweep(args: argparse.Namespace) -> int:
    from ._sweep import load_sweep, run_sweep

    if args.workers is not None and args.workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {args.workers}")
    runs = load_sweep(args.sweep)
    table = args.table or Path(args.sweep).with_suffix(".csv").name
    show = not args.no_progress and sys.stderr.isatty()
    rows = run_sweep(runs, table, workers=args.workers, dask=args.dask, progress=show)
    keys = {r["key"] for r in runs}
    print(f"{len(runs)} runs ({sum(1 for r in rows if r.get('key') in keys)} in {table})")   # the CLI's own output
    return 0


def _experiment(args: argparse.Namespace) -> int:
    from malleable.controller.experiments import EXPERIMENTS, run_experiments
    from malleable.controller.experiments._results import text_table

    names = list(EXPERIMENTS) if args.experiment == "all" else [n.strip() for n in args.experiment.split(",")]
    for name in names:
        if name not in EXPERIMENTS:
            raise ConfigError(f"unknown experiment {name!r}; known: {', '.join(EXPERIMENTS)}, all")
    if args.workers is not None and args.workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {args.workers}")
    if args.seeds is not None and args.seeds < 1:
        raise ConfigError(f"--seeds must be >= 1, got {args.seeds}")
    out = _experiment_folder(args.out)
    show = not args.no_progress and sys.stderr.isatty()
    docs = run_experiments(names, out, seeds=args.seeds, quick=args.quick, workers=args.workers, dask=args.dask,
                           progress=show, command=_command(args))
    for doc in docs:
        print(text_table(doc))                                   # the CLI's own output
        print(f"wrote {out / (doc['name'] + '.json')} and {doc['name']}.html\n")
    return 0


def _command(args: argparse.Namespace) -> list[str] | None:
    """The command line as given to ``malleable.cli.main`` (None: this process's)."""
    argv = getattr(args, "argv", None)
    return None if argv is None else ["malleable", *argv]


def _experiment_folder(out: str | None) -> Path:
    """The folder the results go to: the one named, or a new one here; never the committed results."""
    import time

    committed = (Path(__file__).resolve().parents[2] / "benchmarks" / "results").resolve()
    if out is None:
        base = Path(f"experiments-{time.strftime('%Y%m%d-%H%M%S')}")
        d, k = base, 1
        while d.exists():
            k += 1
            d = Path(f"{base}-{k}")
        return d
    d = Path(out)
    r = d.resolve()
    if r == committed or committed in r.parents:
        raise ConfigError(f"--out {out}: benchmarks/results holds the committed results; regenerate them with "
                          "'python benchmarks/experiments.py' (see docs/experiments.md)")
    if d.exists() and not d.is_dir():
        raise ConfigError(f"--out {out}: not a folder")
    return d
