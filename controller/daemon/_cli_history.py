"""``malleable history`` with sacct's habits: read from the state file (the daemon need not run, as sacct reads the
accounting database), sacct's filters (``-j -u -s -S -E``), its ``-o/--format`` field lists (``--helpformat``
names them), ``--json``, and ``--export`` of the completed jobs as a workload the simulator replays."""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from typing import Any

from malleable.errors import ConfigError

__all__ = ["add_history_parser"]

Command = Callable[[argparse.Namespace], int]


def add_history_parser(sub: Any, client_opts: Callable[[Any], None], wrap: Callable[[Command], Command]) -> None:
    """Add ``history`` (``client_opts`` adds the daemon options, ``wrap`` makes failures one line)."""
    p = sub.add_parser("history", help="jobs of every state with exit code and elapsed time (like sacct)",
                       description="Jobs of every state, newest first. Read from the state file (the daemon need not "
                                   "run, as sacct reads the accounting database); from the daemon with --controller.",
                       epilog="examples: malleable history -s failed,timeout -S now-2hours;  "
                              "malleable history -o JobID,JobName%%20,State,ExitCode,NodeList")
    client_opts(p)
    p.add_argument("-j", "--jobs", metavar="ID[,ID...]", help="only these jobs")
    p.add_argument("-u", "--user", metavar="USER[,USER...]", help="only jobs of these users")
    p.add_argument("-s", "--states", metavar="STATE[,STATE...]",
                   help="only jobs in these states (names or codes: PD, CF, R, CD, F, CA, TO)")
    p.add_argument("-S", "--starttime", metavar="TIME", help="only jobs not ended before TIME (see the docs for the "
                   "forms: 2026-11-22T14:30, 14:30, today, now-2hours, ...)")
    p.add_argument("-E", "--endtime", metavar="TIME", help="only jobs submitted at or before TIME")
    p.add_argument("--limit", type=int, default=0, help="only the newest N jobs")
    p.add_argument("-o", "--format", metavar="FIELD[%%WIDTH],...",
                   help="the columns, as sacct's --format: field names (any case) separated by commas, each with an "
                        "optional %%WIDTH; --helpformat lists them")
    p.add_argument("-e", "--helpformat", action="store_true", help="list the fields -o/--format takes")
    p.add_argument("--json", action="store_true", help="a JSON document with a schema number")
    p.add_argument("--export", metavar="FILE",
                   help="write the completed jobs as a workload (JSON lines) that 'malleable simulate --workload "
                        "FILE --policy P' replays; reads the state file, the daemon need not run")
    p.set_defaults(func=wrap(_history))


def _split(text: str | None) -> list[str]:
    return [x.strip() for x in (text or "").split(",") if x.strip()]


def _query(args: argparse.Namespace) -> Any:
    """The request the filters make (checked: a bad filter fails here with one line)."""
    from ._cli_views import STATE_CODES
    from ._protocol import STATES, History
    from ._timefmt import parse_when

    if args.limit < 0:
        raise ConfigError(f"--limit must be >= 0, got {args.limit}")
    jobs = []
    for x in _split(args.jobs):
        if not x.isdigit():
            raise ConfigError(f"-j wants job ids separated by commas, got {args.jobs!r}")
        jobs.append(int(x))
    by_code = {v: k for k, v in STATE_CODES.items()}
    states = []
    for x in _split(args.states):
        st = by_code.get(x.upper(), x.upper())
        if st not in STATES:
            raise ConfigError(f"unknown job state {x!r}: use {', '.join(STATES)} or {', '.join(STATE_CODES.values())}")
        states.append(st)
    now = time.time()
    since = parse_when(args.starttime, now) if args.starttime else 0.0
    until = parse_when(args.endtime, now) if args.endtime else 0.0
    if since and until and until < since:
        raise ConfigError("--endtime is before --starttime")
    return History(args.limit, jobs, _split(args.user), states, max(0.0, since), max(0.0, until))


def _history(args: argparse.Namespace) -> int:
    from ._cli_views import FIELDS, document, format_lines, history_lines, job_json, parse_format

    if args.helpformat:
        print(" ".join(f.name for f in FIELDS.values()))
        return 0
    if args.export:
        return _export(args)
    fields = parse_format(args.format) if args.format else None    # a bad field fails before the state is read
    q = _query(args)
    if args.controller or (os.environ.get("MALLEABLE_CONTROLLER") and not args.state):
        from ._client import Client

        with Client(args.controller, args.state, timeout=args.timeout) as c:
            rows = c.history(q.limit, q.jobs, q.users, q.states, q.since, q.until)
    else:
        from ._paths import default_state
        from ._store import Store

        store = Store.reader(args.state or default_state())
        try:
            rows = [j.public() for j in store.history(q)]
        finally:
            store.close()
    now = time.time()
    if args.json:
        print(json.dumps(document("jobs", [job_json(j, now) for j in rows]), indent=2))
    elif fields is not None:
        print("\n".join(format_lines(rows, fields, now)))
    else:
        print("\n".join(history_lines(rows, now)))
    return 0


def _export(args: argparse.Namespace) -> int:
    from ._export import export_workload
    from ._paths import default_state
    from ._store import Store

    store = Store.reader(args.state or default_state())
    try:
        n = export_workload(store, args.export, len(store.load_hosts()) or 1)
    finally:
        store.close()
    print(f"wrote {n} job(s) to {args.export}")                   # the CLI's own output
    return 0
