"""``malleable demo --io``: a checkpointing Jacobi job whose ad-hoc file system grows under its checkpoints and
shrinks after them.

What it shows: the file system a job gets (``submit --bb``) is sized by what the job writes. The demo starts a
local adhocfs with one data server of a fixed capacity and runs the Jacobi app against it (``MALLEABLE_FS``) in
three segments, each one resuming from the previous one's last checkpoint (``--restart``):

1. ``compute``: 1 process, small checkpoints (the grid only).
2. ``checkpoint``: 1 → 2 processes, every checkpoint padded to a large volume and all of them kept: more than one
   data server holds, so the demo first expands the file system to 2 servers (adhocfs's ``expand_fs``).
3. after it the demo removes all but the newest checkpoint and shrinks back to 1 server (``shrink_fs``, partial:
   only the leaving server's blocks move); ``finish``: 2 → 1 processes, small checkpoints, to the last iteration.

It prints one row per phase (processes, data servers, checkpoint MB written, MB stored on the file system,
seconds) and checks the final grid bit for bit against the serial NumPy reference.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from malleable.errors import ConfigError

__all__ = ["Segment", "io_capacity", "io_segments", "run_io_demo"]

log = logging.getLogger(__name__)

HEAVY_CHECKPOINTS = 4  # checkpoints the heavy segment writes and keeps
CKPT_DIR = "/checkpoints"


class Segment:
    """One run of the job: iterations up to ``until``, its process plan, checkpoint period, filler and keep."""

    def __init__(self, name: str, procs: int, plan: list[dict[str, int]] | None, until: int, every: int,
                 pad: int, keep: int) -> None:
        self.name, self.procs, self.plan, self.until = name, procs, plan, until
        self.every, self.pad, self.keep = every, pad, keep

    def procs_label(self) -> str:
        """``1`` or ``1->2``: the process counts the segment runs at."""
        sizes = [self.procs] + [p["procs"] for p in self.plan or []]
        return "->".join(str(s) for s in sizes)


def io_segments(iters: int, pad: int) -> list[Segment]:
    """The three job segments for ``iters`` iterations in all (a quarter, a half, a quarter)."""
    every = max(1, iters // 8)
    b1, b2 = iters // 4, iters // 4 + HEAVY_CHECKPOINTS * every
    return [
        Segment("compute", 1, None, b1, every, 0, 2),
        Segment("checkpoint", 1, [{"at_probe": (b2 - b1) // 2 + 1, "procs": 2}], b2, every, pad, 0),
        Segment("finish", 2, [{"at_probe": (iters - b2) // 2 + 1, "procs": 1}], iters, every, 0, 2),
    ]


def io_capacity(n: int, pad: int) -> int:
    """Bytes per data server: 3.5 padded checkpoints, so the heavy segment's 4 need a second server (and two
    servers hold them even when the block placement gives one of them a fair share more than half)."""
    return int(3.5 * (pad + 8 * n * n + (64 << 10)))


def _check(args: argparse.Namespace) -> None:
    if args.n < 3:
        raise ConfigError(f"--n must be >= 3, got {args.n}")
    if args.iters < 16:
        raise ConfigError(f"--iters must be >= 16 with --io (three segments, checkpoints every iters/8), "
                          f"got {args.iters}")
    if args.timeout <= 0:
        raise ConfigError(f"--timeout must be > 0, got {args.timeout}")
    if args.checkpoint_pad < 1 << 20:
        raise ConfigError(f"--checkpoint-pad must be at least 1M, got {args.checkpoint_pad}")


def _fs_state(addr: str) -> tuple[int, int]:
    """Active data servers and the bytes they hold."""
    from malleable.adhocfs import MetaClient

    with MetaClient(addr) as mc:
        servers = [s for s in mc.status().servers if s["state"] == "active"]
    return len(servers), sum(int(s["bytes"]) for s in servers)


def _run_segment(seg: Segment, args: argparse.Namespace, addr: str, where: Path) -> dict[str, Any]:
    from malleable.runtime._cli import build_run_argv

    stats = where / f"{seg.name}.json"
    cmd = [sys.executable, "-m", "malleable.apps.jacobi", "--n", str(args.n), "--iters", str(seg.until),
           "--check-every", str(seg.every), "--checkpoint-dir", CKPT_DIR, "--checkpoint-every", str(seg.every),
           "--checkpoint-keep", str(seg.keep), "--stats", str(stats)]
    if seg.pad:
        cmd += ["--checkpoint-pad", str(seg.pad)]
    if seg.name != "compute":
        cmd.append("--restart")
    if seg.until == args.iters:
        cmd += ["--out", str(where / "u.npy")]
    ns = argparse.Namespace(procs=seg.procs, hosts=None, hostfile=None,
                            plan=json.dumps(seg.plan) if seg.plan else None, timeout=args.timeout,
                            launcher_exec=None, no_auto_cleanup=False, max_procs_per_host=2, cmd=["--", *cmd])
    argv = build_run_argv(ns)
    env = dict(os.environ, MALLEABLE_FS=addr)
    log.info("segment %s: %s", seg.name, json.dumps(argv))
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=args.timeout * 4 + 120)
    if proc.returncode or not stats.exists():
        raise RuntimeError(f"segment {seg.name} exited with status {proc.returncode}\n{proc.stdout}{proc.stderr}")
    return dict(json.loads(stats.read_text()))


def _row(phase: str, procs: str, servers: str, ckpt_bytes: float | None, used: int, seconds: float) -> str:
    mb = "-" if ckpt_bytes is None else f"{ckpt_bytes / 1e6:.1f}"
    return f"{phase:<11} {procs:>6} {servers:>12} {mb:>13} {used / 1e6:>10.1f} {seconds:>8.2f}"


def run_io_demo(args: argparse.Namespace) -> int:
    """Run the I/O demo; returns 0 on PASS, 1 on FAIL.

    Raises:
        ConfigError: bad options.
    """
    import numpy as np

    from malleable.adhocfs import expand_fs, shrink_fs, start_fs
    from malleable.apps import _checkpoint
    from malleable.apps.jacobi import reference

    _check(args)
    segs = io_segments(args.iters, args.checkpoint_pad)
    cap = io_capacity(args.n, args.checkpoint_pad)
    out = sys.stdout  # the demo's own user-facing report
    out.write(f"malleable demo --io: Jacobi {args.n}x{args.n}, {args.iters} iterations, a checkpoint every "
              f"{segs[0].every}; adhocfs data servers of {cap / 1e6:.1f} MB each; the checkpoint segment pads "
              f"each checkpoint to {args.checkpoint_pad / 1e6:.1f} MB and keeps {HEAVY_CHECKPOINTS}\n")
    out.write(_head() + "\n")
    out.flush()
    with tempfile.TemporaryDirectory(prefix="malleable-demo-io-") as tmp:
        where = Path(args.keep) if args.keep else Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        dep = start_fs("127.0.0.1", ["127.0.0.1"], capacity=cap)
        with dep:
            addr = dep.address
            _print(out, _row("fs start", "-", "1", None, 0, time.perf_counter() - t0))
            try:
                for seg in segs:
                    if seg.name == "checkpoint":  # the next checkpoints need more than one server holds
                        t0 = time.perf_counter()
                        servers, procs, _ = expand_fs(addr, ["127.0.0.1"], state=dep.state, capacity=cap)
                        dep.procs.update(procs)
                        dep.data.update(servers)
                        k, used = _fs_state(addr)
                        _print(out, _row("expand fs", "-", f"1->{k}", None, used, time.perf_counter() - t0))
                    if seg.name == "finish":  # drop the old checkpoints, give the second server back
                        t0 = time.perf_counter()
                        store = _checkpoint.open_store(CKPT_DIR, addr)
                        try:
                            _checkpoint.prune(store, 1)
                        finally:
                            store.close()
                        k, used = _fs_state(addr)
                        _print(out, _row("prune", "-", str(k), None, used, time.perf_counter() - t0))
                        t0 = time.perf_counter()
                        shrink_fs(addr, sorted(dep.data)[1:], mode="partial", timeout=args.timeout)
                        k2, used = _fs_state(addr)
                        _print(out, _row("shrink fs", "-", f"{k}->{k2}", None, used, time.perf_counter() - t0))
                    t0 = time.perf_counter()
                    stats = _run_segment(seg, args, addr, where)
                    k, used = _fs_state(addr)
                    written = sum(c["bytes"] for c in stats.get("checkpoints", []))
                    _print(out, _row(seg.name, seg.procs_label(), str(k), written, used,
                                     time.perf_counter() - t0))
                    if seg.pad:
                        need = "the second server is needed" if used > cap else "one server would do"
                        _print(out, f"  {used / 1e6:.1f} MB stored, one data server holds {cap / 1e6:.1f} MB: "
                                    f"{need}")
            except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
                out.write(f"FAIL: {e}\n")
                return 1
        same = bool(np.array_equal(np.load(where / "u.npy"), reference(args.n, args.iters)))
    out.write(("PASS" if same else "FAIL") + f": final grid {'equals' if same else 'differs from'} the serial "
              "NumPy reference bit for bit\n")
    out.flush()
    return 0 if same else 1


def _head() -> str:
    return f"{'phase':<11} {'procs':>6} {'data servers':>12} {'checkpoint MB':>13} {'fs used MB':>10} {'seconds':>8}"


def _print(out: Any, line: str) -> None:
    out.write(line + "\n")
    out.flush()
