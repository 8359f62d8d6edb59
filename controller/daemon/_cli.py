"""The controller's command line, with Slurm's habits: ``controller start|stop|status|add-user|users|remove-user``,
``submit``, ``queue``, ``cancel``, ``nodes``, ``info``, ``history``. Every command fails with one line naming it
and exit code 1, never a traceback (:func:`one_line`)."""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from malleable.errors import ConfigError, MalleableError

from ._cli_history import add_history_parser
from ._cli_submit import add_submit_options
from ._cli_users import add_user_parsers
from ._timefmt import format_duration, parse_limit

__all__ = ["one_line", "register"]

_STATE_HELP = ("controller state file (default $MALLEABLE_CONTROLLER_STATE or "
               "~/.local/state/malleable/controller.sqlite)")
_FILE = {"bash": "_shtab_compgen_files", "zsh": "_files", "tcsh": "f"}  # shtab: complete file names here
START_WAIT = 120.0  # seconds `controller start` waits for the daemon to answer (100,000 queued jobs load in 15-25 s)


def _file_arg(p: Any, *names: str, **kw: Any) -> None:
    """An option whose value is a file name (shell completion offers files)."""
    setattr(p.add_argument(*names, **kw), "complete", _FILE)  # noqa: B010 - shtab reads this attribute


