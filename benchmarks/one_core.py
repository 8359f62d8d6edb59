"""The controller after the one-core redesign against an earlier checkout, measured in the same run.

For each of ``--reps`` rounds, alternating the two trees (each in its own Python with its own install):

1. pass time of the live core, 1,000 queued jobs on 512 hosts, EASY / malleable-fill / mebf-handoff
   (``benchmarks/controller.py``'s ``bench_pass`` of each tree: policy + decisions + persistence in SQLite);
2. daemon submit throughput (``bench_submit``: 1,000 sequential submits committed before each reply);
3. start-up of ``malleable --help``, ``malleable queue --help`` and ``malleable submit --help`` (wall time of a
   fresh process, min and median of ``--startup-runs``).

Run: ``.venv/bin/python benchmarks/one_core.py --baseline /path/to/old/checkout [--reps 3]`` (the baseline checkout
needs its own ``.venv`` with the project installed). Writes ``benchmarks/results/one_core.json`` and a PNG.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
POLICIES = ("easy", "malleable-fill", "mebf-handoff")
COMMANDS = (("--help",), ("queue", "--help"), ("submit", "--help"))

_PROBE = """
import json, sys
sys.path.insert(0, "benchmarks")
import controller as c
out = {{"pass": {{p: c.bench_pass(p, passes={passes}) for p in {policies!r}}}}}
if {submits}:
    s = c.bench_submit({submits}, 0)
    out["submit_per_s"] = s.get("daemon_submits_per_s") or s.get("daemon_per_s")
print(json.dumps(out))
"""


def python_of(tree: Path) -> str:
    return str(tree / ".venv" / "bin" / "python")


def probe(tree: Path, passes: int, submits: int) -> dict:
    code = _PROBE.format(passes=passes, policies=POLICIES, submits=submits)
    out = subprocess.run([python_of(tree), "-c", code], cwd=tree, capture_output=True, text=True, timeout=1800)
    if out.returncode:
        raise RuntimeError(f"{tree}: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def startup(tree: Path, argv: tuple[str, ...]) -> float:
    t0 = time.perf_counter()
    subprocess.run([python_of(tree), "-m", "malleable", *argv], cwd="/", capture_output=True, timeout=60,
                   check=True)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", type=Path, required=True, help="the earlier checkout (with its own .venv)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--passes", type=int, default=20)
    ap.add_argument("--submits", type=int, default=500)
    ap.add_argument("--startup-runs", type=int, default=15)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "one_core.json")
    args = ap.parse_args()
    trees = {"baseline": args.baseline.resolve(), "now": REPO}
    runs: dict[str, list[dict]] = {k: [] for k in trees}
    starts: dict[str, dict[str, list[float]]] = {k: {" ".join(c): [] for c in COMMANDS} for k in trees}
    for r in range(args.reps):
        for name, tree in (trees.items() if r % 2 == 0 else reversed(list(trees.items()))):
            runs[name].append(probe(tree, args.passes, args.submits))
            print(f"round {r + 1}: {name} done", file=sys.stderr)   # progress on a long run
    for _ in range(args.startup_runs):
        for cmd in COMMANDS:
            for name, tree in trees.items():
                starts[name][" ".join(cmd)].append(startup(tree, cmd))

    def med(name: str, f) -> float:
        return statistics.median(f(x) for x in runs[name])

    rows = []
    for p in POLICIES:
        rows.append((f"pass ms, {p} (median of rounds' medians)",
                     med("baseline", lambda x, p=p: x["pass"][p]["pass_ms_median"]),
                     med("now", lambda x, p=p: x["pass"][p]["pass_ms_median"])))
    if args.submits:
        rows.append(("daemon submits / s", med("baseline", lambda x: x["submit_per_s"]),
                     med("now", lambda x: x["submit_per_s"])))
    for cmd in starts["now"]:
        rows.append((f"malleable {cmd}: start-up s (median)", statistics.median(starts["baseline"][cmd]),
                     statistics.median(starts["now"][cmd])))
        rows.append((f"malleable {cmd}: start-up s (min)", min(starts["baseline"][cmd]), min(starts["now"][cmd])))
    print(f"{'measure':<52} {'baseline':>10} {'now':>10} {'now/base':>9}")
    for label, base, now in rows:
        print(f"{label:<52} {base:>10.3f} {now:>10.3f} {now / base if base else float('nan'):>9.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"baseline": str(trees["baseline"]), "rows": rows, "runs": runs,
                                    "startup": starts}, indent=1))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(9, 4))
        labels = [r[0].split(" (")[0].replace("malleable ", "") for r in rows]
        ratio = [r[2] / r[1] if r[1] else 0 for r in rows]
        ax.barh(labels, ratio)
        ax.axvline(1.0, color="k", lw=0.8)
        ax.set_xlabel("now / baseline (lower is faster, except submits/s)")
        fig.tight_layout()
        fig.savefig(args.out.with_suffix(".png"), dpi=110)
    except ImportError:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
