"""A host traded from compute to storage on namespace hosts, against growth onto a free host in the same run.

A writer job (1 node, ``--bb``, ``--fs-min 1 --fs-max 2 --io-rate 10G``) rewrites files of about 1 MiB into its
file system until told to stop; its first data server is node-local. In a **traded** round every host is busy: a
malleable Jacobi job (``--min 1 --max 2``, grown by ``malleable-fill``) holds the two others, so the storage
policy takes a host back from it: the decision (``fs-reclaim``), the Jacobi job's shrink acknowledged (its step),
the host checked empty and lent to the file system, the growth decided (``fs-grow``) at the next sample, and the
new server serving (``fs-grown``). In a **free** round (the baseline) the Jacobi job may not grow (``--max 1``),
so a host is free and the same growth goes there directly: ``fs-grow`` to ``fs-grown``. Rounds alternate.

Run: ``.venv/bin/python benchmarks/storage_trade.py [--rounds N]`` (needs root and the namespace hosts
node1..node3). Writes ``benchmarks/results/storage_trade.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from storage import FINAL, PY, controller, fmt, job_done, netns_missing, stats  # noqa: E402 - the sibling benchmark

M = 1 << 20
G = 1 << 30
HOSTS = ["node1", "node2", "node3"]
WRITER = '''
import hashlib, os, sys, time
from malleable.adhocfs import connect
stop = sys.argv[1]
with connect(os.environ["MALLEABLE_FS"]) as fs:
    fs.makedirs("/w", exist_ok=True)
    i = 0
    while not os.path.exists(stop) and i < 20000:
        data = hashlib.sha256(str(i).encode()).digest() * 32768
        with fs.open(f"/w/f{i % 24}.bin", "wb") as f:
            f.write(data)
        i += 1
        time.sleep(0.05)
'''
PARTS = ("decision_to_shrunk_s", "shrunk_to_lent_s", "lent_to_grow_s", "grow_to_serving_s")


def _first(events: list[dict], kind: str, text: str = "", after: float = 0.0) -> float | None:
    return next((e["t"] for e in events if e["kind"] == kind and text in e["text"] and e["t"] >= after), None)


def one_round(tmp: str, traded: bool, k: int) -> dict[str, Any]:
    """One writer growing by one data server: onto a host taken back (traded) or onto a free host."""
    from malleable.controller.daemon import _protocol as P

    stop = os.path.join(tmp, f"stop-{k}")
    writer = os.path.join(tmp, "writer.py")
    Path(writer).write_text(WRITER)
    with controller(tmp, HOSTS, HOSTS, "256M", "malleable-fill") as c:
        m = c.submit([PY, "-m", "malleable.apps.jacobi", "--n", "64", "--iters", "5000000", "--probe-every", "200"],
                     1, 1, 2 if traded else 1, True, name="jacobi", out=os.devnull, time_limit=600)
        want = 2 if traded else 1
        _until(lambda: c.info(m).job["state"] == "RUNNING" and len(c.info(m).job["hosts"]) == want, 60,
               "the Jacobi job to run on its hosts")
        w = c.submit([PY, writer, stop], 1, out=os.path.join(tmp, f"w{k}.out"), time_limit=600, bb=200 * M,
                     fs_min=1, fs_max=2, io_rate=float(10 * G))
        _until(lambda: any(e["kind"] == "fs-grown" for e in c.info(w).events) or c.info(w).job["state"] in FINAL,
               120, "the writer's second data server")
        info, jac = c.info(w), c.info(m)
        Path(stop).touch()
        for jid in (m, w):
            c.call(P.Cancel(jid))
        job_done(c, w, 90)
    ev = info.events
    grow, grown = _first(ev, "fs-grow"), _first(ev, "fs-grown")
    row: dict[str, Any] = {"traded": traded, "servers": [h for _, h in info.job["fs"]["servers"]],
                           "grow_to_serving_s": (grown - grow) if grow and grown else None}
    if traded:
        decided = _first(ev, "fs-reclaim", "gives")
        lent = _first(ev, "fs-reclaim", "kept for a data server")
        shrunk = next((s["t"] for s in jac.steps if s["kind"] == "shrink"), None)
        if decided and lent and shrunk and grow:
            row.update(decision_to_shrunk_s=shrunk - decided, shrunk_to_lent_s=lent - shrunk,
                       lent_to_grow_s=grow - lent)
        row["decision_to_serving_s"] = (grown - decided) if decided and grown else None
        row["reclaim_reason"] = next((e["text"] for e in ev if e["kind"] == "fs-reclaim"), "")
    return row


def _until(pred, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.1)


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    t = result["traded"]
    bottom = 0.0
    for key, col in zip(PARTS, ("tab:orange", "tab:grey", "tab:blue", "tab:green"), strict=True):
        v = t[key].get("median", 0.0)
        ax.bar(0, v, 0.5, bottom=bottom, color=col, label=key.removesuffix("_s").replace("_", " "))
        bottom += v
    ax.bar(1, result["free"]["grow_to_serving_s"].get("median", 0.0), 0.5, color="tab:green")
    ax.set_xticks([0, 1], ["host taken back", "free host (baseline)"])
    ax.set_ylabel("seconds (median)")
    ax.set_title("growth decision -> new data server serving")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="rounds of each kind, alternating (default 3)")
    ap.add_argument("--out", default=str(HERE / "results" / "storage_trade.json"))
    args = ap.parse_args()
    if args.rounds < 1:
        print("storage_trade: --rounds must be at least 1", file=sys.stderr)
        return 2
    why = netns_missing(HOSTS)
    if why:
        print(f"storage_trade benchmark needs the namespace hosts: {why}", file=sys.stderr)
        return 2
    os.environ.setdefault("MALLEABLE_TOKEN", "bench-storage-token")
    t0 = time.monotonic()
    rows = []
    with tempfile.TemporaryDirectory(prefix="tradebench-") as tmp:
        for k in range(args.rounds):
            for traded in (True, False):
                rows.append(one_round(tmp, traded, len(rows)))
                print(f"round {k + 1}/{args.rounds} {'traded' if traded else 'free  '}: {rows[-1]}", flush=True)
    traded = [r for r in rows if r["traded"]]
    free = [r for r in rows if not r["traded"]]
    result = {"benchmark": "storage_trade", "when": time.strftime("%Y-%m-%dT%H:%M:%S"), "rounds": args.rounds,
              "cpus": os.cpu_count(), "hosts": HOSTS,
              "traded": {k: stats([r.get(k) for r in traded]) for k in (*PARTS, "decision_to_serving_s")},
              "free": {"grow_to_serving_s": stats([r["grow_to_serving_s"] for r in free])},
              "traded_onto_taken_host": all(len(r["servers"]) == 2 for r in traded),
              "seconds": round(time.monotonic() - t0, 1), "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
              "rows": rows}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    plot(result, out.with_suffix(".png"))
    print(f"{'growth onto':<22} {'decision -> serving':>22}   parts (median, min-max)")
    t = result["traded"]
    print(f"{'a host taken back':<22} {fmt(t['decision_to_serving_s']):>22}   "
          + ", ".join(f"{k.removesuffix('_s')} {fmt(t[k])}" for k in PARTS))
    print(f"{'a free host (baseline)':<22} {fmt(result['free']['grow_to_serving_s']):>22}")
    print(f"wrote {out.with_suffix('.json')} and .png in {result['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