def one_line(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Run a command so that every failure is one line naming it and exit code 1: OS errors (a closed output pipe
    included: ``malleable info 4 | head -3``), zmq and SQLite errors and multi-line messages become one
    :class:`~malleable.errors.MalleableError` line, which the ``malleable`` command prints as ``malleable CMD:
    error: ...``."""

    @functools.wraps(func)
    def run(args: argparse.Namespace) -> int:
        import sqlite3

        import zmq

        action = getattr(args, "ctl_command", None)
        where = f"{action}: " if action else ""
        try:
            code = func(args)
            sys.stdout.flush()                  # a closed pipe shows here, not at exit
        except BrokenPipeError:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())   # nothing more to write: the exit flush must not fail too
            os.close(devnull)
            raise MalleableError(f"{where}the output was closed before everything was written (broken pipe)") \
                from None
        except MalleableError as e:
            from ._cli_views import terminal_safe

            text = terminal_safe(" ".join(str(e).split()))       # the daemon's words may quote a job's name
            if text == str(e):
                raise
            raise MalleableError(text) from None
        except OSError as e:
            raise MalleableError(f"{where}{' '.join(str(e).split())}") from None
        except zmq.ZMQError as e:
            raise MalleableError(f"{where}network error: {' '.join(str(e).split())}") from None
        except sqlite3.Error as e:
            raise MalleableError(f"{where}state file: {' '.join(str(e).split())}") from None
        return code

    return run


def _client_opts(p: argparse.ArgumentParser) -> None:
    p.add_argument("--controller", metavar="ADDR", help="daemon address tcp://HOST:PORT (default: from --state)")
    _file_arg(p, "--state", help=_STATE_HELP)
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
    _file_arg(pool, "--hostfile", help="file with one host (or host:slots) per line")
    pool.add_argument("--slurm", action="store_true", help="the hosts of the current Slurm allocation")
    pool.add_argument("--local", type=int, metavar="N", help="N host slots on this machine")
    p.add_argument("--launcher-exec", help="ssh stand-in used by mpiexec to reach the hosts "
                                           "(default $MALLEABLE_LAUNCHER_EXEC, else ssh)")
    p.add_argument("--slots", type=int, default=1, help="processes per host (default 1)")
    p.add_argument("--policy", default="easy", help="scheduling policy (default easy; see 'malleable simulate -h')")
    p.add_argument("--param", action="append", default=[], metavar="K=V", help="policy parameter (repeatable)")
    _file_arg(p, "--state", help=_STATE_HELP + "; its folder is created if missing")
    p.add_argument("--bind", help="address to listen on (default 127.0.0.1; the bridge for namespace hosts)")
    p.add_argument("--port", type=int, help="TCP port (default: the previous run's, else a free one)")
    p.add_argument("--tick", type=float, default=1.0, help="seconds between periodic scheduling passes")
    p.add_argument("--ack-timeout", type=float, default=120.0,
                   help="seconds a job may take to acknowledge a resize before it is marked unresponsive")
    p.add_argument("--default-time", default="60",
                   help="time limit of jobs submitted without --time (default 60 min; UNLIMITED: none)")
    p.add_argument("--kill-wait", type=float, default=30.0, metavar="SECONDS",
                   help="seconds between the SIGTERM that stops a job (cancel, time limit) and the SIGKILL of what "
                        "is left of it (Slurm's KillWait; default 30)")
    p.add_argument("--host-check", type=float, default=5.0, metavar="SECONDS",
                   help="seconds between checks that every host answers; a host that does not is marked down, its "
                        "jobs are re-queued, and it returns once it answers and is clean (0: never; default 5)")
    p.add_argument("--bb-capacity", default="0", metavar="SIZE",
                   help="burst buffer per storage host, e.g. 10G: what its data servers may hold; jobs ask for a "
                        "share with 'submit --bb' (default 0: none)")
    p.add_argument("--storage-hosts", metavar="H1,H2", help="hosts that may run data servers (default: every host)")
    p.add_argument("--fs-per-host", type=int, default=4, metavar="N",
                   help="data servers one job's file system may run on a storage host (1-64, default 4): "
                        "'submit --fs-servers/--fs-max' beyond N x the storage hosts are refused")
    p.add_argument("--bb-mount-root", metavar="DIR",
                   help="mount each --bb job's file system at DIR/<job id>/fs on every host of the job before it "
                        "starts ($MALLEABLE_FS_MOUNT; its files shown as the job's user's, other users kept out); "
                        "DIR must be the controller user's and not writable by others (default: no mounts)")
    p.add_argument("--foreground", action="store_true", help="run in this process (logs to stderr)")
    p.set_defaults(func=one_line(_start))

    p = csub.add_parser("stop", help="stop the daemon (running jobs go on and are re-attached at the next start)")
    _client_opts(p)
    p.add_argument("--cancel-jobs", action="store_true", help="cancel every job first and wait for them")
    p.set_defaults(func=one_line(_stop))

    p = csub.add_parser("status", help="is the daemon running, with which hosts and policy")
    _client_opts(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=one_line(_status))

    add_user_parsers(csub, _client_opts, one_line, _file_arg)

    p = sub.add_parser("submit", help="submit a rigid or malleable job (like sbatch)",
                       argument_default=argparse.SUPPRESS,
                       description="Queue a job. Rigid: -N nodes (or -n tasks). Malleable: --min/--max (and --pref): "
                                   "the job starts between min and max nodes and may be resized while it runs. "
                                   "Options may also be given in '#MALLEABLE' lines at the top of the script, as "
                                   "sbatch reads '#SBATCH' (the command line wins).",
                       epilog="examples: malleable submit --min 1 --max 4 --time 10:00 -o jacobi-%%j.out -- "
                              "python -m malleable.apps.jacobi --n 512 --iters 2000;  malleable submit -n 4 "
                              "--wrap 'python prog.py';  malleable submit job.sh")
    add_submit_options(p)
    _client_opts(p)
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="SCRIPT [ARGS] | -- CMD ...",
                   help="the script (its #MALLEABLE lines are read) or the command after --")
    p.set_defaults(func=one_line(_submit))

    p = sub.add_parser("queue", help="pending and running jobs (like squeue)")
    _client_opts(p)
    p.add_argument("--json", action="store_true", help="a JSON document with a schema number (see the docs)")
    p.set_defaults(func=one_line(_queue))

    p = sub.add_parser("cancel", help="cancel jobs (like scancel)")
    _client_opts(p)
    p.add_argument("ids", nargs="+", type=int, metavar="ID")
    p.set_defaults(func=one_line(_cancel))

    for verb, text in (("suspend", "pause running malleable jobs at their next safe point, keeping their hosts "
                                    "(like scontrol suspend)"),
                       ("resume", "let suspended jobs go on (like scontrol resume)")):
        p = sub.add_parser(verb, help=text, description=text[0].upper() + text[1:] + ". The job's processes wait "
                           "without using the CPU; its time limit keeps running.")
        _client_opts(p)
        p.add_argument("ids", nargs="+", type=int, metavar="ID")
        p.set_defaults(func=one_line(_suspend), resume=verb == "resume")

    p = sub.add_parser("nodes", help="hosts and who holds them, or whose file system a host is lent to "
                                     "(like sinfo -N)")
    _client_opts(p)
    p.add_argument("--json", action="store_true", help="a JSON document with a schema number")
    p.set_defaults(func=one_line(_nodes))

    p = sub.add_parser("info", help="one job: record, progress, size history with hosts, events "
                                    "(like scontrol show job)")
    _client_opts(p)
    p.add_argument("id", type=int, metavar="ID")
    p.add_argument("--events", type=int, default=5, metavar="N", help="show the last N events (default 5; 0: none)")
    p.add_argument("--json", action="store_true", help="a JSON document with a schema number (every event)")
    p.set_defaults(func=one_line(_info))

    add_history_parser(sub, _client_opts, one_line)


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
    from malleable.controller.sched._registry import make_policy

    from ._config import DaemonConfig
    from ._core import CoreConfig
    from ._paths import default_state

    if args.slots < 1:
        raise ConfigError(f"--slots must be >= 1, got {args.slots}")
    if not args.tick > 0 or not args.ack_timeout > 0:
        raise ConfigError("--tick and --ack-timeout must be > 0")
    if not 0 <= args.kill_wait <= 86400:
        raise ConfigError(f"--kill-wait must be between 0 and 86400 seconds, got {args.kill_wait:g}")
    if args.port is not None and not 0 <= args.port <= 65535:
        raise ConfigError(f"--port must be between 0 (a free one) and 65535, got {args.port}")
    if not 0 <= args.host_check <= 86400:
        raise ConfigError(f"--host-check must be between 0 and 86400 seconds, got {args.host_check:g}")
    params = _params(args.param)
    make_policy(args.policy, params)  # fail here, before anything starts
    pool = _pool(args)
    bb, storage = _storage_opts(args, pool.nodes)
    core = CoreConfig(slots=args.slots, ack_timeout=args.ack_timeout, default_time=parse_limit(args.default_time),
                      kill_wait=args.kill_wait, bb_capacity=bb, storage_hosts=storage, fs_per_host=args.fs_per_host)
    state = _state_path(args.state or default_state())
    root = ""
    if args.bb_mount_root is not None:
        from ._jobmount import check_root

        root = check_root(args.bb_mount_root)
    return DaemonConfig(state, pool, args.policy, params, args.bind, args.port, args.tick, core,
                        host_check=args.host_check, mount_root=root)


def _storage_opts(args: argparse.Namespace, nodes: tuple[str, ...]) -> tuple[float, tuple[str, ...]]:
    """``--bb-capacity`` in bytes and the ``--storage-hosts`` (which must be hosts of the pool)."""
    from malleable.launch import expand_hostlist

    bb = _size(args.bb_capacity, "--bb-capacity")
    if not 1 <= args.fs_per_host <= 64:
        raise ConfigError(f"--fs-per-host must be between 1 and 64, got {args.fs_per_host}")
    storage = tuple(expand_hostlist(args.storage_hosts)) if args.storage_hosts else ()
    bad = [h for h in storage if h not in nodes]
    if bad:
        raise ConfigError(f"--storage-hosts: {', '.join(bad)} not in the pool ({', '.join(nodes)})")
    return float(bb), storage


def _size(text: str, option: str) -> int:
    """A size such as 512M or 10G (adhocfs's own parser), as one line naming the option when it is not one."""
    from malleable.adhocfs._cli import parse_size

    try:
        return parse_size(text)
    except argparse.ArgumentTypeError as e:
        raise ConfigError(f"{option}: {e}") from None


def _state_path(path: str) -> str:
    """The absolute state file for ``controller start``: its folder is created if missing; a folder, a link, a
    file that is not a regular one or not a controller state (empty, truncated), or a place that cannot be written
    is refused with one line (:func:`~._statefile.check_state`)."""
    from ._statefile import check_state

    p = Path(os.path.abspath(os.path.expanduser(path)))
    if p.is_dir():
        raise ConfigError(f"--state {path} is a directory: give a file in it, e.g. {p / 'controller.sqlite'}")
    up = next((q for q in p.parents if q.exists()), None)
    if up is not None and not up.is_dir():
        raise ConfigError(f"--state {path}: {up} is a file, not a folder")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot create the state folder {p.parent}: {e.strerror}") from None
    if not os.access(p.parent, os.W_OK | os.X_OK):
        raise ConfigError(f"cannot write in the state folder {p.parent}")
    check_state(str(p))
    return str(p)


def _start(args: argparse.Namespace) -> int:
    from ._paths import addr_file
    from ._statefile import lock_holder

    cfg = _daemon_config(args)
    pid = lock_holder(cfg.state)
    if pid is not None:
        raise _busy(cfg.state, pid)
    if args.foreground:
        return _run_foreground(cfg)
    argv = [sys.executable, "-m", "malleable", "-" + "v" * max(1, args.verbose), *_start_argv(args, cfg.state),
            "--foreground"]
    log_path = cfg.state + ".log"
    af = addr_file(cfg.state)        # never removed here: it may be a living daemon's (it replaces it itself)
    with os.fdopen(os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600), "ab") as log_f:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log_f, stderr=log_f, start_new_session=True,
                                close_fds=True)
    t0 = time.monotonic()
    deadline, said = t0 + START_WAIT, t0
    while time.monotonic() < deadline:
        if time.monotonic() - said >= 10:   # a large state takes a while to load: say so
            said = time.monotonic()
            print(f"waiting for the controller (pid {proc.pid}) to load its state: {said - t0:.0f} s", file=sys.stderr)
        if proc.poll() is not None:
            pid = lock_holder(cfg.state)
            if pid is not None:         # another start won the race
                raise _busy(cfg.state, pid)
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
                _warn_down(cfg.state)
                return 0
        time.sleep(0.05)
    proc.kill()
    proc.wait(5)
    raise ConfigError(f"the controller did not come up within {START_WAIT:.0f} s; see {log_path}")


