"""The shape of seed 000's Hercules malleability experiment, scaled to this machine, plus redistribution costs.

1. **Static vs malleable.** C client processes write a shared file (each its own segment, 512 KiB
   transfers) then read it back. Static deployments have 1, 2 and 4 data servers; malleable ones start at
   that size and grow to 4 when the RIO/AIO rule (run by a Watcher in this process) asks for it. Weak
   scaling: fixed bytes per client; strong scaling: a fixed total. Each data server is capped at
   ``--server-rate`` MB/s to emulate a node's link (on 2 cores, uncapped servers all share the same CPU
   and adding servers cannot add bandwidth; the cap makes the server count the bottleneck, as on a cluster).
2. **Bytes moved** by partial and total redistribution for n -> n-1 (files written across an expansion,
   so layouts have two intervals) and by ``--rebalance`` for n -> n+1, against the ideal minimum.
3. **Time a shrink blocks writers**: the longest write call of a writer to an affected file during an
   unthrottled shrink, against the longest one without a shrink.

Usage: python benchmarks/adhocfs_elastic.py [--clients 4] [--server-rate 60] [--reps 2]
Writes benchmarks/results/adhocfs_elastic.json and .png.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
XFER = 512 * 1024
BS = 256 * 1024  # the published experiment's small block size


def worker(addr: str, idx: int, per: int, op: str, start_at: float) -> None:
    """Write or read segment ``idx`` of the shared file; print start/end times as JSON."""
    from malleable.adhocfs import connect

    buf = os.urandom(XFER)
    out = bytearray(XFER)
    with connect(addr, timeout=30.0, window=8) as fs:  # capped servers: keep their queues short
        f = fs.open("/shared", "r+b" if op == "write" else "rb")
        while time.time() < start_at:
            time.sleep(0.001)
        t0 = time.time()
        f.seek(idx * per)
        for _ in range(per // XFER):
            if op == "write":
                f.write(buf)
            else:
                f.readinto(out)
        f.close()
        t1 = time.time()
    print(json.dumps({"t0": t0, "t1": t1}))


def stall_writer(addr: str, path: str, seconds: float) -> None:
    """Write 64 KiB pieces to ``path`` for ``seconds``; print each call's latency."""
    from malleable.adhocfs import connect

    lat = []
    with connect(addr, timeout=30.0, wait=120) as fs, fs.open(path, "r+b") as f:
        end = time.time() + seconds
        rng = random.Random(1)
        size = f.seek(0, 2)
        while time.time() < end:
            f.seek(rng.randrange(0, size - 65536))
            t = time.time()
            f.write(b"w" * 65536)
            f.flush()
            lat.append((t, time.time() - t))
    print(json.dumps(lat))


def _spawn(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, __file__, "--worker", *args], stdout=subprocess.PIPE, text=True)


def phase(addr: str, clients: int, per: int, op: str) -> float:
    start_at = time.time() + 0.8
    procs = [_spawn("io", addr, str(i), str(per), op, str(start_at)) for i in range(clients)]
    times = [json.loads(p.communicate(timeout=900)[0]) for p in procs]
    t0, t1 = min(t["t0"] for t in times), max(t["t1"] for t in times)
    return per * clients / (t1 - t0) / 1e6


def scaling_run(n0: int, malleable: bool, clients: int, per: int, n_max: int, server_rate: float) -> dict:
    from malleable.adhocfs import connect, start_fs
    from malleable.adhocfs._monitor import Watcher
    from malleable.adhocfs._rule import RuleConfig

    with tempfile.TemporaryDirectory() as st, start_fs("127.0.0.1", ["127.0.0.1"] * n0, state=st) as dep:
        with connect(dep.address) as fs, fs.open("/shared", "wb", block_size=BS) as f:
            f.truncate(per * clients)
        watcher, stop = None, threading.Event()
        if malleable:  # RIO above what n_max capped servers give: the rule grows the file system to n_max
            cfg = RuleConfig(
                rio=server_rate * n_max * 2,
                tolerance=server_rate / 4,
                k=2,
                n_min=1,
                n_max=n_max,
                cooldown=1.0,
            )
            watcher = Watcher(dep.address, cfg, pool=["127.0.0.1"], interval=0.25, state=st)

            def watch() -> None:
                while not stop.is_set():
                    watcher.step()
                    stop.wait(0.25)

            th = threading.Thread(target=watch)
            th.start()
        try:
            w = phase(dep.address, clients, per, "write")
        finally:
            if watcher:
                stop.set()
                th.join()
                dep.procs.update({f"w{k}": p for k, p in watcher.procs.items()})
        r = phase(dep.address, clients, per, "read")
        with connect(dep.address) as fs:
            n_end = len([s for s in fs.status().servers if s["state"] == "active"])
        changes = [d for d in (watcher.decisions if watcher else []) if d["action"] != "keep"]
    return {
        "write": w,
        "read": r,
        "servers_end": n_end,
        "changes": [{"action": c["action"], "count": c["count"], "avg_d": c["avg_d"]} for c in changes],
    }


