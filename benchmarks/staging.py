"""Staging throughput: the controller's stager copying into and out of a job's adhocfs, against ``cp`` of the same
files on the local disk, measured in the same run, rounds alternating.

Two workloads: one large file, and a tree of many small files (a folder staged whole, ``DIR/:/fs/dir/``). For each
round and workload, in turn: ``cp`` (``cp -r`` for the tree) into a new local folder (the baseline), the stage-in
(``malleable.controller.daemon._stager`` as the daemon runs it: a child process that reads one request and copies
each pair), and the stage-out of the same files back to a new local folder, whose bytes are compared with the
source. A stager run copies a 1-byte marker first: its time is taken from the marker's answer to the data's, so the
child's interpreter start (about 0.15 s, the same for every size) is not counted as copying; the ``cp`` baseline
is one ``cp`` process, whose own start is counted (about 1 ms). A stage-out makes its files durable before it
reports them (``fsync``/``syncfs``: the file system is torn down after it), which ``cp`` does not: the second
baseline, ``cp+sync``, is ``cp`` followed by ``sync -f`` of the copy (the disk's share of a durable copy); for the large
file a third, ``dd direct``, is ``dd oflag=direct conv=fsync`` of it (a durable copy straight to the disk, as the
stager writes a large file: the disk's own speed, which no durable copy can beat).

``--other PYTHON`` runs the same stager requests with another checkout's interpreter too (``/work/main/.venv/bin/
python``: the previous commit built beside this one), alternating with this tree's, for before/after figures; its
stager copies into and out of a file system of the same shape started by that interpreter (the two trees' servers
may speak different protocol versions), beside this tree's.

The file system is one metadata server and ``--servers`` data servers on 127.0.0.1, started with adhocfs's own
``start_fs`` (what the controller calls), their blocks in memory as the controller starts a job's (``--store dir``:
also mirrored to a folder of the same disk as the ``cp`` copies, each block written through to a file).

Run: ``.venv/bin/python benchmarks/staging.py [--quick] [--other /work/main/.venv/bin/python]``.
Writes ``benchmarks/results/staging.json`` and ``staging.png``.
"""

from __future__ import annotations

import argparse
import filecmp
import functools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from malleable.adhocfs import connect
from malleable.adhocfs._deploy import start_fs

HERE = Path(__file__).resolve().parent
TOKEN = "bench-staging-token"  # noqa: S105 - a benchmark secret
M = 1 << 20


def stats(xs: list[float]) -> dict[str, float]:
    return {"n": len(xs), "min": round(min(xs), 1), "median": round(statistics.median(xs), 1),
            "max": round(max(xs), 1)}


def make_tree(root: Path, files: int, size: int) -> int:
    """``files`` files of ``size`` bytes in 10 folders; returns the bytes."""
    total = 0
    for i in range(files):
        d = root / f"d{i % 10:02d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i:05d}.bin").write_bytes(os.urandom(size))
        total += size
    return total


def same_tree(a: Path, b: Path) -> bool:
    if a.is_file():
        return filecmp.cmp(a, b, shallow=False)
    c = filecmp.dircmp(a, b)
    if c.left_only or c.right_only or c.funny_files:
        return False
    return all(filecmp.cmp(a / f, b / f, shallow=False) for f in c.common_files) and \
        all(same_tree(a / d, b / d) for d in c.common_dirs)


STREAMS: int | None = None  # --streams: asked of this tree's stager (None: its default)