def _run_foreground(cfg: Any) -> int:
    from ._daemon import run_foreground
    from ._statefile import StateBusy

    try:
        return run_foreground(cfg)
    except StateBusy as e:
        raise _busy(cfg.state, e.pid) from None


def _busy(state: str, pid: int) -> ConfigError:
    """The one line of a start refused because a living daemon holds the state (with its address if known)."""
    import contextlib

    from ._client import Client

    where = ""
    with contextlib.suppress(MalleableError, OSError):
        with Client(state=state, timeout=1.0) as c:
            where = f" at {c.status()['address']}"
    who = f"pid {pid}" if pid else "another process"
    return ConfigError(f"a controller already runs for {state}{where} ({who} holds the lock {state}.lock); "
                       "nothing was changed")


def _warn_down(state: str) -> None:
    """One line per host the new daemon found unreachable (it checks them again every few seconds)."""
    from ._client import Client
    from ._protocol import Nodes

    try:
        with Client(state=state, timeout=5.0) as c:
            rows = c.rows(Nodes())
    except MalleableError:
        return
    for r in rows:
        if r["state"] == "down":
            print(f"malleable controller start: warning: host {r['name']} is down: {r['reason']} (checked again "
                  "every 5 s)", file=sys.stderr)


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
    for opt in ("launcher_exec", "bind", "port", "bb_capacity", "storage_hosts", "fs_per_host", "bb_mount_root"):
        v = getattr(args, opt)
        if v is not None:
            out += ["--" + opt.replace("_", "-"), str(v)]
    out += ["--slots", str(args.slots), "--policy", args.policy, "--state", state, "--tick", str(args.tick),
            "--ack-timeout", str(args.ack_timeout), "--default-time", args.default_time,
            "--kill-wait", str(args.kill_wait), "--host-check", str(args.host_check)]
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


