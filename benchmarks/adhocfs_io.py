"""IOR-like sequential throughput of adhocfs against raw pyzmq, measured in the same run.

P client processes each write their own file (file-per-process) in 512 KiB transfers, then read it back;
the file set totals ``--total`` bytes. Each configuration names the data servers, optionally the replicas
(``r2``: every block written to two servers) and CURVE encryption (``enc``, ``MALLEABLE_ENCRYPT=1`` on servers
and clients): ``--configs 1,2,4,2r2,4r2,2enc``. The baseline streams the same bytes in messages of the same
size between two processes with plain pyzmq (PUSH -> PULL over tcp on 127.0.0.1), the practical limit of a
zmq-based store here; an encrypted configuration is paired with an encrypted raw stream too.

The mount rows (``--mount-servers N``, 0 to skip) run unmodified tools through a FUSE mount of an instance with N
data servers: ``dd`` (one stream) and ``fio`` (two jobs) writing then reading in 1 MiB requests, each paired with
as many Python client processes doing the same through the API just before it; and an mdtest-like metadata
figure (create, stat, unlink of ``--md-files`` files in one directory) through the mount, through the Python
client and on a local tmpfs (/dev/shm).

Usage: python benchmarks/adhocfs_io.py [--total 1GiB] [--clients 2] [--configs 1,2,4,2r2,2enc] [--reps 2]
       [--mount-servers 2] [--mount-total 512MiB] [--md-files 10000]
Writes benchmarks/results/adhocfs_io.json and .png (the mount rows: adhocfs_io_mount.png). With ``--configs ''``
only the mount rows run (their plot is then OUT.png).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
XFER = 512 * 1024


def _parse_size(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.lower().removesuffix("ib").removesuffix("b")
    return int(float(t[:-1]) * units[t[-1]]) if t[-1] in units else int(t)


# ---------------------------------------------------------------- workers (separate processes)
def worker_fs(addr: str, path: str, nbytes: int, op: str, start_at: float, xfer: int = XFER) -> None:
    """Write or read ``nbytes`` of ``path`` in ``xfer`` pieces; print JSON with start/end times."""
    from malleable.adhocfs import connect

    buf = os.urandom(xfer)
    with connect(addr, timeout=30.0) as fs:
        while time.time() < start_at:
            time.sleep(0.001)
        t0 = time.time()
        if op == "write":
            with fs.open(path, "wb") as f:
                for _ in range(nbytes // xfer):
                    f.write(buf)
        else:
            out = bytearray(xfer)
            with fs.open(path, "rb") as f:
                got = 0
                while n := f.readinto(out):
                    got += n
            assert got == nbytes, (got, nbytes)
        t1 = time.time()
    print(json.dumps({"t0": t0, "t1": t1}))


def worker_zmq_recv(port_file: str, nbytes: int) -> None:
    """Raw baseline receiver: bind a PULL socket, receive ``nbytes``, print timing."""
    import zmq

    from malleable._wire import secure_socket

    ctx = zmq.Context()
    s = ctx.socket(zmq.PULL)
    s.setsockopt(zmq.LINGER, 0)
    secure_socket(s, os.environ["MALLEABLE_TOKEN"].encode(), server=True)
    port = s.bind_to_random_port("tcp://127.0.0.1")
    Path(port_file).write_text(str(port))
    got = 0
    first = s.recv(copy=False)
    t0 = time.time()
    got = len(first)
    while got < nbytes:
        got += len(s.recv(copy=False))
    t1 = time.time()
    s.close()
    ctx.term()
    print(json.dumps({"t0": t0, "t1": t1, "bytes": got}))


def worker_zmq_send(port: int, nbytes: int) -> None:
    """Raw baseline sender: PUSH ``nbytes`` in XFER messages."""
    import zmq

    from malleable._wire import secure_socket

    ctx = zmq.Context()
    s = ctx.socket(zmq.PUSH)
    s.setsockopt(zmq.LINGER, -1)
    secure_socket(s, os.environ["MALLEABLE_TOKEN"].encode(), server=False)
    s.connect(f"tcp://127.0.0.1:{port}")
    buf = os.urandom(XFER)
    for _ in range(nbytes // XFER):
        s.send(buf, copy=False)
    s.close()
    ctx.term()


# ---------------------------------------------------------------- driver
def _spawn(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, __file__, "--worker", *args], stdout=subprocess.PIPE, text=True)


def raw_zmq(nbytes: int) -> float:
    """MB/s of one raw pyzmq stream of ``nbytes`` between two processes."""
    with tempfile.TemporaryDirectory() as d:
        pf = os.path.join(d, "port")
        recv = _spawn("zmq_recv", pf, str(nbytes))
        while not os.path.exists(pf) or not Path(pf).read_text():
            time.sleep(0.01)
        send = _spawn("zmq_send", Path(pf).read_text(), str(nbytes))
        out, _ = recv.communicate(timeout=300)
        send.wait(60)
    r = json.loads(out)
    return r["bytes"] / (r["t1"] - r["t0"]) / 1e6


def fs_run(nservers: int, nclients: int, total: int, replicas: int = 1) -> dict[str, float]:
    """Write then read the file set on a fresh instance with ``nservers`` data servers; MB/s per phase."""
    from malleable.adhocfs import start_fs

    per = total // nclients // XFER * XFER
    res = {}
    with (
        tempfile.TemporaryDirectory() as st,
        start_fs("127.0.0.1", ["127.0.0.1"] * nservers, state=st, replicas=replicas) as dep,
    ):
        for op in ("write", "read"):
            start_at = time.time() + 1.0
            procs = [
                _spawn("fs", dep.address, f"/f{i}", str(per), op, str(start_at)) for i in range(nclients)
            ]
            times = [json.loads(p.communicate(timeout=600)[0]) for p in procs]
            t0, t1 = min(t["t0"] for t in times), max(t["t1"] for t in times)
            res[op] = per * nclients / (t1 - t0) / 1e6
    return res


def parse_config(text: str) -> dict[str, Any]:
    """``N[rR][enc]`` as ``{"name", "servers", "replicas", "encrypt"}``."""
    m = re.fullmatch(r"(\d+)(?:r(\d+))?(enc)?", text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"configuration {text!r}: expected N, NrR, Nenc or NrRenc")
    return {"name": text.strip(), "servers": int(m.group(1)), "replicas": int(m.group(2) or 1),
            "encrypt": bool(m.group(3))}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--total", default="1GiB", help="bytes in the file set (default 1GiB)")
    p.add_argument("--clients", type=int, default=2, help="client processes (file per process)")
    p.add_argument("--configs", "--servers", default="1,2,4,2r2,4r2,2enc",
                   help="configurations: data servers, r2 for two replicas, enc for CURVE encryption")
    p.add_argument("--reps", type=int, default=2, help="repetitions (median reported)")
    p.add_argument("--out", default=str(RESULTS / "adhocfs_io"), help="output path without extension")
    p.add_argument("--mount-servers", type=int, default=2, help="data servers of the mount rows (0: no mount rows)")
    p.add_argument("--mount-total", default="512MiB", help="bytes written and read by each mount row")
    p.add_argument("--md-files", type=int, default=10000, help="files of the metadata figure (0: none)")
    args = p.parse_args()
    os.environ.setdefault("MALLEABLE_TOKEN", "benchmark-token")
    total = _parse_size(args.total)
    configs = [parse_config(x) for x in args.configs.split(",") if x.strip()]
    raw: list[float] = []
    runs: dict[str, list[dict[str, float]]] = {c["name"]: [] for c in configs}
    for rep in range(args.reps):
        for c in configs:  # each fs run is paired with a raw run just before it (the machine may be shared)
            os.environ["MALLEABLE_ENCRYPT"] = "1" if c["encrypt"] else "0"  # servers and workers inherit it
            base = raw_zmq(total)
            if not c["encrypt"]:
                raw.append(base)
            res = fs_run(c["servers"], args.clients, total, c["replicas"])
            res["raw"] = base
            runs[c["name"]].append(res)
            print(
                f"rep {rep + 1}/{args.reps}, {c['name']}: raw {base:.0f} MB/s, write {res['write']:.0f}, "
                f"read {res['read']:.0f}",
                file=sys.stderr,
            )
    os.environ["MALLEABLE_ENCRYPT"] = "0"
    raw_mbs = statistics.median(raw) if raw else 0.0
    rows = []
    for c in configs:
        rs = runs[c["name"]]
        rows.append(
            {
                **c,
                "write_MBps": round(statistics.median(r["write"] for r in rs), 1),
                "read_MBps": round(statistics.median(r["read"] for r in rs), 1),
                "write_vs_raw": round(statistics.median(x["write"] / x["raw"] for x in rs), 3),
                "read_vs_raw": round(statistics.median(x["read"] / x["raw"] for x in rs), 3),
                "raw_paired_MBps": [round(x["raw"], 1) for x in rs],
                "write_all": [round(x["write"], 1) for x in rs],
                "read_all": [round(x["read"], 1) for x in rs],
            }
        )
    result = {
        "benchmark": "adhocfs_io",
        "total_bytes": total,
        "clients": args.clients,
        "transfer": XFER,
        "reps": args.reps,
        "raw_zmq_MBps": round(raw_mbs, 1),
        "raw_zmq_all": [round(x, 1) for x in raw],
        "rows": rows,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
        },
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    print(
        f"raw pyzmq stream (same run, plain): {raw_mbs:.0f} MB/s; {args.clients} clients, "
        f"{total / 2**20:.0f} MiB file set, {XFER // 1024} KiB transfers"
    )
    print("ratios are medians of (fs run / raw run measured just before it; encrypted raw for 'enc')")
    print(f"{'config':>7} {'servers':>7} {'R':>2} {'enc':>4} {'write MB/s':>11} {'read MB/s':>10} "
          f"{'write/raw':>10} {'read/raw':>9}")
    for row in rows:
        print(
            f"{row['name']:>7} {row['servers']:>7} {row['replicas']:>2} {'yes' if row['encrypt'] else 'no':>4} "
            f"{row['write_MBps']:>11.0f} {row['read_MBps']:>10.0f} {row['write_vs_raw']:>10.0%} "
            f"{row['read_vs_raw']:>9.0%}"
        )
    out = Path(args.out)
    if args.mount_servers:
        from adhocfs_mount_rows import mount_rows, plot_mount, print_mount

        result["mount"] = mount_rows(args.mount_servers, _parse_size(args.mount_total), args.reps, args.md_files,
                                     _spawn)
        print_mount(result["mount"])
        plot_mount(result["mount"], Path(f"{out}_mount.png" if rows else f"{out}.png"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2))
    if rows:
        _plot(result, out.with_suffix(".png"))
    return 0


def _plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    x = range(len(rows))
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.bar([i - 0.2 for i in x], [r["write_MBps"] for r in rows], 0.4, label="write")
    ax.bar([i + 0.2 for i in x], [r["read_MBps"] for r in rows], 0.4, label="read")
    ax.axhline(result["raw_zmq_MBps"], color="k", ls="--", label="raw pyzmq (same run)")
    ax.axhline(0.6 * result["raw_zmq_MBps"], color="grey", ls=":", label="60% target")
    ax.set_xticks(list(x), [r["name"] for r in rows])
    ax.set_xlabel("data servers (r2: two replicas, enc: CURVE encryption)")
    ax.set_ylabel("MB/s")
    ax.set_title(f"adhocfs IOR-like, {result['clients']} clients, {result['total_bytes'] >> 20} MiB")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        kind, rest = sys.argv[2], sys.argv[3:]
        if kind == "fs":
            worker_fs(rest[0], rest[1], int(rest[2]), rest[3], float(rest[4]), *map(int, rest[5:6]))
        elif kind == "zmq_recv":
            worker_zmq_recv(rest[0], int(rest[1]))
        elif kind == "zmq_send":
            worker_zmq_send(int(rest[0]), int(rest[1]))
        sys.exit(0)
    sys.exit(main())
