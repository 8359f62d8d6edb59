"""``malleable demo --io``: one running Jacobi job whose ad-hoc file system grows under its checkpoints and
shrinks after them, driven by the RIO/AIO rule.

What it shows: the file system a job gets (``submit --bb``) is sized by the I/O rate the job asks for. The demo
starts a local adhocfs with one data server and runs the Jacobi app once against it (``MALLEABLE_FS``): a
checkpoint phase (``CHECKPOINTS`` padded h5py checkpoints, one every K iterations, all kept) and then a compute
phase without I/O (the iterations after the last checkpoint). Meanwhile a watcher in this process
(:class:`malleable.adhocfs._monitor.Watcher`, the one behind ``malleable fs watch``) samples the achieved rate
(AIO) and applies the RIO/AIO rule (:func:`malleable.adhocfs._rule.decide`) to the requested rate (RIO) the job
declared (``declare_rio``, done here on the job's behalf):

* checkpoint phase: RIO ``RIO_CHECKPOINT`` MB/s, more than one data server gives, so the rule adds a second
  one (``n_max`` 2 bounds it);
* compute phase: RIO ``RIO_COMPUTE`` MB/s. An idle step records no sample, so the window still holds the
  rates the last checkpoint achieved, well above the new request: the rule removes a server again (partial
  redistribution: only the leaving server's blocks move).

It prints one row per phase (data servers, MB written to the servers, the rate while writing, the watcher's
mean AIO, seconds), the rule's decisions,
and checks: the final grid equals the serial NumPy reference bit for bit, every checkpoint reads back after the
shrink, a restart from the last checkpoint reproduces the final grid bit for bit, and no server process is
left. ``--keep DIR`` also writes the timeline and the checks to ``DIR/io.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from malleable.adhocfs._monitor import Watcher
from malleable.adhocfs._rule import RuleConfig
from malleable.errors import ConfigError

__all__ = ["CHECKPOINTS", "IoWatcher", "Phase", "checkpoint_period", "phases", "rule_config", "run_io_demo"]

log = logging.getLogger(__name__)

CHECKPOINTS = 4  # checkpoints of the checkpoint phase (all kept)
CKPT_DIR = "/checkpoints"
JOB = "jacobi"  # the job name the requested rate is declared under
RIO_CHECKPOINT = 400.0  # MB/s the checkpoint phase asks for: above what one data server gives here
RIO_COMPUTE = 1.0  # MB/s the compute phase asks for (0 would withdraw the request: the rule then only keeps)
INTERVAL = 0.2  # seconds between the watcher's samples
SHRINK_WAIT = 20.0  # seconds the demo waits after the job for a shrink the rule has not made yet


def rule_config() -> RuleConfig:
    """The rule's parameters: RIO from the job's declaration, a short window and cool-down, 1 to 2 servers."""
    return RuleConfig(rio=0.0, tolerance=10.0, k=2, n_min=1, n_max=2, cooldown=1.0)


def checkpoint_period(iters: int) -> int:
    """K: ``CHECKPOINTS`` checkpoints at K, 2K, ... and a compute phase of K - 1 iterations or fewer after them
    (``CHECKPOINTS + 1`` periods do not fit in ``iters``, so none is written at the last iteration)."""
    return iters // (CHECKPOINTS + 1) + 1


@dataclass
class IoWatcher(Watcher):
    """The ``fs watch`` watcher, also keeping each data server's byte counters (servers that left keep their
    last values) so the demo can tell the bytes of each phase."""

    written: dict[int, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def sample(self, servers: list[dict[str, Any]], now: float) -> float | None:
        self.count(servers)
        return super().sample(servers, now)

    def count(self, servers: list[dict[str, Any]]) -> None:
        """Take the byte counters of one status snapshot."""
        with self.lock:
            for s in servers:
                if s.get("reachable"):
                    self.written[s["sid"]] = max(self.written.get(s["sid"], 0), int(s.get("write_bytes", 0)))

    def total(self) -> int:
        """Bytes written to all data servers so far (after a fresh status snapshot)."""
        servers, _ = self._snapshot()
        self.count(servers)
        with self.lock:
            return sum(self.written.values())

    def active(self) -> int:
        """Active data servers now."""
        servers, _ = self._snapshot()
        return sum(1 for s in servers if s["state"] == "active")


@dataclass(frozen=True)
class Mark:
    """A moment of the run: what starts there (``job``, ``compute``, ``expand``, ``shrink``, ``changed``: a
    change is over, ``job end``, ``end``), the active data servers from then on, and the bytes written so far."""

    t: float
    what: str
    servers: int
    written: int
    moved: int = 0  # bytes a shrink moved (its row's bytes written)


@dataclass(frozen=True)
class Phase:
    """One row of the table: from one mark to the next."""

    name: str
    servers: str
    written: int  # bytes the data servers took in: the job's writes, or the blocks a shrink moved
    rate: float | None  # MB/s while writing: the job's checkpoints of the phase, or the shrink's moves
    aio: float | None  # mean of the watcher's samples in the phase (MB/s), None if it saw no I/O
    seconds: float

    def row(self) -> str:
        rate = "-" if self.rate is None else f"{self.rate:.1f}"
        aio = "-" if self.aio is None else f"{self.aio:.1f}"
        return (f"{self.name:<11} {self.servers:>12} {self.written / 1e6:>10.1f} {rate:>10} {aio:>8} "
                f"{self.seconds:>8.2f}")


HEAD = f"{'phase':<11} {'data servers':>12} {'written MB':>10} {'write MB/s':>10} {'AIO MB/s':>8} {'seconds':>8}"


def phases(marks: list[Mark], samples: list[tuple[float, float]],
           ckpts: list[tuple[float, int, float]]) -> list[Phase]:
    """Rows between consecutive marks (sorted by time): the job's phase, or the rule's change in between.

    ``samples`` are the watcher's ``(t, AIO)``, ``ckpts`` the job's checkpoints ``(t seen, bytes, seconds)``.
    Rows shorter than 20 ms are left out.
    """
    out: list[Phase] = []
    job = "checkpoint"
    for prev, m in zip(marks, marks[1:]):
        if prev.what in ("expand", "shrink"):  # the mark of a change holds the servers before it
            name, label = prev.what, f"{prev.servers}->{m.servers}"
            written = m.written - prev.written + prev.moved
            rate = prev.moved / 1e6 / (m.t - prev.t) if prev.moved else None
        else:
            job = {"compute": "compute", "job end": "after job"}.get(prev.what, job)
            name, label, written = job, str(prev.servers), m.written - prev.written
            mine = [(b, s) for t, b, s in ckpts if prev.t < t <= m.t]
            rate = sum(b for b, _ in mine) / 1e6 / sum(s for _, s in mine) if mine else None
        inside = [a for t, a in samples if prev.t < t <= m.t]
        if m.t - prev.t >= 0.02:
            out.append(Phase(name, label, written, rate, sum(inside) / len(inside) if inside else None,
                             m.t - prev.t))
    return out


def _check(args: argparse.Namespace) -> None:
    if args.n < 3:
        raise ConfigError(f"--n must be >= 3, got {args.n}")
    if args.iters < 50:
        raise ConfigError(f"--iters must be >= 50 with --io ({CHECKPOINTS} checkpoints, then a compute phase), "
                          f"got {args.iters}")
    if args.timeout <= 0:
        raise ConfigError(f"--timeout must be > 0, got {args.timeout}")
    if args.checkpoint_pad < 1 << 20:
        raise ConfigError(f"--checkpoint-pad must be at least 1M, got {args.checkpoint_pad}")


def _job_argv(args: argparse.Namespace, every: int, stats: Path, out: Path, restart: bool) -> list[str]:
    from malleable.runtime._cli import build_run_argv

    cmd = [sys.executable, "-m", "malleable.apps.jacobi", "--n", str(args.n), "--iters", str(args.iters),
           "--check-every", str(every), "--checkpoint-dir", CKPT_DIR, "--stats", str(stats), "--out", str(out)]
    if restart:
        cmd.append("--restart")
    else:
        cmd += ["--checkpoint-every", str(every), "--checkpoint-keep", "0", "--checkpoint-pad",
                str(args.checkpoint_pad)]
    ns = argparse.Namespace(procs=1, hosts=None, hostfile=None, plan=None, timeout=args.timeout,
                            launcher_exec=None, no_auto_cleanup=False, max_procs_per_host=1, cmd=["--", *cmd])
    return list(build_run_argv(ns))


def _watch(w: IoWatcher, stop: threading.Event, marks: list[Mark], errors: list[str]) -> None:
    """Step the watcher every ``INTERVAL`` until ``stop``; a change it made becomes two marks (start, end)."""
    while not stop.is_set():
        t0 = w.clock()
        try:
            w.step()
            rec = w.decisions[-1]
            if "result" in rec:
                with w.lock:
                    before = sum(w.written.values())  # the counters the decision was taken on
                res = rec["result"]
                after = rec["servers"] + len(res.get("added", [])) - len(res.get("removed", []))
                marks.append(Mark(rec["t"], rec["action"], rec["servers"], before, int(res.get("bytes_moved", 0))))
                marks.append(Mark(w.clock(), "changed", after, w.total()))
        except Exception as e:  # noqa: BLE001 - the demo reports it as its failure; the thread must not die silently
            errors.append(f"watcher: {e}")
            return
        stop.wait(max(0.0, w.interval - (w.clock() - t0)))


def _leftovers(state: str) -> list[int]:
    """Pids of live processes whose command line names the file system's state directory."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if state.encode() in f.read():
                    out.append(int(pid))
        except OSError:
            continue
    return out


