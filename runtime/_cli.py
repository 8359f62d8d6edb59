"""``malleable run``: start a malleable job as one anchor process that spawns the rest per host."""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import socket
import subprocess
import sys
import tempfile

from malleable.errors import AdaptError, ConfigError
from malleable.launch import find_mpiexec, mpiexec_argv, read_hostfile
from malleable.runtime._bounds import check_expand, check_plan, host_resolves, initial_layout, slots_from_env
from malleable.runtime._layout import Group, GroupLayout, plan_expand
from malleable.runtime._mpi import for_mpiexec
from malleable.runtime._plan import parse_plan, validate_plan
from malleable.runtime._progscan import never_imports_malleable
from malleable.runtime._sources import choose_hosts

__all__ = ["build_run_argv", "register"]

log = logging.getLogger(__name__)

def register(sub: argparse._SubParsersAction) -> None:
    """Add ``malleable run``."""
    p = sub.add_parser(
        "run",
        help="start a malleable MPI job (one anchor process + spawned processes per host)",
        description=(
            "Start CMD as a malleable job of N processes: mpiexec starts one anchor process on the first "
            "host, and the anchor's init_adapt() spawns the other N-1 round robin over the hosts, one spawn "
            "group per host, so that every host but the anchor's can later be freed by a shrink. "
            "Plain 'mpiexec -n N python app.py' also works, but then all N processes are the job's base."
        ),
        epilog=(
            "example: malleable run -n 2 --plan '[{\"at_probe\": 5, \"procs\": 1}]' -- "
            "python -m malleable.apps.jacobi --n 256 --iters 100"
        ),
    )
    p.add_argument("-n", "-np", "--procs", type=int, required=True, help="initial number of processes")
    p.add_argument("--rigid", action="store_true",
                   help="start all N processes at once, as 'mpiexec -n N' does (for programs that do not call "
                        "init_adapt; they cannot be resized)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--hosts", help="comma-separated hosts; the anchor runs on the first")
    where.add_argument("--hostfile", help="file with one host (or host:slots) per line")
    p.add_argument("--plan",
                   help="JSON adaptation plan (sets MALLEABLE_PLAN), e.g. '[{\"at_probe\": 3, \"procs\": 4}]'")
    p.add_argument("--timeout", type=float,
                   help="seconds an adaptation step may wait (MALLEABLE_ADAPT_TIMEOUT, default 60)")
    p.add_argument("--launcher-exec", help="ssh stand-in hydra uses to reach other hosts (MALLEABLE_LAUNCHER_EXEC)")
    p.add_argument("--max-procs-per-host", type=int, metavar="N",
                   help="processes a host may run (MALLEABLE_MAX_PROCS_PER_HOST); default: its hostfile slots, "
                        "else its cores. Plans and decisions asking for more are refused before spawning")
    p.add_argument("--no-auto-cleanup", action="store_true",
                   help="a spawned process that dies (even by a signal, where the MPI allows it) does not end the "
                        "job: the adaptation fails with a clear error and the job goes on. Expansions that fail or "
                        "time out without a dead process never end the job")
    p.add_argument("--dry-run", action="store_true", help="print the mpiexec command instead of running it")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="the program and its arguments (after --)")
    p.set_defaults(func=_run)


