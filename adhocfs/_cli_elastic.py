"""Elasticity subcommands of ``malleable fs``: expand, shrink and watch."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["register"]


def register(fsub: argparse._SubParsersAction) -> None:
    """Add expand, shrink, lose, check and watch to the ``fs`` subcommands."""
    from malleable.adhocfs._cli import hosts_arg, meta_option, parse_size

    p = fsub.add_parser(
        "expand",
        help="start and commission new data servers while files are in use",
        description="New servers join a new placement epoch: new files and new blocks use "
        "them, existing blocks stay (unless --rebalance).",
    )
    meta_option(p)
    p.add_argument("--data", required=True, type=hosts_arg, metavar="HOST,...", help="hosts of the new servers")
    p.add_argument("--dir", default=None, help="backing directory root of the new servers")
    p.add_argument("--state", default=None, help="directory for the new servers' logs")
    p.add_argument("--capacity", type=parse_size, default=0, metavar="SIZE", help="most bytes each new server holds")
    p.add_argument("--rebalance", action="store_true", help="also move old blocks onto the new servers")
    p.add_argument("--rate", type=float, default=0.0, help="cap of the rebalance bandwidth in MB/s")
    p.set_defaults(func=_expand)

    p = fsub.add_parser(
        "shrink",
        help="decommission data servers; their blocks move to the others",
        description="Files with blocks on the leaving servers wait for writes while their "
        "blocks move; others are not disturbed. The servers exit at the end.",
    )
    meta_option(p)
    p.add_argument(
        "--data",
        required=True,
        type=hosts_arg,
        metavar="HOST[:PORT],...",
        help="servers to remove: HOST (all on it), HOST:PORT, or a server id",
    )
    p.add_argument(
        "--mode",
        choices=["partial", "total"],
        default="partial",
        help="partial: move only the leaving servers' blocks; total: re-place affected files",
    )
    p.add_argument("--rate", type=float, default=0.0, help="cap of the move bandwidth in MB/s")
    p.add_argument("--no-wait", action="store_true", help="return once the shrink has started")
    p.set_defaults(func=_shrink)

    p = fsub.add_parser(
        "lose",
        help="declare dead data servers lost; other copies are re-replicated, files without one are damaged",
        description="The servers leave every layout at once (new writes go to the others). Blocks with a copy "
        "on another server are copied again in the background; files whose blocks had no other copy are "
        "marked damaged (their lost byte ranges read as EIO; 'fs check' lists them).",
    )
    meta_option(p)
    p.add_argument("servers", nargs="+", metavar="SERVER", help="server id, HOST:PORT or HOST (all on it)")
    p.add_argument("--wait", action="store_true", help="return once the re-replication is done")
    p.set_defaults(func=_lose)

    p = fsub.add_parser(
        "check",
        help="list damaged files and blocks missing or under-replicated on the live servers",
        description="Asks every live data server for its blocks and compares with the files' replica sets.",
    )
    meta_option(p)
    p.add_argument("--repair", action="store_true", help="re-copy under-replicated blocks, record missing ones")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_check)

    p = fsub.add_parser(
        "watch",
        help="apply the RIO/AIO rule and expand or shrink accordingly",
        description="Every interval: measure AIO, compare the mean of the last k samples with "
        "RIO +- T, and expand (onto --pool hosts) or shrink; one line per decision.",
    )
    meta_option(p)
    p.add_argument(
        "--rio", type=float, default=0.0, help="requested MB/s (default: the rates clients declared)"
    )
    p.add_argument("--tolerance", type=float, default=10.0, help="T_io in MB/s")
    p.add_argument("--k", type=int, default=3, help="window length (samples)")
    p.add_argument("--interval", type=float, default=1.0, help="seconds per sample")
    p.add_argument("--min", dest="n_min", type=int, default=1, help="fewest data servers")
    p.add_argument("--max", dest="n_max", type=int, default=4, help="most data servers")
    p.add_argument("--cooldown", type=float, default=30.0, help="seconds without changes after a change")
    p.add_argument("--pool", type=hosts_arg, default=[], metavar="HOST,...", help="hosts for new data servers")
    p.add_argument("--dir", default=None, help="backing directory root of new servers")
    p.add_argument("--mode", choices=["partial", "total"], default="partial")
    p.add_argument("--rate", type=float, default=0.0, help="cap of shrink moves in MB/s")
    p.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    p.add_argument("--dry-run", action="store_true", help="log decisions without acting")
    p.add_argument("--json", action="store_true", help="one JSON object per decision")
    p.set_defaults(func=_watch)


def _expand(args: argparse.Namespace) -> int:
    from malleable.adhocfs._admin import expand_fs

    servers, procs, info = expand_fs(
        args.meta, args.data, dir=args.dir, state=args.state, rebalance=args.rebalance, rate=args.rate,
        capacity=args.capacity,
    )
    for sid, (host, addr) in sorted(servers.items()):
        print(f"data server {sid} on {host}: {addr}")
    print(
        f"{info.get('kind', 'expand')} {info.get('state')}: epoch servers {info.get('servers', '-')}"
        + (f", {info.get('moved', 0)} blocks moved" if info.get("kind") == "rebalance" else "")
    )
    for p in procs.values():  # the servers outlive this command
        p.returncode = 0
    return 0


def _shrink(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from malleable.adhocfs._admin import resolve_servers, shrink_fs

    sids = resolve_servers(args.meta, args.data)
    bar: Any = None

    def progress(ch: dict[str, Any]) -> None:
        nonlocal bar
        if ch.get("state") != "running" or not sys.stderr.isatty():
            return
        if bar is None:
            bar = tqdm(total=ch.get("planned", 0), unit="block", desc=f"shrink {sids}", file=sys.stderr)
        bar.total = ch.get("planned", 0)
        bar.n = ch.get("moved", 0)
        bar.refresh()

    try:
        info = shrink_fs(args.meta, sids, args.mode, args.rate, wait=not args.no_wait, progress=progress)
    finally:
        if bar is not None:
            bar.close()
    print(
        f"shrink of servers {sids} ({args.mode}) {info.get('state')}: {info.get('moved', 0)} of "
        f"{info.get('planned', 0)} blocks moved ({info.get('on_leaving', 0)} were on the leaving servers)"
        + (f" in {info['elapsed']:.2f} s" if "elapsed" in info else "")
    )
    return 0


def _lose(args: argparse.Namespace) -> int:
    from malleable.adhocfs._admin import lose_fs, resolve_servers

    sids = resolve_servers(args.meta, args.servers, states=("active", "leaving", "up"))
    info = lose_fs(args.meta, sids, wait=args.wait)
    print(
        f"servers {sids} declared lost: {info.get('state')}"
        + (f", {info.get('moved', 0)} of {info.get('planned', 0)} block copies made" if "planned" in info else "")
    )
    return 0


def _check(args: argparse.Namespace) -> int:
    from malleable.adhocfs._admin import check_fs

    rep = check_fs(args.meta, repair=args.repair)
    if args.json:
        print(json.dumps({"files": rep.files, "checked": rep.checked, "change": rep.change}, indent=2))
        return 0
    for f in rep.files:
        parts = []
        if f["damaged"]:
            parts.append("damaged bytes " + ", ".join(f"{a}-{b}" for a, b in f["damaged"][:8]))
        if f["missing"]:
            parts.append("no live copy of bytes " + ", ".join(f"{a}-{b}" for a, b in f["missing"][:8]))
        if f["under_replicated"]:
            parts.append(f"{f['under_replicated']} blocks under-replicated")
        print(f"{f['path']}: {'; '.join(parts)}")
    bad = sum(1 for f in rep.files if f["damaged"] or f["missing"])
    print(f"{rep.checked} files checked: {bad} damaged, {len(rep.files) - bad} only under-replicated"
          + (f"; repair {rep.change.get('state')}" if rep.change else ""))
    return 0


def _watch(args: argparse.Namespace) -> int:
    from malleable.adhocfs._monitor import Watcher
    from malleable.adhocfs._rule import RuleConfig

    cfg = RuleConfig(
        rio=args.rio,
        tolerance=args.tolerance,
        k=args.k,
        n_min=args.n_min,
        n_max=args.n_max,
        cooldown=args.cooldown,
    )
    w = Watcher(
        args.meta,
        cfg,
        pool=args.pool,
        interval=args.interval,
        mode=args.mode,
        rate=args.rate,
        dir=args.dir,
        act=not args.dry_run,
    )
    try:
        n = 0
        while args.duration is None or n == 0 or w.decisions[-1]["t"] - w.decisions[0]["t"] < args.duration:
            w.run(steps=1)
            rec = w.decisions[-1]
            if args.json:
                print(json.dumps({k: v for k, v in rec.items()}, default=str), flush=True)
            else:
                aio = "-" if rec["aio"] is None else f"{rec['aio']:.1f}"
                print(
                    f"{rec['action']:<6} x{rec['count']} servers={rec['servers']} AIO={aio} MB/s "
                    f"RIO={rec['rio']:g}: {rec['reason']}",
                    flush=True,
                )
            n += 1
    except KeyboardInterrupt:
        pass
    finally:
        for p in w.procs.values():
            p.returncode = 0
    return 0