def _read_all(addr: str, iters: list[int], report: dict[str, Any], out: Any) -> list[str]:
    """Read every checkpoint whole (grid and filler): all there, each of its iteration, the same filler."""
    import h5py
    import numpy as np

    from malleable.apps import _checkpoint

    store = _checkpoint.open_store(CKPT_DIR, addr)
    bad = None
    try:
        found = [it for it, _ in _checkpoint.list_checkpoints(store)]
        if found != iters:
            bad = f"checkpoints {found}, expected {iters}"
        pad0 = None
        for it in iters if bad is None else []:
            with store.open(_checkpoint.checkpoint_name(it), "rb") as f, h5py.File(f, "r") as h:
                np.array(h["u"])
                pad = np.array(h["pad"])
                if int(h.attrs["iteration"]) != it:
                    bad = f"checkpoint {it} says iteration {h.attrs['iteration']}"
            pad0 = pad if pad0 is None else pad0
            if bad is None and not np.array_equal(pad, pad0):
                bad = f"checkpoint {it}: its filler differs from the first checkpoint's"
    finally:
        store.close()
    report["checks"]["checkpoints_read"] = bad is None
    _print(out, f"every checkpoint after the shrink: {bad or f'all {len(iters)} read back whole'}")
    return [bad] if bad else []