def build_run_argv(args: argparse.Namespace) -> list[str]:
    """The mpiexec command line for ``malleable run`` (validated).

    Raises:
        ConfigError: bad process count, empty command, bad hostfile or plan.
    """
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise ConfigError("no command to run: malleable run -n N -- python app.py ...")
    if args.procs < 1:
        raise ConfigError(f"-n must be >= 1, got {args.procs}")
    hosts: list[str] = []
    if args.hosts:
        hosts = [h.strip() for h in args.hosts.split(",") if h.strip()]
        if not hosts:
            raise ConfigError("--hosts is empty")
    elif args.hostfile:
        hosts = read_hostfile(args.hostfile)
    if getattr(args, "rigid", False):
        if args.plan is not None:
            raise ConfigError("--rigid starts a job that cannot be resized: --plan does not apply")
        return mpiexec_argv(args.procs, cmd, hosts=hosts or None, launcher_exec=args.launcher_exec,
                            keep_going=args.no_auto_cleanup)
    never = never_imports_malleable(cmd) if args.procs > 1 else None
    if never:
        raise ConfigError(f"{never} never imports malleable, so it cannot call init_adapt() and would run as 1 "
                          f"process, not {args.procs}: use --rigid to start {args.procs} processes as mpiexec -n does")
    env = {"MALLEABLE_INITIAL_PROCS": str(args.procs)}
    per_host = getattr(args, "max_procs_per_host", None)
    if per_host is not None:
        if per_host < 1:
            raise ConfigError(f"--max-procs-per-host must be >= 1, got {per_host}")
        env["MALLEABLE_MAX_PROCS_PER_HOST"] = str(per_host)
    if args.hostfile:
        env["MALLEABLE_HOST_SLOTS"] = ",".join(f"{h}:{hosts.count(h)}" for h in dict.fromkeys(hosts))
    if hosts:
        env["MALLEABLE_HOSTS"] = ",".join(hosts)
    # fail here, before starting anything (a dry run may print a command for hosts this machine does not know)
    _check_job(args.procs, hosts, args.plan, env, resolve=not getattr(args, "dry_run", False))
    if args.plan is not None:
        env["MALLEABLE_PLAN"] = args.plan
    if args.timeout is not None:
        if args.timeout <= 0:
            raise ConfigError(f"--timeout must be > 0, got {args.timeout}")
        env["MALLEABLE_ADAPT_TIMEOUT"] = str(args.timeout)
    return mpiexec_argv(1, cmd, hosts=hosts[:1] or None, launcher_exec=args.launcher_exec, env=env,
                        keep_going=args.no_auto_cleanup)


def _check_job(procs: int, hosts: list[str], plan_text: str | None, env: dict[str, str], resolve: bool = True) -> None:
    """The checks ``init_adapt`` makes, made before anything starts: known hosts, sizes within the slots.

    Raises:
        ConfigError: an unknown host, or more processes on a host than it may run (PlanError for the plan).
    """
    known = host_resolves if resolve else None
    for h in dict.fromkeys(hosts if resolve else ()):
        if not host_resolves(h):
            raise ConfigError(f"unknown host {h!r} (it does not resolve)")
    local = hosts[0] if hosts else socket.gethostname()
    base = GroupLayout((Group(0, (local,), 1, base=True),))
    slots = slots_from_env({**os.environ, **env}).replace(raise_with="--max-procs-per-host {n}")
    backend = for_mpiexec(find_mpiexec())
    remote = "" if backend.spawn_across_hosts else backend.reach_limit()
    if procs > 1:
        chosen = [hosts[i % len(hosts)] for i in range(1, procs)] if hosts else []
        try:
            check_expand(base, plan_expand(base, procs, chosen), slots, local, remote)
        except AdaptError as e:
            raise ConfigError(f"cannot start {procs} process(es): {e}") from None
    steps = parse_plan(plan_text)
    validate_plan(steps, procs, 1, known)
    check_plan(steps, initial_layout(base, procs, hosts, local), slots, local,
               lambda lay, n: choose_hosts(lay, hosts, n), remote)


def _run(args: argparse.Namespace) -> int:
    argv = build_run_argv(args)
    if args.dry_run:
        sys.stdout.write(shlex.join(argv) + "\n")
        return 0
    log.info("running %s", json.dumps(argv))
    env = dict(os.environ)
    if args.launcher_exec:
        env["MALLEABLE_LAUNCHER_EXEC"] = args.launcher_exec
    marker = None
    if not args.rigid and args.procs > 1:
        # the anchor leaves this file when its program calls init_adapt(); in the cache folder, which the
        # job's hosts usually share with this one (a home directory)
        base = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "malleable")
        os.makedirs(base, exist_ok=True)
        fd, marker = tempfile.mkstemp(prefix="run-", suffix=".init", dir=base)
        os.close(fd)
        os.unlink(marker)
        env["MALLEABLE_RUN_MARKER"] = marker
    try:
        # SIGPIPE stays ignored in the launcher: hydra writes to proxies of spawn groups that already ended,
        # and with the signal's default action it then dies (exit 141) after a successful job
        code = subprocess.call(argv, env=env, restore_signals=False)
    except KeyboardInterrupt:
        return 130
    finally:
        seen = marker is not None and os.path.exists(marker)
        if seen:
            os.unlink(marker)  # type: ignore[arg-type]
    if marker is not None and not seen:
        raise ConfigError(f"the program never called init_adapt(), so it ran as 1 process, not {args.procs}: "
                          f"it is not malleable; use --rigid to start {args.procs} processes as mpiexec -n does")
    return code
