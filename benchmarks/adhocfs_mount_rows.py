"""The mount rows of benchmarks/adhocfs_io.py: unmodified tools through a FUSE mount against the Python client,
and an mdtest-like metadata figure against a local tmpfs, all measured in the same run (alternating)."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

MIB = 1 << 20


def _client(spawn: Callable[..., subprocess.Popen], addr: str, streams: int, per: int, tag: str) -> dict[str, float]:
    """MB/s of ``streams`` Python client processes writing then reading ``per`` bytes each in 1 MiB requests."""
    res = {}
    for op in ("write", "read"):
        start_at = time.time() + 1.0
        procs = [spawn("fs", addr, f"/{tag}{i}", str(per), op, str(start_at), str(MIB)) for i in range(streams)]
        times = [json.loads(p.communicate(timeout=600)[0]) for p in procs]
        res[op] = per * streams / (max(t["t1"] for t in times) - min(t["t0"] for t in times)) / 1e6
    return res


def _clear(mnt: str) -> None:
    """Remove every file at the top of the mount ``mnt``."""
    for name in os.listdir(mnt):
        os.unlink(os.path.join(mnt, name))


def _timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, timeout=600)
    return time.perf_counter() - t0


def _dd(mnt: str, per: int, tag: str, direct: bool) -> dict[str, float]:
    """MB/s of dd writing (fsync at the end: the close publishes) then reading one file in 1 MiB requests, through
    the page cache or with O_DIRECT."""
    path = os.path.join(mnt, tag)
    oflag, iflag = (["oflag=direct"], ["iflag=direct"]) if direct else ([], [])
    w = _timed(["dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={per // MIB}", "conv=fsync", "status=none",
                *oflag])
    r = _timed(["dd", f"if={path}", "of=/dev/null", "bs=1M", "status=none", *iflag])
    return {"write": per / w / 1e6, "read": per / r / 1e6}


def _fio(mnt: str, streams: int, per: int, tag: str, direct: bool) -> dict[str, float]:
    """MB/s of fio with ``streams`` jobs, each writing then reading its file sequentially in 1 MiB requests."""
    res = {}
    for rw, key in (("write", "write"), ("read", "read")):
        out = subprocess.run(
            ["fio", f"--name={tag}", f"--directory={mnt}", f"--size={per}", f"--numjobs={streams}", "--bs=1M",
             f"--rw={rw}", "--ioengine=psync", "--end_fsync=1", "--group_reporting", "--output-format=json",
             f"--direct={int(direct)}"],
            check=True, capture_output=True, text=True, timeout=600).stdout
        job = json.loads(out[out.index("{"):])["jobs"][0]
        res[key] = job[key]["bw_bytes"] / 1e6
    return res


def _mdtest(root: str, n: int, fs: Any = None) -> dict[str, float]:
    """Operations per second of creating, stat-ing and removing ``n`` empty files in one directory, through the
    operating system (``root`` a directory) or through the Python client ``fs`` (``root`` a path in it)."""
    names = [f"{root}/f{i}" for i in range(n)]
    out = {}
    t0 = time.perf_counter()
    for p in names:
        if fs is None:
            os.close(os.open(p, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644))
        else:
            fs.open(p, "xb").close()
    out["create"] = n / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    for p in names:
        os.stat(p) if fs is None else fs.stat(p)
    out["stat"] = n / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    for p in names:
        os.unlink(p) if fs is None else fs.remove(p)
    out["unlink"] = n / (time.perf_counter() - t0)
    return out


def _serve_other(python: str, nservers: int) -> tuple[subprocess.Popen, str]:
    """A file system of ``nservers`` data servers started by another tree's Python (its servers may speak another
    protocol version than this tree's); stopped when the process's stdin closes. Run from ``/``: a ``malleable``
    folder in the working directory would shadow that tree's modules."""
    proc = subprocess.Popen([python, str(Path(__file__).with_name("adhocfs_io.py")), "--worker", "fs_serve",
                             str(nservers), "1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd="/")
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        raise SystemExit(f"the other tree's file system did not start ({python})")
    return proc, json.loads(line)["address"]


def _mount_other(python: str, addr: str, path: str) -> None:
    """Mount with another tree's code (its Python runs its mount daemon; from ``/``, as above)."""
    code = f"from malleable.adhocfs._fuse_mount import mount; mount({addr!r}, {path!r})"
    subprocess.run([python, "-c", code], check=True, timeout=120, cwd="/")


def mount_rows(nservers: int, total: int, reps: int, md_files: int,
               spawn: Callable[..., subprocess.Popen], against: str | None = None,
               label: str = "main") -> dict[str, Any]:
    """Throughput of dd and fio through a mount, each paired with the Python client just before it, and the
    metadata figure; medians of ``reps`` repetitions. With ``against`` (another tree's Python) that tree also
    starts a file system of the same shape and mounts it with its mount daemon, and each tool runs through both
    mounts in turn (which goes first alternates from one repetition to the next), after the same client run (this
    tree's, on this tree's file system: the common denominator of both ratios)."""
    from malleable.adhocfs import connect, start_fs
    from malleable.adhocfs._fuse_mount import mount, umount

    per1 = total // MIB * MIB
    per2 = total // 2 // MIB * MIB
    tools = ("dd", "dd O_DIRECT", "fio", "fio O_DIRECT")
    sides = ["this", *([label] if against else [])]
    runs: dict[tuple[str, str], list[dict[str, float]]] = {(t, v): [] for t in tools for v in sides}
    md: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as st, start_fs("127.0.0.1", ["127.0.0.1"] * nservers, state=st) as dep:
        mnts = {"this": os.path.join(st, "mnt"), label: os.path.join(st, "other")}
        os.mkdir(mnts["this"])
        mount(dep.address, mnts["this"])
        other = None
        if against:
            os.mkdir(mnts[label])
            other, other_addr = _serve_other(against, nservers)
            _mount_other(against, other_addr, mnts[label])
        try:
            for rep in range(reps):  # the client first, then the tools through the mount(s) doing the same
                order = sides if rep % 2 == 0 else sides[::-1]
                base = _client(spawn, dep.address, 1, per1, f"c{rep}-")
                _clear(mnts["this"])  # the client's files gone: each side's servers hold only what its tool wrote
                for direct in (False, True):
                    for side in order:
                        got = _dd(mnts[side], per1, f"dd{rep}{direct:d}{side}", direct)
                        runs[("dd O_DIRECT" if direct else "dd", side)].append(
                            {**got, "client_write": base["write"], "client_read": base["read"]})
                if shutil.which("fio"):
                    base = _client(spawn, dep.address, 2, per2, f"k{rep}-")
                    _clear(mnts["this"])
                    for direct in (False, True):
                        for side in order:
                            got = _fio(mnts[side], 2, per2, f"fio{rep}{direct:d}{side}", direct)
                            runs[("fio O_DIRECT" if direct else "fio", side)].append(
                                {**got, "client_write": base["write"], "client_read": base["read"]})
                for side in sides:
                    _clear(mnts[side])
            if md_files:
                os.mkdir(os.path.join(mnts["this"], "md"))
                md["mount"] = _mdtest(os.path.join(mnts["this"], "md"), md_files)
                with connect(dep.address) as fs:
                    fs.mkdir("/mdc")
                    md["client"] = _mdtest("/mdc", md_files, fs)
        finally:
            try:
                umount(mnts["this"])
                if against:
                    umount(mnts[label])
            finally:
                if other is not None:
                    assert other.stdin is not None
                    other.stdin.close()
                    other.wait(timeout=60)
    if md_files:
        with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as shm:  # noqa: S108
            md["tmpfs"] = _mdtest(shm, md_files)
    rows = []
    for (tool, side), rs in runs.items():
        if not rs:
            continue
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        rows.append({
            "tool": tool, "variant": side, "streams": 1 if tool.startswith("dd") else 2, "servers": nservers,
            "write_MBps": round(med["write"], 1), "read_MBps": round(med["read"], 1),
            "client_write_MBps": round(med["client_write"], 1), "client_read_MBps": round(med["client_read"], 1),
            "write_vs_client": round(statistics.median(r["write"] / r["client_write"] for r in rs), 3),
            "read_vs_client": round(statistics.median(r["read"] / r["client_read"] for r in rs), 3),
            "all": [{k: round(v, 1) for k, v in r.items()} for r in rs],
        })
    return {"bytes_per_row": per1, "against": label if against else None, "rows": rows,
            "metadata": {"files": md_files, **md}}


def print_mount(res: dict[str, Any]) -> None:
    """The mount rows and the metadata figure as tables."""
    print(f"\nthrough the mount vs the Python client (same run, 1 MiB requests, {res['bytes_per_row'] >> 20} MiB)")
    print(f"{'tool':>11} {'mount':>16} {'streams':>7} {'write MB/s':>11} {'client':>7} {'ratio':>6} {'read MB/s':>10} "
          f"{'client':>7} {'ratio':>6}")
    for r in res["rows"]:
        print(f"{r['tool']:>11} {r.get('variant', 'this'):>16} {r['streams']:>7} {r['write_MBps']:>11.0f} "
              f"{r['client_write_MBps']:>7.0f} {r['write_vs_client']:>6.0%} {r['read_MBps']:>10.0f} "
              f"{r['client_read_MBps']:>7.0f} {r['read_vs_client']:>6.0%}")
    md = res["metadata"]
    if md.get("files"):
        print(f"\nmetadata, {md['files']} files in one directory (operations per second)")
        print(f"{'where':>7} {'create':>8} {'stat':>8} {'unlink':>8}")
        for where in ("mount", "client", "tmpfs"):
            if where in md:
                v = md[where]
                print(f"{where:>7} {v['create']:>8.0f} {v['stat']:>8.0f} {v['unlink']:>8.0f}")


def plot_mount(res: dict[str, Any], path: Path) -> None:
    """Bars: MB/s through the mount beside the Python client; metadata operations per second (log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 4.5))
    labels, vals, colors = [], [], []
    for r in res["rows"]:
        for op in ("write", "read"):
            side = r.get("variant", "this")
            labels += [f"{r['tool']} {op}" + ("" if side == "this" else f" ({side})"), f"client {op}"]
            vals += [r[f"{op}_MBps"], r[f"client_{op}_MBps"]]
            colors += ["tab:blue" if side == "this" else "tab:orange", "tab:grey"]
    ax.bar(range(len(vals)), vals, color=colors)
    ax.set_xticks(range(len(vals)), labels, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("MB/s")
    ax.set_title("through the mount (blue; orange: other tree's daemon) vs client (grey)")
    md = res["metadata"]
    wheres = [w for w in ("mount", "client", "tmpfs") if w in md]
    if wheres:
        for i, w in enumerate(wheres):
            bx.bar([j + 0.25 * i for j in range(3)], [md[w][k] for k in ("create", "stat", "unlink")], 0.25,
                   label=w)
        bx.set_xticks([j + 0.25 for j in range(3)], ["create", "stat", "unlink"])
        bx.set_yscale("log")
        bx.set_ylabel("operations/s")
        bx.set_title(f"metadata, {md.get('files', 0)} files")
        bx.legend(fontsize=8)
    else:  # --md-files 0
        bx.set_axis_off()
        bx.set_title("metadata: not measured")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit("adhocfs_mount_rows.py is a part of benchmarks/adhocfs_io.py: run that one (the mount rows: "
                     "--mount-servers N; only them: --configs '')")