def run_io_demo(args: argparse.Namespace) -> int:
    """Run the I/O demo; returns 0 on PASS, 1 on FAIL.

    Raises:
        ConfigError: bad options.
    """
    _check(args)
    every = checkpoint_period(args.iters)
    last = CHECKPOINTS * every
    cfg = rule_config()
    out = sys.stdout  # the demo's own user-facing report
    out.write(f"malleable demo --io: Jacobi {args.n}x{args.n}, {args.iters} iterations, 1 process; checkpoint "
              f"phase: a checkpoint padded to {args.checkpoint_pad / 1e6:.1f} MB every {every} iterations up to "
              f"{last}, asking for {RIO_CHECKPOINT:g} MB/s; compute phase: {args.iters - last} iterations, asking "
              f"for {RIO_COMPUTE:g} MB/s; rule: T {cfg.tolerance:g} MB/s, window {cfg.k}, cool-down "
              f"{cfg.cooldown:g} s, {cfg.n_min} to {cfg.n_max} data servers, a sample every {INTERVAL:g} s\n")
    out.flush()
    with tempfile.TemporaryDirectory(prefix="malleable-demo-io-") as tmp:
        where = Path(args.keep) if args.keep else Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        report: dict[str, Any] = {"n": args.n, "iters": args.iters, "every": every, "last_checkpoint": last,
                                  "pad": args.checkpoint_pad, "checks": {}}
        errors = _run(args, every, where, report, out)
        same = _final_checks(args, where, report, out) if not errors else False
        report["pass"] = same and not errors
        if args.keep:
            (where / "io.json").write_text(json.dumps(report, indent=1, default=str))
    for e in errors:
        out.write(f"FAIL: {e}\n")
    out.write(("PASS" if report["pass"] else "FAIL") + f": final grid {'equals' if same else 'differs from'} the "
              "serial NumPy reference bit for bit\n")
    out.flush()
    return 0 if report["pass"] else 1


