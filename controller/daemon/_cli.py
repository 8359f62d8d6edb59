"""The controller's command line, with Slurm's habits: ``controller start|stop|status``, ``submit``, ``queue``,
``cancel``, ``nodes``, ``info``, ``history``."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from malleable.errors import ConfigError, MalleableError

from ._timefmt import format_duration, parse_time

__all__ = ["register"]

_STATE_HELP = ("controller state file (default $MALLEABLE_CONTROLLER_STATE or "
               "~/.local/state/malleable/controller.sqlite)")


def _client_opts(p: argparse.ArgumentParser) -> None:
    p.add_argument("--controller", metavar="ADDR", help="daemon address tcp://HOST:PORT (default: from --state)")
    p.add_argument("--state", help=_STATE_HELP)
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the daemon (default 10)")


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``controller``, ``submit``, ``queue``, ``cancel``, ``nodes``, ``info`` and ``history``."""
    ctl = sub.add_parser("controller", help="start, stop or inspect the controller daemon",
                         description="The controller daemon schedules rigid and malleable MPI jobs on a host pool "
                                     "and resizes malleable jobs while they run.")
    csub = ctl.add_subparsers(dest="ctl_command", metavar="ACTION")
    ctl.set_defaults(func=lambda args: (ctl.print_help(sys.stderr), 2)[1])

    p = csub.add_parser("start", help="start the daemon", description="Start the controller daemon in the "
                        "background (or in the foreground with --foreground) and print its address.",
                        epilog="example: malleable controller start --local 4 --policy malleable-fill")
    pool = p.add_mutually_exclusive_group(required=True)
    pool.add_argument("--hosts", help="hosts, comma-separated, Slurm syntax allowed (node[1-4])")
    pool.add_argument("--hostfile", help="file with one host (or host:slots) per line")
    pool.add_argument("--slurm", action="store_true", help="the hosts of the current Slurm allocation")
    pool.add_argument("--local", type=int, metavar="N", help="N host slots on this machine")
    p.add_argument("--launcher-exec", help="ssh stand-in used by mpiexec to reach the hosts "
                                           "(default $MALLEABLE_LAUNCHER_EXEC, else ssh)")
    p.add_argument("--slots", type=int, default=1, help="processes per host (default 1)")
    p.add_argument("--policy", default="easy", help="scheduling policy (default easy; see 'malleable simulate -h')")
    p.add_argument("--param", action="append", default=[], metavar="K=V", help="policy parameter (repeatable)")
    p.add_argument("--state", help=_STATE_HELP)
    p.add_argument("--bind", help="address to listen on (default 127.0.0.1; the bridge for namespace hosts)")
    p.add_argument("--port", type=int, help="TCP port (default: the previous run's, else a free one)")
    p.add_argument("--tick", type=float, default=1.0, help="seconds between periodic scheduling passes")
    p.add_argument("--ack-timeout", type=float, default=120.0,
                   help="seconds a job may take to acknowledge a resize before it is marked unresponsive")
    p.add_argument("--default-time", default="60", help="time limit of jobs submitted without --time (default 60 min)")
    p.add_argument("--foreground", action="store_true", help="run in this process (logs to stderr)")
    p.set_defaults(func=_start)

    p = csub.add_parser("stop", help="stop the daemon (running jobs go on and are re-attached at the next start)")
    _client_opts(p)
    p.add_argument("--cancel-jobs", action="store_true", help="cancel every job first and wait for them")
    p.set_defaults(func=_stop)

    p = csub.add_parser("status", help="is the daemon running, with which hosts and policy")
    _client_opts(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_status)

    p = sub.add_parser("submit", help="submit a rigid or malleable job (like sbatch)",
                       description="Queue CMD. Rigid: -N nodes. Malleable: --min/--max (and --pref): the job "
                                   "starts between min and max nodes and may be resized while it runs.",
                       epilog="example: malleable submit --min 1 --max 4 --time 10:00 -o jacobi-%%j.out -- "
                              "python -m malleable.apps.jacobi --n 512 --iters 2000")
    p.add_argument("-N", "--nodes", type=int, help="rigid job on exactly this many nodes")
    p.add_argument("--min", type=int, help="malleable: fewest nodes")
    p.add_argument("--max", type=int, help="malleable: most nodes")
    p.add_argument("--pref", type=int, help="malleable: preferred start size (default min)")
    p.add_argument("-t", "--time", help="time limit: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S")
    p.add_argument("-o", "--output", default="", help="stdout file (%%j = job id; default malleable-%%j.out)")
    p.add_argument("-e", "--error", default="", help="stderr file (default: with stdout)")
    p.add_argument("-J", "--job-name", default="", help="job name")
    p.add_argument("--parsable", action="store_true", help="print only the job id")
    _client_opts(p)
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="the command (after --)")
    p.set_defaults(func=_submit)

    p = sub.add_parser("queue", help="pending and running jobs (like squeue)")
    _client_opts(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_queue)

    p = sub.add_parser("cancel", help="cancel jobs (like scancel)")
    _client_opts(p)
    p.add_argument("ids", nargs="+", type=int, metavar="ID")
    p.set_defaults(func=_cancel)

    p = sub.add_parser("nodes", help="hosts and who holds them (like sinfo -N)")
    _client_opts(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_nodes)

    p = sub.add_parser("info", help="one job: record, size history with hosts, events (like scontrol show job)")
    _client_opts(p)
    p.add_argument("id", type=int, metavar="ID")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_info)

    p = sub.add_parser("history", help="all jobs with their end state and exit code (like sacct)")
    _client_opts(p)
    p.add_argument("--limit", type=int, default=0, help="only the newest N jobs")
    p.add_argument("--json", action="store_true")
    p.add_argument("--export", metavar="FILE",
                   help="write the completed jobs as a workload (JSON lines) that 'malleable simulate --workload "
                        "FILE --policy P' replays; reads the state file, the daemon need not run")
    p.set_defaults(func=_history)