# ------------------------------------------------------------------------------------------------ jobs
def _submit(args: argparse.Namespace) -> int:
    from ._cli_submit import resolve

    for k, v in (("controller", None), ("state", None), ("timeout", 10.0)):
        if not hasattr(args, k):
            setattr(args, k, v)
    def slots() -> int:
        with _client(args) as c:
            return int(c.status()["slots"])

    request, parsable = resolve(vars(args), slots)      # bad options fail here, before any daemon is asked
    with _client(args) as c:
        jid = c.submit(**request)
    print(jid if parsable else f"Submitted batch job {jid}")   # sbatch's words: scripts parse them
    from ._access import secret_looking

    kept = sorted(k for k, v in os.environ.items() if secret_looking(k, v) and not k.startswith("MALLEABLE_"))
    if kept:
        print(f"malleable submit: note: not passed to the job (secret-looking names are never stored): "
              f"{', '.join(kept)[:200]}; let the job read them from a file", file=sys.stderr)
    return 0


def _print_json(doc: Any) -> None:
    print(json.dumps(doc, indent=2))


def _queue(args: argparse.Namespace) -> int:
    from ._cli_views import document, job_json, queue_lines
    from ._protocol import Queue

    with _client(args) as c:
        rows = c.rows(Queue())
    now = time.time()
    if args.json:
        _print_json(document("jobs", [job_json(j, now) for j in rows]))
    else:
        print("\n".join(queue_lines(rows, now)))
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