def _final_checks(args: argparse.Namespace, where: Path, report: dict[str, Any], out: Any) -> bool:
    """The grid against the serial reference and the restart against the grid; True if both are bit-exact."""
    import numpy as np

    from malleable.apps.jacobi import reference

    grid = np.load(where / "u.npy")
    same = bool(np.array_equal(grid, reference(args.n, args.iters)))
    restart = bool(np.array_equal(np.load(where / "u-restart.npy"), grid))
    report["checks"].update(grid=same, restart=restart)
    _print(out, f"restart from the last checkpoint (iteration {report['restarted_from']}) to iteration "
                f"{args.iters}: {'the same grid bit for bit' if restart else 'A DIFFERENT GRID'}")
    return same and restart


def _run(args: argparse.Namespace, every: int, where: Path, report: dict[str, Any], out: Any) -> list[str]:
    """Start the file system, run the job under the watcher, print the table, read every checkpoint back and
    restart from the last one; returns what went wrong (nothing: an empty list)."""
    from malleable.adhocfs import connect, start_fs

    errors: list[str] = []
    dep = start_fs("127.0.0.1", ["127.0.0.1"])
    w = IoWatcher(dep.address, rule_config(), pool=["127.0.0.1"], interval=INTERVAL, mode="partial",
                  state=dep.state)
    marks: list[Mark] = []
    stop = threading.Event()
    thread = threading.Thread(target=_watch, args=(w, stop, marks, errors), name="demo-io-watch", daemon=True)
    env = dict(os.environ, MALLEABLE_FS=dep.address)
    job: subprocess.Popen | None = None
    with dep:
        fs = connect(dep.address)
        try:
            fs.declare_rio(RIO_CHECKPOINT, job=JOB)
            argv = _job_argv(args, every, where / "job.json", where / "u.npy", restart=False)
            log.info("job: %s", json.dumps(argv))
            t0 = w.clock()
            marks.append(Mark(t0, "job", 1, w.total()))
            thread.start()
            job = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            deadline = t0 + args.timeout * 4 + 120
            seen = _follow(job, fs, w, every, marks, deadline)
            if job.poll() is None:
                job.kill()
            text = job.communicate()[0]
            marks.append(Mark(w.clock(), "job end", w.active(), w.total()))
            if job.returncode:
                errors.append(f"the job exited with status {job.returncode}\n{text}")
            t1 = w.clock()
            while not errors and w.active() > 1 and w.clock() - t1 < SHRINK_WAIT:
                time.sleep(INTERVAL)  # the rule has not given the server back yet: keep watching
            stop.set()
            thread.join(60)
            fs.declare_rio(0, job=JOB)
            marks.append(Mark(w.clock(), "end", w.active(), w.total()))
            stats = json.loads((where / "job.json").read_text()) if not errors else {}
            ckpts = [(seen.get(c["iteration"], w.clock()), c["bytes"], c["seconds"])
                     for c in stats.get("checkpoints", [])]
            report["checkpoints"] = stats.get("checkpoints", [])
            _table(w, sorted(marks, key=lambda m: m.t), ckpts, t0, report, out)
            report.update({m.what.replace(" ", "_"): m.t - t0 for m in marks if m.what in ("compute", "job end")},
                          state=dep.state)
            if report["servers_over_time"] != [1, 2, 1]:
                errors.append(f"data servers over time {report['servers_over_time']}, not 1, 2, 1")
            if not errors:
                errors += _read_all(dep.address, [every * (i + 1) for i in range(CHECKPOINTS)], report, out)
            if not errors:
                errors += _restart(args, every, where, env, report)
        except (OSError, subprocess.TimeoutExpired) as e:
            errors.append(str(e))
        finally:
            if job is not None and job.poll() is None:
                job.kill()
                job.wait()
            stop.set()
            if thread.is_alive():
                thread.join(60)
            fs.close()
            dep.procs.update({f"added {k}": p for k, p in w.procs.items()})  # the watcher's servers: reaped too
    left = _leftovers(dep.state)
    report["checks"]["leftovers"] = left
    _print(out, f"server processes left: {len(left)}")
    if left:
        errors.append(f"server processes left: {left}")
    return errors