def _export(args: argparse.Namespace) -> int:
    from ._export import export_workload
    from ._paths import default_state
    from ._store import Store

    state = args.state or default_state()
    if not os.path.exists(state):
        raise ConfigError(f"no controller state file at {state} (give --state)")
    store = Store(state, readonly=True)
    try:
        n = export_workload(store, args.export, len([h for h in store.load_hosts()]) or 1)
    finally:
        store.close()
    print(f"wrote {n} job(s) to {args.export}")                   # the CLI's own output
    return 0


# ------------------------------------------------------------------------------------------------ daemon
def _pool(args: argparse.Namespace) -> Any:
    from ._hostpool import HostPool

    if args.local is not None:
        return HostPool.local(args.local)
    if args.slurm:
        return HostPool.from_slurm()
    if args.hostfile:
        return HostPool.from_hostfile(args.hostfile, args.launcher_exec)
    return HostPool.from_hosts([args.hosts], args.launcher_exec)


def _params(items: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for it in items:
        k, sep, v = it.partition("=")
        if not sep or not k:
            raise ConfigError(f"--param wants K=V, got {it!r}")
        try:
            out[k] = json.loads(v)
        except ValueError:
            out[k] = v
    return out


def _daemon_config(args: argparse.Namespace) -> Any:
    from ._core import CoreConfig
    from ._daemon import DaemonConfig, make_policy
    from ._paths import default_state

    if args.slots < 1:
        raise ConfigError(f"--slots must be >= 1, got {args.slots}")
    if not args.tick > 0 or not args.ack_timeout > 0:
        raise ConfigError("--tick and --ack-timeout must be > 0")
    params = _params(args.param)
    make_policy(args.policy, params)  # fail here, before anything starts
    core = CoreConfig(slots=args.slots, ack_timeout=args.ack_timeout, default_time=parse_time(args.default_time))
    state = os.path.abspath(args.state or default_state())
    return DaemonConfig(state, _pool(args), args.policy, params, args.bind, args.port, args.tick, core)


def _start(args: argparse.Namespace) -> int:
    from ._client import Client, ControllerUnavailable
    from ._daemon import run_foreground
    from ._paths import addr_file

    cfg = _daemon_config(args)
    try:
        with Client(state=cfg.state, timeout=1.0) as c:
            st: dict[str, Any] | None = c.status()
    except (ControllerUnavailable, MalleableError):
        st = None
    if st is not None:
        raise ConfigError(f"a controller already runs for {cfg.state} at {st['address']} (pid {st['pid']})")
    if args.foreground:
        return run_foreground(cfg)
    argv = [sys.executable, "-m", "malleable", "-" + "v" * max(1, args.verbose), *_start_argv(args, cfg.state),
            "--foreground"]
    log_path = cfg.state + ".log"
    af = addr_file(cfg.state)
    af.unlink(missing_ok=True)
    with open(log_path, "ab") as log_f:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log_f, stderr=log_f, start_new_session=True,
                                close_fds=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = Path(log_path).read_text(errors="replace")[-2000:]
            raise ConfigError(f"the controller exited at start (code {proc.returncode}); log {log_path}:\n{tail}")
        if af.exists():
            try:
                info = json.loads(af.read_text())
            except ValueError:
                info = {}
            if info.get("pid") == proc.pid:
                print(f"controller started: {info['address']} (pid {proc.pid}, state {cfg.state}, log {log_path})")
                proc.returncode = 0  # the daemon outlives this command
                return 0
        time.sleep(0.05)
    proc.kill()
    proc.wait(5)
    raise ConfigError(f"the controller did not come up within 30 s; see {log_path}")


def _start_argv(args: argparse.Namespace, state: str) -> list[str]:
    out = ["controller", "start"]
    if args.local is not None:
        out += ["--local", str(args.local)]
    elif args.slurm:
        out += ["--slurm"]
    elif args.hostfile:
        out += ["--hostfile", os.path.abspath(args.hostfile)]
    else:
        out += ["--hosts", args.hosts]
    for opt in ("launcher_exec", "bind", "port"):
        v = getattr(args, opt)
        if v is not None:
            out += ["--" + opt.replace("_", "-"), str(v)]
    out += ["--slots", str(args.slots), "--policy", args.policy, "--state", state, "--tick", str(args.tick),
            "--ack-timeout", str(args.ack_timeout), "--default-time", args.default_time]
    for p in args.param:
        out += ["--param", p]
    return out


def _client(args: argparse.Namespace) -> Any:
    from ._client import Client

    return Client(args.controller, args.state, timeout=args.timeout)


def _stop(args: argparse.Namespace) -> int:
    import psutil

    from ._protocol import Shutdown

    with _client(args) as c:
        st = c.status()
        c.call(Shutdown(bool(args.cancel_jobs)))
    try:
        psutil.Process(st["pid"]).wait(max(args.timeout, 15.0 if args.cancel_jobs else 5.0))
    except psutil.NoSuchProcess:
        pass
    except psutil.TimeoutExpired:
        raise ConfigError(f"the controller (pid {st['pid']}) did not exit in time") from None
    print(f"controller stopped ({st['address']})")
    return 0


def _status(args: argparse.Namespace) -> int:
    with _client(args) as c:
        st = c.status()
    if args.json:
        print(json.dumps(st, indent=2))
        return 0
    jobs = ", ".join(f"{n} {s.lower()}" for s, n in sorted(st["jobs"].items())) or "no jobs"
    print(f"controller {st['controller_id']} at {st['address']} (pid {st['pid']}), up {format_duration(st['uptime'])}")
    print(f"pool: {st['pool']}, {st['hosts']} hosts ({st['free']} free), {st['slots']} slot(s) per host")
    print(f"policy: {st['policy']}, {st['passes']} passes; {jobs}; state {st['state']}")
    return 0


# ------------------------------------------------------------------------------------------------ jobs
def _submit(args: argparse.Namespace) -> int:
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise ConfigError("no command: malleable submit [options] -- CMD ...")
    malleable = args.min is not None or args.max is not None
    if malleable and args.nodes is not None:
        raise ConfigError("give either -N (rigid) or --min/--max (malleable), not both")
    if malleable:
        if args.min is None or args.max is None:
            raise ConfigError("a malleable job needs both --min and --max")
        lo, hi = args.min, args.max
        pref = args.pref if args.pref is not None else lo
        if lo < 1 or not lo <= pref <= hi:
            raise ConfigError(f"need 1 <= --min <= --pref <= --max, got {lo}, {pref}, {hi}")
    else:
        if args.pref is not None:
            raise ConfigError("--pref is for malleable jobs (with --min/--max)")
        pref = lo = hi = args.nodes if args.nodes is not None else 1
        if pref < 1:
            raise ConfigError(f"-N must be >= 1, got {pref}")
    limit = parse_time(args.time) if args.time else 0.0
    out = os.path.abspath(args.output) if args.output else ""
    err = os.path.abspath(args.error) if args.error else ""
    with _client(args) as c:
        jid = c.submit(cmd, pref, lo, hi, malleable, limit, args.job_name, out, err)
    print(jid if args.parsable else f"Submitted job {jid}")
    return 0


_ST = {"PENDING": "PD", "STARTING": "CF", "RUNNING": "R", "COMPLETED": "CD", "FAILED": "F", "CANCELLED": "CA",
       "TIMEOUT": "TO"}


def _short(j: dict[str, Any]) -> str:
    st = _ST.get(j["state"], j["state"])
    if j["state"] == "RUNNING" and j.get("order"):
        st = "RS"  # resizing
    return st


def _nodelist(j: dict[str, Any]) -> str:
    from malleable.launch import compress_hostlist

    if j["state"] == "PENDING":
        return f"({j.get('reason') or 'Priority'})"
    hosts = compress_hostlist(j["hosts"]) if j["hosts"] else ""
    if j.get("order"):
        o = j["order"]
        hosts += f" -> {len(o['target'])}"
    if j.get("unresponsive"):
        hosts += " (unresponsive)"
    return hosts


def _size(j: dict[str, Any]) -> str:
    if j["malleable"]:
        return f"{j['size'] or '-'}[{j['min_nodes']}-{j['max_nodes']}]"
    return str(j["nodes"])


def _queue(args: argparse.Namespace) -> int:
    from ._protocol import Queue

    with _client(args) as c:
        rows = c.rows(Queue())
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    now = time.time()
    print(f"{'JOBID':>6} {'NAME':<14} {'KIND':<9} {'ST':<3} {'TIME':>9} {'NODES':>9}  NODELIST(REASON)")
    for j in rows:
        t = format_duration(now - j["start"]) if j["start"] else "0:00"
        kind = "malleable" if j["malleable"] else "rigid"
        print(f"{j['id']:>6} {j['name'][:14]:<14} {kind:<9} {_short(j):<3} {t:>9} {_size(j):>9}  {_nodelist(j)}")
    return 0


def _cancel(args: argparse.Namespace) -> int:
    from ._protocol import Cancel

    bad = 0
    with _client(args) as c:
        for jid in args.ids:
            try:
                c.call(Cancel(jid))
            except MalleableError as e:
                print(f"malleable cancel: error: job {jid}: {e}", file=sys.stderr)
                bad += 1
    return 1 if bad else 0


def _nodes(args: argparse.Namespace) -> int:
    from ._protocol import Nodes

    with _client(args) as c:
        rows = c.rows(Nodes())
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'NODE':<12} {'STATE':<12} JOB")
    for r in rows:
        job = "" if r["job"] is None else str(r["job"])
        if r["drain"] is not None:
            job += f" (checking: job {r['drain']})"
        print(f"{r['name']:<12} {r['state']:<12} {job.strip()}")
    return 0