def redistribution_costs(n: int = 4, nfiles: int = 8, blocks_per_file: int = 64) -> dict:
    """Blocks moved by partial/total shrink n -> n-1 and by rebalance n -> n+1, against the ideal."""
    from malleable.adhocfs import connect, start_fs
    from malleable.adhocfs._admin import expand_fs, shrink_fs

    out: dict = {}
    bs = 64 * 1024
    for mode in ("partial", "total"):
        with (
            tempfile.TemporaryDirectory() as st,
            start_fs("127.0.0.1", ["127.0.0.1"] * (n - 1), state=st) as dep,
        ):
            with connect(dep.address, reserve=0) as fs:
                for i in range(nfiles):  # half of each file before an expansion, half after
                    with fs.open(f"/f{i}", "wb", block_size=bs) as f:
                        f.write(random.Random(i).randbytes(blocks_per_file // 2 * bs))
                _, procs, _ = expand_fs(dep.address, ["127.0.0.1"], state=st)
                dep.procs.update({f"x{k}": p for k, p in procs.items()})
                for i in range(nfiles):
                    with fs.open(f"/f{i}", "ab") as f:
                        f.write(random.Random(100 + i).randbytes(blocks_per_file // 2 * bs))
                t = time.monotonic()
                info = shrink_fs(dep.address, [2], mode)
                out[f"shrink_{n}_to_{n - 1}_{mode}"] = {
                    "moved_blocks": info["moved"],
                    "ideal_blocks": info["on_leaving"],
                    "moved_MiB": round(info.get("bytes_moved", 0) / 2**20, 2),
                    "ratio_to_ideal": round(info["moved"] / max(1, info["on_leaving"]), 3),
                    "seconds": round(time.monotonic() - t, 3),
                }
    with tempfile.TemporaryDirectory() as st, start_fs("127.0.0.1", ["127.0.0.1"] * n, state=st) as dep:
        with connect(dep.address, reserve=0) as fs:
            for i in range(nfiles):
                with fs.open(f"/f{i}", "wb", block_size=bs) as f:
                    f.write(random.Random(i).randbytes(blocks_per_file * bs))
        total = nfiles * blocks_per_file
        _, procs, info = expand_fs(dep.address, ["127.0.0.1"], rebalance=True, state=st)
        dep.procs.update({f"x{k}": p for k, p in procs.items()})
        out[f"rebalance_{n}_to_{n + 1}"] = {
            "moved_blocks": info["moved"],
            "ideal_blocks": round(total / (n + 1), 1),
            "ratio_to_ideal": round(info["moved"] / (total / (n + 1)), 3),
            "modulo_would_move": sum(b % n != b % (n + 1) for b in range(total)),
        }
    return out


def shrink_stall(n: int = 4, mib: int = 128) -> dict:
    """Longest write call to an affected file during a shrink vs without one."""
    from malleable.adhocfs import connect, start_fs
    from malleable.adhocfs._admin import shrink_fs

    with tempfile.TemporaryDirectory() as st, start_fs("127.0.0.1", ["127.0.0.1"] * n, state=st) as dep:
        with connect(dep.address) as fs, fs.open("/victim", "wb", block_size=BS) as f:
            chunk = os.urandom(1 << 20)
            for _ in range(mib):
                f.write(chunk)
        base = _spawn("stall", dep.address, "/victim", "1.5")
        lat0 = json.loads(base.communicate(timeout=60)[0])
        p = _spawn("stall", dep.address, "/victim", "4.0")
        time.sleep(1.0)
        t = time.time()
        info = shrink_fs(dep.address, [1], "partial")
        t_end = time.time()
        lat = json.loads(p.communicate(timeout=120)[0])
    during = [d for s, d in lat if s + d >= t and s <= t_end]
    return {
        "shrink_seconds": round(t_end - t, 3),
        "moved_blocks": info["moved"],
        "moved_MiB": round(info.get("bytes_moved", 0) / 2**20, 1),
        "max_write_stall_s": round(max(during, default=0.0), 3),
        "max_write_latency_without_shrink_s": round(max(d for _, d in lat0), 4),
        "median_write_latency_without_shrink_s": round(statistics.median(d for _, d in lat0), 4),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--server-rate", type=float, default=60.0, help="emulated MB/s per data server")
    p.add_argument("--weak-per-client", type=int, default=48, help="MiB per client (weak scaling)")
    p.add_argument("--strong-total", type=int, default=128, help="MiB in total (strong scaling)")
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--out", default=str(RESULTS / "adhocfs_elastic"))
    args = p.parse_args()
    os.environ.setdefault("MALLEABLE_TOKEN", "benchmark-token")
    os.environ["MALLEABLE_ADHOCFS_MAX_RATE"] = str(args.server_rate)
    rows = []
    for scaling, per in (
        ("weak", args.weak_per_client << 20),
        ("strong", (args.strong_total << 20) // args.clients),
    ):
        per = per // XFER * XFER
        for n0 in (1, 2, 4):
            res = {"static": [], "malleable": []}
            for _ in range(args.reps):
                for kind in ("static", "malleable"):
                    res[kind].append(
                        scaling_run(n0, kind == "malleable", args.clients, per, 4, args.server_rate)
                    )
            s_w = statistics.median(r["write"] for r in res["static"])
            m_w = statistics.median(r["write"] for r in res["malleable"])
            s_r = statistics.median(r["read"] for r in res["static"])
            m_r = statistics.median(r["read"] for r in res["malleable"])
            row = {
                "scaling": scaling,
                "start_servers": n0,
                "bytes": per * args.clients,
                "static_write_MBps": round(s_w, 1),
                "malleable_write_MBps": round(m_w, 1),
                "write_gain_pct": round(100 * (m_w / s_w - 1), 2),
                "static_read_MBps": round(s_r, 1),
                "malleable_read_MBps": round(m_r, 1),
                "read_gain_pct": round(100 * (m_r / s_r - 1), 2),
                "malleable_servers_end": [r["servers_end"] for r in res["malleable"]],
                "malleable_changes": res["malleable"][0]["changes"],
            }
            rows.append(row)
            print(
                f"{scaling:>6} start {n0}: write static {s_w:.0f} malleable {m_w:.0f} MB/s "
                f"({row['write_gain_pct']:+.1f}%), read {s_r:.0f} vs {m_r:.0f} ({row['read_gain_pct']:+.1f}%)",
                file=sys.stderr,
            )
    redis = redistribution_costs()
    stall = shrink_stall()
    os.environ.pop("MALLEABLE_ADHOCFS_MAX_RATE", None)
    result = {
        "benchmark": "adhocfs_elastic",
        "clients": args.clients,
        "server_rate_MBps": args.server_rate,
        "transfer": XFER,
        "block_size": BS,
        "reps": args.reps,
        "scaling": rows,
        "redistribution": redis,
        "shrink_stall": stall,
        "published_reference": {
            "weak_256k_write_2DN_gain_pct": 57.54,
            "weak_256k_write_16of16_pct": -1.10,
            "weak_1M_write_16of16_pct": -3.87,
            "strong_256k_write_2DN_gain_pct": 57.83,
        },
        "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    print(
        f"{'scaling':>7} {'start':>5} {'static W':>9} {'mall. W':>8} {'gain W':>7} {'static R':>9} "
        f"{'mall. R':>8} {'gain R':>7}  (MB/s; {args.clients} clients, {args.server_rate:g} MB/s per server)"
    )
    for r in rows:
        print(
            f"{r['scaling']:>7} {r['start_servers']:>5} {r['static_write_MBps']:>9.0f} "
            f"{r['malleable_write_MBps']:>8.0f} {r['write_gain_pct']:>+6.1f}% {r['static_read_MBps']:>9.0f} "
            f"{r['malleable_read_MBps']:>8.0f} {r['read_gain_pct']:>+6.1f}%"
        )
    print("redistribution (blocks moved vs ideal minimum):")
    for k, v in redis.items():
        print(f"  {k}: {v}")
    print(f"shrink stall: {stall}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2))
    _plot(result, out.with_suffix(".png"))
    return 0


def _plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, scaling in zip(axes, ("weak", "strong"), strict=True):
        rows = [r for r in result["scaling"] if r["scaling"] == scaling]
        x = range(len(rows))
        ax.bar([i - 0.3 for i in x], [r["static_write_MBps"] for r in rows], 0.2, label="static write")
        ax.bar([i - 0.1 for i in x], [r["malleable_write_MBps"] for r in rows], 0.2, label="malleable write")
        ax.bar([i + 0.1 for i in x], [r["static_read_MBps"] for r in rows], 0.2, label="static read")
        ax.bar([i + 0.3 for i in x], [r["malleable_read_MBps"] for r in rows], 0.2, label="malleable read")
        ax.set_xticks(list(x), [f"start {r['start_servers']}" for r in rows])
        ax.set_title(f"{scaling} scaling ({result['server_rate_MBps']:g} MB/s per server, max 4)")
        ax.set_ylabel("MB/s")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        kind, rest = sys.argv[2], sys.argv[3:]
        if kind == "io":
            worker(rest[0], int(rest[1]), int(rest[2]), rest[3], float(rest[4]))
        elif kind == "stall":
            stall_writer(rest[0], rest[1], float(rest[2]))
        sys.exit(0)
    sys.exit(main())
