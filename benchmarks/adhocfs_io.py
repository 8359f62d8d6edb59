"""IOR-like sequential throughput of the adhocfs Python client against raw pyzmq carrying the same bytes in the
same pattern, measured in pairs in the same run.

P client processes each write their own file (file-per-process) in 512 KiB transfers, then read it back; the
file set totals ``--total`` bytes. Each configuration names the data servers, optionally the replicas (``r2``:
every block written to two servers) and CURVE encryption (``enc``, ``MALLEABLE_ENCRYPT=1`` on servers and
clients): ``--configs 1,2,4,2r2,4r2,2enc``.

The baseline of a configuration with N servers is raw pyzmq in the same pattern: P client processes (DEALER
sockets) and N server processes (ROUTER) doing the minimum: writes send the same bytes in 512 KiB messages
spread over the servers, which count and drop them and acknowledge the end (``raw``), or keep them in memory as a
store must (``keep``, a second write phase: what holding new memory costs). With R replicas every write message goes
to R servers, in both phases, as the file system sends each block to the R servers keeping its copies: the raw
writes carry the same bytes over the same connections as the file system's (R times the file set), and a
replicated configuration is compared with raw replicated writes. Reads ask each server for a share (each byte
once, as the file system reads one copy), which it streams back in 512 KiB messages, the frames it kept, as received
(zero copy). No envelope, no MAC. The raw
processes use the same socket options and malloc settings as the file system's (``adhocfs/_buffers.py``; the raw
servers take the data servers' memory ahead, ``MALLEABLE_ADHOCFS_RESERVE``), and an encrypted configuration's
baseline is encrypted the same way.

Every client run is paired with a raw run: both sets of servers are started first, then their phases take turns
(raw first in even repetitions, the client first in odd ones: write, write, raw keep, read, read), and ratios are
reported per pair (median and range): the machine may be shared, and the two phases of a pair see about the same
load. The variants of a configuration take turns too (in the given order in even repetitions, reversed in odd
ones): identical write code run first and second in every repetition once differed by up to 27 points. Each run
also records the CPU seconds of every process (clients, servers) and of the whole machine, so where the cores' time
goes can be read from the results.

Variants of the client run (``--variants``): ``client`` (this tree), ``nomac`` (this tree with the payload MAC
replaced by none on every peer, a benchmark-only patch loaded through ``sitecustomize``: what the MAC costs) and
``against`` (another tree's venv Python, ``--against PYTHON``: the previous commit built beside this one).

The mount rows (``--mount-servers N``, 0 to skip) run unmodified tools through a FUSE mount of an instance with N
data servers: ``dd`` (one stream) and ``fio`` (two jobs) writing then reading in 1 MiB requests, each paired with
as many Python client processes doing the same through the API just before it; and an mdtest-like metadata
figure (create, stat, unlink of ``--md-files`` files in one directory) through the mount, through the Python
client and on a local tmpfs (/dev/shm). With the variant ``against``, the tools also run through a mount made by
the other tree's mount daemon, in turn with this tree's (the order alternating between repetitions).

Usage: python benchmarks/adhocfs_io.py [--total 512MiB] [--clients 2] [--configs 1,2,4,2r2,4r2,2enc] [--reps 3]
       [--variants client,nomac,against --against /path/to/other/.venv/bin/python]
       [--mount-servers 2] [--mount-total 512MiB] [--md-files 10000]
Writes benchmarks/results/adhocfs_io.json and .png (the mount rows: adhocfs_io_mount_rows.png). With
``--configs ''`` only the mount rows run (their plot is then OUT.png; the docs' mount-only run writes
adhocfs_io_mount.json and .png).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
XFER = 512 * 1024
LEAD = 1.5  # seconds between spawning the workers of a phase and their common start
TICK = os.sysconf("SC_CLK_TCK")


def _parse_size(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.lower().removesuffix("ib").removesuffix("b")
    return int(float(t[:-1]) * units[t[-1]]) if t[-1] in units else int(t)


def _own_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _wait_until(start_at: float) -> None:
    while time.time() < start_at:
        time.sleep(0.001)


# ---------------------------------------------------------------- workers (separate processes)
def worker_fs(addr: str, path: str, nbytes: int, op: str, start_at: float, xfer: int = XFER) -> None:
    """Write or read ``nbytes`` of ``path`` in ``xfer`` pieces (or remove it: ``rm``); print JSON with start/end
    times and CPU seconds."""
    from malleable.adhocfs import connect

    buf = os.urandom(xfer)
    with connect(addr, timeout=30.0) as fs:
        _wait_until(start_at)
        t0, c0 = time.time(), _own_cpu()
        if op == "write":
            with fs.open(path, "wb") as f:
                for _ in range(nbytes // xfer):
                    f.write(buf)
        elif op == "rm":
            fs.remove(path)
        else:
            out = bytearray(xfer)
            with fs.open(path, "rb") as f:
                got = f.readinto(out)
                first = time.time()
                while n := f.readinto(out):
                    got += n
            assert got == nbytes, (got, nbytes)
        t1, c1 = time.time(), _own_cpu()
    print(json.dumps({"t0": t0, "t1": t1, "cpu": c1 - c0, **({"first": first - t0} if op == "read" else {})}))


def _raw_socket(ctx: Any, kind: int, server: bool) -> Any:
    import zmq

    from malleable._sockets import secure_socket

    s = ctx.socket(kind)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.SNDHWM, 0)
    s.setsockopt(zmq.RCVHWM, 0)
    secure_socket(s, os.environ["MALLEABLE_TOKEN"].encode(), server=server)
    return s


def worker_raw_server() -> None:
    """Raw baseline server: a ROUTER that drops written messages (or keeps them, for the "keep" writes),
    acknowledging each client's end, and streams read requests back from the frames it kept (zero copy); prints its
    address, serves until stdin closes."""
    import zmq

    from malleable.adhocfs._buffers import keep_freed_buffers, reserve
    from malleable.adhocfs._data import RESERVE

    keep_freed_buffers()  # the malloc settings of the file system's data servers, and their memory taken ahead
    reserve(int(os.environ.get("MALLEABLE_ADHOCFS_RESERVE", RESERVE)))
    ctx = zmq.Context()
    s = _raw_socket(ctx, zmq.ROUTER, server=True)
    port = s.bind_to_random_port("tcp://127.0.0.1")
    print(f"tcp://127.0.0.1:{port}", flush=True)
    buf = os.urandom(XFER)
    poller = zmq.Poller()
    poller.register(s, zmq.POLLIN)
    poller.register(sys.stdin, zmq.POLLIN)
    got: dict[bytes, int] = {}
    kept: list[Any] = []
    sent = 0
    while True:
        ready = dict(poller.poll())
        if sys.stdin.fileno() in ready or sys.stdin in ready:
            break
        while True:
            try:
                frames = s.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            ident, kind = frames[0].bytes, frames[1].bytes
            if kind == b"W":
                got[ident] = got.get(ident, 0) + len(frames[2])
            elif kind == b"K":  # kept in memory, as a store would
                got[ident] = got.get(ident, 0) + len(frames[2])
                kept.append(frames[2])
            elif kind == b"E":
                s.send_multipart([ident, b"A", str(got.pop(ident, 0)).encode()])
            elif kind == b"R":  # the bytes kept, as received (each once), else one buffer again and again
                for _ in range(int(frames[2].bytes) // XFER):
                    s.send_multipart([ident, kept[sent] if sent < len(kept) else buf], copy=False)
                    sent += 1
    s.close()
    ctx.term()


def worker_raw_client(addrs: str, nbytes: int, op: str, start_at: float, copies: int = 1) -> None:
    """Raw baseline client: one DEALER per server; writes ``nbytes`` in XFER messages spread round-robin over the
    servers, each message to ``copies`` consecutive servers, as a replicated store sends it (then waits for every
    server's acknowledgement; ``write``: the servers drop the bytes, ``keep``: they keep them in memory), or reads
    the same share back from each (each byte once, as a store reads one copy)."""
    import zmq

    from malleable.adhocfs._buffers import keep_freed_buffers

    keep_freed_buffers()  # the malloc settings the file system's client uses (it receives into the same buffers)
    ctx = zmq.Context()
    socks = []
    for a in addrs.split(","):
        s = _raw_socket(ctx, zmq.DEALER, server=False)
        s.connect(a)
        socks.append(s)
    buf = os.urandom(XFER)
    n = nbytes // XFER
    shares = [n // len(socks) + (i < n % len(socks)) for i in range(len(socks))]
    for s in socks:  # connected before the clock starts, as the file system's client is
        s.send_multipart([b"E"])
        s.recv_multipart()
    _wait_until(start_at)
    t0, c0 = time.time(), _own_cpu()
    got = 0
    if op in ("write", "keep"):
        kind = b"W" if op == "write" else b"K"
        for i in range(n):
            for c in range(copies):
                socks[(i + c) % len(socks)].send_multipart([kind, buf], copy=False)
        for s in socks:
            s.send_multipart([b"E"])
        for s in socks:
            got += int(s.recv_multipart()[1])
    else:
        poller = zmq.Poller()
        for s, k in zip(socks, shares, strict=True):
            s.send_multipart([b"R", str(k * XFER).encode()])
            poller.register(s, zmq.POLLIN)
        first = 0.0
        while got < n * XFER:
            for s in dict(poller.poll(30_000)):
                while True:
                    try:
                        got += len(s.recv(zmq.NOBLOCK, copy=False))
                    except zmq.Again:
                        break
                first = first or time.time()
    t1, c1 = time.time(), _own_cpu()
    assert got == n * XFER * (copies if op != "read" else 1), (got, n * XFER)
    for s in socks:
        s.close()
    ctx.term()
    print(json.dumps({"t0": t0, "t1": t1, "cpu": c1 - c0, **({"first": first - t0} if op == "read" else {})}))


def worker_fs_serve(nservers: int, replicas: int) -> None:
    """Start a file system with ``nservers`` data servers; print its address and server pids; stop it when stdin
    closes (run by the Python of the variant measured, so its servers run that tree's code)."""
    from malleable.adhocfs import start_fs

    with (
        tempfile.TemporaryDirectory() as st,
        start_fs("127.0.0.1", ["127.0.0.1"] * nservers, state=st, replicas=replicas) as dep,
    ):
        pids = [p.pid for name, p in dep.procs.items() if name.startswith("data")]
        print(json.dumps({"address": dep.address, "pids": pids}), flush=True)
        sys.stdin.read()


# ---------------------------------------------------------------- the benchmark-only MAC patch
NOMAC_SITE = '''\
"""Benchmark only (benchmarks/adhocfs_io.py, variant nomac): payload bytes enter no MAC on any peer."""
import os
if os.environ.get("MALLEABLE_BENCH_NOMAC") == "1":
    import hmac as _hmac
    from malleable import _wire
    def _header_only_mac(self, seal, header, payloads):
        return _hmac.digest(self.key, b"".join((_wire.MAGIC, seal, header)), "sha256")
    _wire.Wire._mac = _header_only_mac
'''


# ---------------------------------------------------------------- driver
def _spawn(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, __file__, "--worker", *args], stdout=subprocess.PIPE, text=True)


def _proc_cpu(pid: int) -> float:
    """CPU seconds (user + system, all threads) of a live process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def _machine_busy() -> float:
    """CPU seconds the whole machine spent not idle since boot."""
    vals = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(vals) - vals[3] - vals[4]) / TICK


@dataclasses.dataclass
class Variant:
    """How a client run is made: which Python (tree) and environment."""

    name: str
    python: str
    env: dict[str, str]


def _phase(spawn: Any, nclients: int, server_pids: list[int], per: int, op: str) -> dict[str, float]:
    """Run one phase (``nclients`` workers made by ``spawn(i, start_at)``) and measure it."""
    busy0, srv0 = _machine_busy(), {p: _proc_cpu(p) for p in server_pids}
    start_at = time.time() + LEAD
    procs = [spawn(i, start_at) for i in range(nclients)]
    outs = [json.loads(p.communicate(timeout=600)[0].strip().splitlines()[-1]) for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError(f"a {op} worker failed")
    srv = sum(_proc_cpu(p) - c for p, c in srv0.items())
    t0, t1 = min(o["t0"] for o in outs), max(o["t1"] for o in outs)
    wall = t1 - t0
    return {
        "MBps": per * nclients / wall / 1e6,
        "wall": wall,
        "late": max(o["t0"] for o in outs) - start_at,  # a worker that was not ready at the common start
        # reads: seconds from a reader's start to its first piece (its open and first request), the slowest reader's
        **({"first": max(o["first"] for o in outs)} if all("first" in o for o in outs) else {}),
        "client_cpu": sum(o["cpu"] for o in outs),
        "server_cpu": srv,  # over the whole phase, start lead included (idle servers use next to nothing)
        "machine_cpu": _machine_busy() - busy0,  # every process of the machine, ours and others', lead included
    }


@contextlib.contextmanager
def raw_servers(nservers: int) -> Iterator[tuple[str, list[int]]]:
    """``nservers`` raw pyzmq server processes: yields their addresses (comma separated) and pids."""
    servers = [
        subprocess.Popen([sys.executable, __file__, "--worker", "raw_server"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
        for _ in range(nservers)
    ]
    try:
        addrs = ",".join(s.stdout.readline().strip() for s in servers)  # type: ignore[union-attr]
        yield addrs, [s.pid for s in servers]
    finally:
        for s in servers:
            s.stdin.close()  # type: ignore[union-attr]
            s.wait(30)


@contextlib.contextmanager
def fs_servers(v: Variant, nservers: int, replicas: int) -> Iterator[tuple[str, list[int]]]:
    """A fresh file system of ``v``'s servers: yields its address and the data servers' pids."""
    serve = subprocess.Popen([v.python, __file__, "--worker", "fs_serve", str(nservers), str(replicas)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=v.env)
    try:
        info = json.loads(serve.stdout.readline())  # type: ignore[union-attr]
        yield info["address"], info["pids"]
    finally:
        serve.stdin.close()  # type: ignore[union-attr]
        serve.wait(60)


def pair_run(v: Variant, nservers: int, replicas: int, nclients: int, per: int, raw_first: bool
             ) -> dict[str, dict[str, dict[str, float]]]:
    """One pair: raw pyzmq and ``v``'s client, both set up first, then their phases taking turns so that each
    pair of phases sees about the same load: write (raw: the servers drop the bytes), raw keep (the servers keep
    them, as a store must), read, then the files are removed and written again (``rewrite``: into memory the data
    servers already hold, as a buffer in use for more than one file set does)."""
    with raw_servers(nservers) as (raw_addrs, raw_pids), fs_servers(v, nservers, replicas) as (fs_addr, fs_pids):

        def raw(op: str) -> dict[str, float]:
            return _phase(lambda i, at: _spawn("raw_client", raw_addrs, str(per), op, str(at), str(replicas)),
                          nclients, raw_pids, per, op)

        def fs(op: str) -> dict[str, float]:
            return _phase(lambda i, at: subprocess.Popen(
                [v.python, __file__, "--worker", "fs", fs_addr, f"/f{i}", str(per), op, str(at)],
                stdout=subprocess.PIPE, text=True, env=v.env), nclients, fs_pids, per, op)

        out: dict[str, dict[str, dict[str, float]]] = {"raw": {}, "fs": {}}
        turns = [("raw", raw), ("fs", fs)] if raw_first else [("fs", fs), ("raw", raw)]
        for side, run in turns:
            out[side]["write"] = run("write")
        out["raw"]["keep"] = raw("keep")
        for side, run in turns:
            out[side]["read"] = run("read")
        fs("rm")  # the files go: their servers' memory is free for the next writes, as in a buffer in use
        for side, run in turns:
            out[side]["rewrite"] = run("write")
        return out


def parse_config(text: str) -> dict[str, Any]:
    """``N[rR][enc]`` as ``{"name", "servers", "replicas", "encrypt"}``."""
    m = re.fullmatch(r"(\d+)(?:r(\d+))?(enc)?", text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"configuration {text!r}: expected N, NrR, Nenc or NrRenc")
    return {"name": text.strip(), "servers": int(m.group(1)), "replicas": int(m.group(2) or 1),
            "encrypt": bool(m.group(3))}


def _variants(names: list[str], against: str | None, site_dir: str) -> list[Variant]:
    out = []
    for n in names:
        env = dict(os.environ)
        if n == "client":
            out.append(Variant(n, sys.executable, env))
        elif n == "nomac":
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [site_dir, env.get("PYTHONPATH")]))
            env["MALLEABLE_BENCH_NOMAC"] = "1"
            out.append(Variant(n, sys.executable, env))
        elif n == "against":
            if not against:
                raise SystemExit("adhocfs_io: variant 'against' needs --against PYTHON")
            out.append(Variant(n, against, env))
        else:
            raise SystemExit(f"adhocfs_io: unknown variant {n!r} (client, nomac, against)")
    return out


def _summary(xs: list[float], nd: int = 3) -> dict[str, Any]:
    return {"median": round(statistics.median(xs), nd), "min": round(min(xs), nd), "max": round(max(xs), nd),
            "all": [round(x, nd) for x in xs]}


def _row(c: dict[str, Any], variant: str, pairs: list[dict[str, Any]], per_bytes: int) -> dict[str, Any]:
    row: dict[str, Any] = {**c, "variant": variant, "pairs": len(pairs)}
    gb = per_bytes / 1e9
    for op in ("write", "read", "rewrite"):
        q: dict[str, Any] = {
            "MBps": _summary([p["fs"][op]["MBps"] for p in pairs], 1),
            "raw_MBps": _summary([p["raw"][op]["MBps"] for p in pairs], 1),
            "vs_raw": _summary([p["fs"][op]["MBps"] / p["raw"][op]["MBps"] for p in pairs]),
        }
        row[op] = q
        if op == "write":  # against raw servers that keep the bytes in memory, as a store must
            q["raw_keep_MBps"] = _summary([p["raw"]["keep"]["MBps"] for p in pairs], 1)
            q["vs_raw_keep"] = _summary([p["fs"][op]["MBps"] / p["raw"]["keep"]["MBps"] for p in pairs])
        if op == "read":  # milliseconds to the slower reader's first piece: the file's open and first reply
            q["first_ms"] = _summary([p["fs"][op]["first"] * 1e3 for p in pairs], 1)
            q["raw_first_ms"] = _summary([p["raw"][op]["first"] * 1e3 for p in pairs], 1)
        # CPU seconds per GB moved by the client and by the server processes, of the run and of its raw pair
        q["cpu_s_per_GB"] = {
            f"{side}_{who}": round(statistics.median(p[side if side == "fs" else "raw"][o][f"{who}_cpu"] / gb
                                                     for p in pairs), 3)
            for side, o in (("fs", op), ("raw", op), *((("raw_keep", "keep"),) if op == "write" else ()))
            for who in ("client", "server")
        }
        # the machine's busy CPU seconds per wall second of the phase (2.0: both cores busy), ours and others'
        q["machine_load"] = _summary([p["fs"][op]["machine_cpu"] / (p["fs"][op]["wall"] + LEAD) for p in pairs], 2)
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--total", default="512MiB", help="bytes in the file set (default 512MiB)")
    p.add_argument("--clients", type=int, default=2, help="client processes (file per process)")
    p.add_argument("--configs", "--servers", default="1,2,4,2r2,4r2,2enc",
                   help="configurations: data servers, r2 for two replicas, enc for CURVE encryption")
    p.add_argument("--variants", default="client", help="client runs: client, nomac, against (comma separated)")
    p.add_argument("--nomac-configs", default="1,2,4", help="configurations the nomac variant runs on")
    p.add_argument("--against", default=None, help="Python of another tree's venv (variant 'against')")
    p.add_argument("--against-label", default="main", help="what the 'against' tree is, for the table")
    p.add_argument("--reps", type=int, default=3, help="pairs per configuration and variant (medians reported)")
    p.add_argument("--out", default=str(RESULTS / "adhocfs_io"), help="output path without extension")
    p.add_argument("--mount-servers", type=int, default=2, help="data servers of the mount rows (0: no mount rows)")
    p.add_argument("--mount-total", default="512MiB", help="bytes written and read by each mount row")
    p.add_argument("--md-files", type=int, default=10000, help="files of the metadata figure (0: none)")
    args = p.parse_args()
    os.environ.setdefault("MALLEABLE_TOKEN", "benchmark-token")
    total = _parse_size(args.total)
    per = total // args.clients // XFER * XFER
    configs = [parse_config(x) for x in args.configs.split(",") if x.strip()]
    nomac_on = {x.strip() for x in args.nomac_configs.split(",")}
    site = tempfile.TemporaryDirectory()
    Path(site.name, "sitecustomize.py").write_text(NOMAC_SITE)
    variants = _variants([x.strip() for x in args.variants.split(",") if x.strip()], args.against, site.name)
    pairs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for rep in range(args.reps):
        for c in configs:
            os.environ["MALLEABLE_ENCRYPT"] = "1" if c["encrypt"] else "0"  # servers and workers inherit it
            for v in variants if rep % 2 == 0 else variants[::-1]:  # each variant first as often as the others
                if v.name == "nomac" and c["name"] not in nomac_on:
                    continue
                v.env["MALLEABLE_ENCRYPT"] = os.environ["MALLEABLE_ENCRYPT"]
                got = pair_run(v, c["servers"], c["replicas"], args.clients, per, raw_first=rep % 2 == 0)
                raw, fs = got["raw"], got["fs"]
                pairs.setdefault((c["name"], v.name), []).append(got)
                print(f"rep {rep + 1}/{args.reps} {c['name']:>5} {v.name:>8}: " + ", ".join(
                    f"{op} {fs[op]['MBps']:5.0f} / raw {raw[op]['MBps']:5.0f} = {fs[op]['MBps'] / raw[op]['MBps']:4.0%}"
                    for op in ("write", "read", "rewrite"))
                    + f"; first read piece {fs['read']['first'] * 1e3:.1f} / raw {raw['read']['first'] * 1e3:.1f} ms",
                    file=sys.stderr, flush=True)
    os.environ["MALLEABLE_ENCRYPT"] = "0"
    site.cleanup()
    rows = [_row(c, v.name, pairs[(c["name"], v.name)], per * args.clients)
            for c in configs for v in variants if (c["name"], v.name) in pairs]
    result = {
        "benchmark": "adhocfs_io",
        "total_bytes": per * args.clients,
        "clients": args.clients,
        "transfer": XFER,
        "reps": args.reps,
        "against": args.against_label if args.against else None,
        "rows": rows,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
        },
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    _print(result)
    out = Path(args.out)
    if args.mount_servers:
        from adhocfs_mount_rows import mount_rows, plot_mount, print_mount

        result["mount"] = mount_rows(args.mount_servers, _parse_size(args.mount_total), args.reps, args.md_files,
                                     _spawn, args.against if "against" in args.variants else None,
                                     args.against_label)
        print_mount(result["mount"])
        plot_mount(result["mount"], Path(f"{out}_mount_rows.png" if rows else f"{out}.png"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2))
    if rows:
        _plot(result, out.with_suffix(".png"))
    return 0


def _label(result: dict[str, Any], variant: str) -> str:
    return {"client": "client", "nomac": "no payload MAC", "against": result.get("against") or "against"}[variant]


def _print(result: dict[str, Any]) -> None:
    print(f"{result['clients']} clients, {result['total_bytes'] >> 20} MiB file set, {XFER >> 10} KiB transfers; "
          "each run paired with raw pyzmq in the same pattern next to it; ratio: median [min-max] of the pairs; "
          "keep: raw servers keeping the bytes; rewrite: the files removed and written again")
    print(f"{'config':>6} {'variant':>14} {'write':>6} {'raw':>5} {'write/raw':>16} {'keep':>5} {'write/keep':>16} "
          f"{'read':>6} {'raw':>5} {'read/raw':>16} {'rewrite':>7} {'raw':>5} {'rewrite/raw':>16}")

    def ratio(v: dict[str, float]) -> str:
        return f"{v['median']:>5.0%} [{v['min']:>3.0%}-{v['max']:>4.0%}]"

    for r in result["rows"]:
        w, rd, rw = r["write"], r["read"], r["rewrite"]
        print(f"{r['name']:>6} {_label(result, r['variant']):>14} {w['MBps']['median']:>6.0f} "
              f"{w['raw_MBps']['median']:>5.0f} {ratio(w['vs_raw']):>16} {w['raw_keep_MBps']['median']:>5.0f} "
              f"{ratio(w['vs_raw_keep']):>16} {rd['MBps']['median']:>6.0f} {rd['raw_MBps']['median']:>5.0f} "
              f"{ratio(rd['vs_raw']):>16} {rw['MBps']['median']:>7.0f} {rw['raw_MBps']['median']:>5.0f} "
              f"{ratio(rw['vs_raw']):>16}")
    print("CPU seconds per GB (median), client + server processes: the run | raw | raw keeping the bytes")
    for r in result["rows"]:
        cells = []
        for op in ("write", "read", "rewrite"):
            c = r[op]["cpu_s_per_GB"]
            cell = f"{op} {c['fs_client']:.2f}+{c['fs_server']:.2f} | {c['raw_client']:.2f}+{c['raw_server']:.2f}"
            if op == "write":
                cell += f" | {c['raw_keep_client']:.2f}+{c['raw_keep_server']:.2f}"
            cells.append(cell)
        print(f"{r['name']:>6} {_label(result, r['variant']):>14}  " + "   ".join(cells))


RATIOS = (("write", "vs_raw", "write / raw"), ("write", "vs_raw_keep", "write / raw keeping the bytes"),
          ("read", "vs_raw", "read / raw"), ("rewrite", "vs_raw", "rewrite / raw"))


def _plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    fig, axes = plt.subplots(2, 1, figsize=(max(8.0, 1.3 * len(rows) + 2), 8))
    x = range(len(rows))
    names = [f"{r['name']}\n{_label(result, r['variant'])}" for r in rows]
    ax = axes[0]
    for k, (op, col) in enumerate((("write", "C0"), ("read", "C1"), ("rewrite", "C2"))):
        off = -0.36 + 0.24 * k
        ax.bar([i + off for i in x], [r[op]["MBps"]["median"] for r in rows], 0.12, color=col, label=op)
        ax.bar([i + off + 0.12 for i in x], [r[op]["raw_MBps"]["median"] for r in rows], 0.12, color=col,
               alpha=0.35, label=f"raw pyzmq {op} (paired)")
    ax.set_xticks(list(x), names, fontsize=7)
    ax.set_ylabel("MB/s (median of the pairs)")
    ax.set_title(f"adhocfs Python client vs raw pyzmq in the same pattern, {result['clients']} clients, "
                 f"{result['total_bytes'] >> 20} MiB, {result['reps']} pairs each")
    ax.legend(fontsize=7, ncol=3)
    ax = axes[1]
    for k, (op, key, label) in enumerate(RATIOS):
        off = -0.3 + 0.2 * k
        med = [r[op][key]["median"] * 100 for r in rows]
        lo = [m - r[op][key]["min"] * 100 for m, r in zip(med, rows, strict=True)]
        hi = [r[op][key]["max"] * 100 - m for m, r in zip(med, rows, strict=True)]
        ax.bar([i + off for i in x], med, 0.2, yerr=[lo, hi], capsize=2, color=f"C{k}", label=label)
    ax.axhline(70, color="k", ls="--", lw=1, label="70 %")
    ax.axhline(45, color="grey", ls=":", lw=1, label="45 % (replicated writes)")
    ax.set_xticks(list(x), names, fontsize=7)
    ax.set_ylabel("% of the paired raw phase")
    ax.set_title("ratio per pair: bar = median, whiskers = range")
    ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        kind, rest = sys.argv[2], sys.argv[3:]
        if kind == "fs":
            worker_fs(rest[0], rest[1], int(rest[2]), rest[3], float(rest[4]), *map(int, rest[5:6]))
        elif kind == "raw_server":
            worker_raw_server()
        elif kind == "raw_client":
            worker_raw_client(rest[0], int(rest[1]), rest[2], float(rest[3]), *map(int, rest[4:5]))
        elif kind == "fs_serve":
            worker_fs_serve(int(rest[0]), int(rest[1]))
        sys.exit(0)
    sys.exit(main())