def _fmt_t(t: float | None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t)) if t else "-"


def _info(args: argparse.Namespace) -> int:
    with _client(args) as c:
        inf = c.info(args.id)
    if args.json:
        print(json.dumps({"job": inf.job, "steps": inf.steps, "events": inf.events}, indent=2))
        return 0
    j = inf.job
    kind = f"malleable {j['min_nodes']}..{j['max_nodes']} (pref {j['nodes']})" if j["malleable"] else \
        f"rigid {j['nodes']}"
    print(f"JobId={j['id']} Name={j['name']} State={j['state']} Kind={kind} ExitCode={j['exit_code']}")
    print(f"  Submit={_fmt_t(j['submit'])} Start={_fmt_t(j['start'])} End={_fmt_t(j['end'])} "
          f"TimeLimit={format_duration(j['time_limit'])} Reason={j['reason'] or '-'}")
    print(f"  Command={' '.join(j['cmd'])}")
    print(f"  WorkDir={j['cwd']} StdOut={j['out'] or '-'}")
    if j.get("progress"):
        print(f"  Progress={json.dumps(j['progress'])}")
    print("  size history:")
    t0 = inf.steps[0]["t"] if inf.steps else 0.0
    for s in inf.steps:
        extra = ""
        if s["decided"] is not None:
            extra = f"  (decided +{s['decided'] - t0:.2f} s, took {s['t'] - s['decided']:.2f} s"
            extra += f", runtime {s['seconds']:.3f} s)" if s["seconds"] is not None else ")"
        print(f"    +{s['t'] - t0:8.2f} s  {s['kind']:<7} {s['size']:>3} nodes  {','.join(s['hosts'])}{extra}")
    return 0


def _history(args: argparse.Namespace) -> int:
    from ._protocol import History

    if args.export:
        return _export(args)
    with _client(args) as c:
        rows = c.rows(History(max(0, args.limit)))
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'JOBID':>6} {'NAME':<14} {'KIND':<9} {'STATE':<10} {'EXIT':>4} {'ELAPSED':>9} {'NODES':>9}  START")
    for j in rows:
        el = format_duration((j["end"] or time.time()) - j["start"]) if j["start"] else "-"
        kind = "malleable" if j["malleable"] else "rigid"
        code = "-" if j["exit_code"] is None else str(j["exit_code"])
        print(f"{j['id']:>6} {j['name'][:14]:<14} {kind:<9} {j['state']:<10} {code:>4} {el:>9} {_size(j):>9}  "
              f"{_fmt_t(j['start'])}")
    return 0