def _suspend(args: argparse.Namespace) -> int:
    from ._protocol import Suspend

    bad = 0
    with _client(args) as c:
        for jid in args.ids:
            try:
                c.call(Suspend(jid, args.resume))
            except MalleableError as e:
                print(f"malleable {'resume' if args.resume else 'suspend'}: error: job {jid}: {e}", file=sys.stderr)
                bad += 1
    return 1 if bad else 0


def _nodes(args: argparse.Namespace) -> int:
    from ._cli_views import document, node_lines
    from ._protocol import Nodes

    with _client(args) as c:
        rows = c.rows(Nodes())
    if args.json:
        _print_json(document("nodes", [{k: r[k] for k in ("name", "state", "job", "drain")} for r in rows]))
    else:
        print("\n".join(node_lines(rows)))
    return 0


def _info(args: argparse.Namespace) -> int:
    from ._cli_views import document, info_lines, job_json

    if args.events < 0:
        raise ConfigError(f"--events must be >= 0, got {args.events}")
    with _client(args) as c:
        inf = c.info(args.id)
    now = time.time()
    if args.json:
        _print_json(document("", {"job": job_json(inf.job, now), "steps": inf.steps, "events": inf.events}))
    else:
        print("\n".join(info_lines(inf.job, inf.steps, inf.events, args.events, now)))
    return 0


def _status(args: argparse.Namespace) -> int:
    with _client(args) as c:
        st = c.status()
    if args.json:
        from ._cli_views import document

        _print_json(document("", st))
        return 0
    jobs = ", ".join(f"{n} {s.lower()}" for s, n in sorted(st["jobs"].items())) or "no jobs"
    print(f"controller {st['controller_id']} at {st['address']} (pid {st['pid']}), up {format_duration(st['uptime'])}")
    print(f"pool: {st['pool']}, {st['hosts']} hosts ({st['free']} free), {st['slots']} slot(s) per host, "
          f"MPI {st.get('mpi') or 'none found'}")
    print(f"policy: {st['policy']}, {st['passes']} passes; {jobs}; state {st['state']}")
    if st.get("bb_total"):
        from malleable.launch import compress_hostlist

        from ._protocol import format_size

        print(f"burst buffer: {format_size(st['bb_total'])} on {compress_hostlist(st['storage_hosts'])}, "
              f"{format_size(st['bb_free'])} free")
    return 0