def stager(python: str, address: str, direction: str, pairs: list[tuple[str, str]]) -> float:
    """Run one stager child with ``python``; seconds from the first pair's answer (the marker) to the last."""
    req = {"address": address, "secret": TOKEN, "direction": direction, "pairs": [list(p) for p in pairs],
           "uid": None, "gid": None, "parent": os.getpid(), **({"streams": STREAMS} if STREAMS else {})}
    env = {k: v for k, v in os.environ.items() if k not in ("MALLEABLE_KEY", "MALLEABLE_KEY_FILE")}
    p = subprocess.Popen([python, "-m", "malleable.controller.daemon._stager"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd="/")
    assert p.stdin is not None and p.stdout is not None
    p.stdin.write(json.dumps(req).encode())
    p.stdin.close()
    times = []
    for line in p.stdout:
        d = json.loads(line)
        if d["error"]:
            raise SystemExit(f"stage-{direction} failed: {d['error']}")
        times.append(time.perf_counter())
    err = p.stderr.read().decode() if p.stderr else ""
    if p.wait() != 0 or len(times) != len(pairs):
        raise SystemExit(f"stager exit {p.returncode}: {err[-500:]}")
    return times[-1] - times[0]


def cp(src: Path, dst: Path, how: str = "cp") -> float:
    t = time.perf_counter()
    if how == "dd direct":
        subprocess.run(["dd", f"if={src}", f"of={dst}", "bs=4M", "oflag=direct", "conv=fsync", "status=none"],
                       check=True)
    else:
        subprocess.run(["cp", "-r", str(src), str(dst)], check=True)
    if how == "cp+sync":
        subprocess.run(["sync", "-f", str(dst)], check=True)
    return time.perf_counter() - t


def drop(fs_addr: str, path: str) -> None:
    """Remove ``path`` (a file or a folder) from the file system, so the next round writes it anew."""
    with connect(fs_addr, token=TOKEN.encode()) as fs:
        def rm(p: str) -> None:
            if fs.stat(p).is_dir:
                for e in fs.listdir(p):
                    rm(f"{p}/{e}")
                return  # adhocfs keeps empty folders cheaply; the files are what a round rewrites
            fs.remove(p)
        if fs.exists(path):
            rm(path)


_OTHER = """
import sys
sys.path.insert(0, sys.argv[1])
from staging import TOKEN, drop
from malleable.adhocfs._deploy import start_fs
dep = start_fs("127.0.0.1", ["127.0.0.1"] * int(sys.argv[2]), token=TOKEN.encode(), dir=sys.argv[3] or None)
print(dep.address, flush=True)
for line in sys.stdin:
    drop(dep.address, line.strip())
    print("dropped", flush=True)
dep.stop()
"""


class OtherFs:
    """A file system started by another checkout's Python (its servers speak that tree's protocol, which its stager
    needs), with ``drop`` done by that Python too; stopped when its stdin closes."""

    def __init__(self, python: str, servers: int, blocks: str) -> None:
        self.proc = subprocess.Popen([python, "-c", _OTHER, str(HERE), str(servers), blocks],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd="/")
        assert self.proc.stdout is not None
        self.address = self.proc.stdout.readline().strip()
        if not self.address:
            raise SystemExit(f"the other tree's file system did not start ({python})")

    def drop(self, path: str) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(path + "\n")
        self.proc.stdin.flush()
        if self.proc.stdout.readline().strip() != "dropped":
            raise SystemExit(f"the other tree's file system did not remove {path}")

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def run(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="bench-staging-", dir=args.dir))
    os.environ["MALLEABLE_TOKEN"] = TOKEN
    pythons = {"this": sys.executable, **({"other": args.other} if args.other else {})}
    try:
        src = work / "src"
        src.mkdir()
        marker = src / "marker"
        marker.write_bytes(b"m")
        big = src / "big.bin"
        with open(big, "wb") as f:
            for _ in range(args.big // M):
                f.write(os.urandom(M))
        tree = src / "tree"
        tree_bytes = make_tree(tree, args.files, args.file_size)
        loads = {"large file": (big, args.big), "small files": (tree, tree_bytes)}
        dep = start_fs("127.0.0.1", ["127.0.0.1"] * args.servers, token=TOKEN.encode(),
                       dir=str(work / "blocks") if args.store == "dir" else None)
        other = OtherFs(args.other, args.servers, str(work / "blocks-other") if args.store == "dir" else "") \
            if args.other else None
        # each interpreter's file system: its address, and how a path is removed from it
        systems = {"this": (dep.address, functools.partial(drop, dep.address)),
                   **({"other": (other.address, other.drop)} if other else {})}
        res: dict[str, dict[str, list[float]]] = {w: {} for w in loads}
        equal = True
        n = 0
        try:
            for r in range(args.rounds):
                for w, (path, size) in loads.items():
                    order = list(pythons.items())
                    if r % 2:
                        order.reverse()
                    cols = res[w]
                    n += 1
                    dst = work / f"cp{n}"
                    for base in ("cp", "cp+sync") + (("dd direct",) if path.is_file() else ()):
                        cols.setdefault(base, []).append(size / cp(path, dst, base) / 1e6)
                        shutil.rmtree(dst) if dst.is_dir() else dst.unlink()
                    for name, py in order:
                        fsdst = "/in/" + path.name + ("/" if path.is_dir() else "")
                        addr, remove = systems[name]
                        remove("/in/" + path.name)
                        t = stager(py, addr, "in", [(str(marker), "/in/marker"),
                                                    (str(path) + ("/" if path.is_dir() else ""), fsdst)])
                        cols.setdefault(f"stage-in {name}", []).append(size / t / 1e6)
                        out = work / f"out{n}{name}"
                        out.mkdir()
                        t = stager(py, addr, "out", [("/in/marker", str(out / "marker")),
                                                     ("/in/" + path.name, str(out / path.name))])
                        cols.setdefault(f"stage-out {name}", []).append(size / t / 1e6)
                        equal &= same_tree(path, out / path.name)
                        shutil.rmtree(out)
                    print(f"round {r + 1} {w}: " + ", ".join(f"{k} {v[-1]:.0f}" for k, v in cols.items()),
                          flush=True)
        finally:
            dep.stop()
            if other is not None:
                other.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"date": time.strftime("%Y-%m-%d %H:%M"), "rounds": args.rounds, "data_servers": args.servers,
            "store": args.store,
            "large_file_bytes": args.big, "small_files": args.files, "small_file_bytes": args.file_size,
            "other_python": args.other or None, "bytes_equal": equal,
            "loadavg_end": os.getloadavg()[0],
            "MBps": {w: {k: stats(v) for k, v in cols.items()} for w, cols in res.items()},
            "ratio_to_cp": {w: {k: round(statistics.median(v) / statistics.median(cols["cp"]), 3)
                                for k, v in cols.items() if k != "cp"} for w, cols in res.items()},
            "ratio_to_cp_sync": {w: {k: round(statistics.median(v) / statistics.median(cols["cp+sync"]), 3)
                                     for k, v in cols.items() if k.startswith("stage")} for w, cols in res.items()},
            "raw": res}