def _follow(job: subprocess.Popen, fs: Any, w: IoWatcher, every: int, marks: list[Mark],
            deadline: float) -> dict[int, float]:
    """Wait for the job; when its last checkpoint appears, declare the compute phase's rate (and mark it).
    Returns when each checkpoint appeared under its final name."""
    from malleable.apps._checkpoint import checkpoint_name

    seen: dict[int, float] = {}
    last = CHECKPOINTS * every
    while job.poll() is None and w.clock() < deadline:
        if last not in seen:
            names = fs.listdir(CKPT_DIR) if fs.exists(CKPT_DIR) else []
            for it in range(every, last + 1, every):
                if checkpoint_name(it) in names:
                    seen.setdefault(it, w.clock())
            if last in seen:
                fs.declare_rio(RIO_COMPUTE, job=JOB)  # the checkpoint phase is over
                marks.append(Mark(w.clock(), "compute", w.active(), w.total()))
        time.sleep(0.05)
    return seen


def _table(w: IoWatcher, marks: list[Mark], ckpts: list[tuple[float, int, float]], t0: float,
           report: dict[str, Any], out: Any) -> None:
    """Print the phases and the rule's changes; keep them and the servers over time in ``report``."""
    samples = [(r["t"] - w.interval / 2, float(r["aio"])) for r in w.decisions if r["aio"] is not None]
    rows = phases(marks, samples, ckpts)
    _print(out, HEAD)
    for p in rows:
        _print(out, p.row())
    for rec in w.decisions:
        if rec["action"] != "keep":
            _print(out, f"  rule at {rec['t'] - t0:.1f} s: {rec['reason']}")
    report["decisions"] = [dict(r, t=r["t"] - t0) for r in w.decisions]
    report["phases"] = [dict(vars(p)) for p in rows]
    report["servers_over_time"] = _runs([int(r["servers"]) for r in w.decisions] + [marks[-1].servers])


def _restart(args: argparse.Namespace, every: int, where: Path, env: dict[str, str],
             report: dict[str, Any]) -> list[str]:
    """Run the job again from its newest checkpoint (``--restart``) to the last iteration."""
    argv = _job_argv(args, every, where / "restart.json", where / "u-restart.npy", restart=True)
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=args.timeout * 4 + 120)
    if proc.returncode:
        return [f"the restart exited with status {proc.returncode}\n{proc.stdout}{proc.stderr}"]
    report["restarted_from"] = json.loads((where / "restart.json").read_text())["start"]
    if report["restarted_from"] != CHECKPOINTS * every:
        return [f"the restart began at iteration {report['restarted_from']}, not at the last checkpoint"]
    return []


def _runs(values: list[int]) -> list[int]:
    """``values`` with repeats collapsed: 1, 1, 2, 2, 1 -> 1, 2, 1."""
    return [v for i, v in enumerate(values) if i == 0 or values[i - 1] != v]


def _print(out: Any, line: str) -> None:
    out.write(line + "\n")
    out.flush()