def table(result: dict[str, Any]) -> str:
    lines = [f"{'workload':<12} {'copy':<16} {'MB/s median (min-max)':>26} {'of cp':>7} {'of cp+sync':>11}"]
    for w, cols in result["MBps"].items():
        for k, s in cols.items():
            ratio, durable = result["ratio_to_cp"][w].get(k), result["ratio_to_cp_sync"][w].get(k)
            lines.append(f"{w:<12} {k:<16} {s['median']:>10.0f} ({s['min']:.0f}-{s['max']:.0f}){'':>4} "
                         f"{'' if ratio is None else f'{ratio:.0%}':>7} "
                         f"{'' if durable is None else f'{durable:.0%}':>11}")
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(result["MBps"]), figsize=(6 * len(result["MBps"]), 4))
    for ax, (w, cols) in zip(axes, result["MBps"].items(), strict=True):
        names = list(cols)
        med = [cols[k]["median"] for k in names]
        err = [[cols[k]["median"] - cols[k]["min"] for k in names], [cols[k]["max"] - cols[k]["median"] for k in names]]
        ax.bar(range(len(names)), med, yerr=err,
               color=["tab:blue" if k.endswith(" this") else "tab:orange" if k.startswith("stage") else "silver"
                      for k in names])
        ax.axhline(cols["cp"]["median"] / 2, color="k", ls=":", lw=1, label="50% of cp")
        ax.set_xticks(range(len(names)), names, rotation=20, fontsize=7)
        ax.set_ylabel("MB/s (median, min-max)")
        ax.set_title(f"{w}: stager vs cp, same run")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 round, 64 MiB, 200 files")
    ap.add_argument("--rounds", type=int, default=6,
                    help="rounds (even: each stager goes first as often; the second of a round runs faster)")
    ap.add_argument("--big", type=int, default=512 * M, help="bytes of the large file")
    ap.add_argument("--files", type=int, default=2000, help="small files in the tree")
    ap.add_argument("--file-size", type=int, default=32 << 10, help="bytes of each small file")
    ap.add_argument("--servers", type=int, default=1, help="data servers")
    ap.add_argument("--store", choices=("memory", "dir"), default="memory",
                    help="data servers keep blocks in memory, as the controller starts a job's (default), or also in "
                         "a folder of the same disk")
    ap.add_argument("--other", help="another checkout's python to compare with (e.g. /work/main/.venv/bin/python)")
    ap.add_argument("--streams", type=int, default=None, help="streams asked of the stager (default: its own)")
    ap.add_argument("--dir", default=None, help="where the files go (default: the temporary folder)")
    ap.add_argument("--out", default=str(HERE / "results" / "staging.json"))
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.big, args.files = 1, 64 * M, 200
    global STREAMS
    STREAMS = args.streams
    result = run(args)
    print(table(result))
    print(f"bytes equal: {result['bytes_equal']}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    plot(result, out.with_suffix(".png"))
    return 0 if result["bytes_equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
