"""Subcommands of the adhocfs part: ``malleable fs start|stop|status|put|get|ls``
and the elasticity commands ``expand|shrink|watch``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["register"]

CHUNK = 4 << 20


def _hosts(text: str) -> list[str]:
    return [h.strip() for h in text.split(",") if h.strip()]


def register(sub: argparse._SubParsersAction) -> None:
    """Add this part's subcommands to the malleable command."""
    fs = sub.add_parser(
        "fs",
        help="the elastic ad-hoc file system (adhocfs)",
        description="Start, inspect, resize and use an adhocfs instance.",
    )
    fsub = fs.add_subparsers(dest="fs_command", metavar="FS_COMMAND")
    fs.set_defaults(func=lambda args: (fs.print_help(sys.stderr), 2)[1])

    p = fsub.add_parser(
        "start",
        help="start a metadata server and data servers",
        description="Start the servers and return once all answer; the last line printed is "
        "the metadata address.",
    )
    p.add_argument(
        "--meta", required=True, metavar="HOST[:PORT]", help="host (and port) of the metadata server"
    )
    p.add_argument(
        "--data",
        required=True,
        type=_hosts,
        metavar="HOST,...",
        help="data server hosts; repeat a host for several servers on it",
    )
    p.add_argument("--dir", default=None, help="backing directory root: blocks survive a data server restart")
    p.add_argument(
        "--state", default=None, help="directory for the metadata database and logs (default: temp)"
    )
    p.add_argument("--block-size", type=int, default=0, help="default block size in bytes (default 512 KiB)")
    p.set_defaults(func=_start)

    p = fsub.add_parser("stop", help="stop every server of an instance")
    p.add_argument("--meta", required=True, metavar="ADDR", help="metadata address tcp://HOST:PORT")
    p.set_defaults(func=_stop)

    p = fsub.add_parser("status", help="servers, blocks, bytes, request rates, AIO and changes in progress")
    p.add_argument("--meta", required=True, metavar="ADDR", help="metadata address tcp://HOST:PORT")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_status)

    p = fsub.add_parser("put", help="copy a local file into adhocfs")
    p.add_argument("--meta", required=True, metavar="ADDR")
    p.add_argument("local")
    p.add_argument("remote")
    p.add_argument("--block-size", type=int, default=0)
    p.set_defaults(func=_put)

    p = fsub.add_parser("get", help="copy a file out of adhocfs ('-' for stdout)")
    p.add_argument("--meta", required=True, metavar="ADDR")
    p.add_argument("remote")
    p.add_argument("local")
    p.set_defaults(func=_get)

    p = fsub.add_parser("ls", help="list a directory")
    p.add_argument("--meta", required=True, metavar="ADDR")
    p.add_argument("path", nargs="?", default="/")
    p.add_argument("-l", "--long", action="store_true", help="show size and block size")
    p.set_defaults(func=_ls)

    try:
        from malleable.adhocfs import _cli_elastic
    except ImportError:  # pragma: no cover - elasticity commands not installed
        return
    _cli_elastic.register(fsub)


def _start(args: argparse.Namespace) -> int:
    from malleable.adhocfs._deploy import start_fs

    dep = start_fs(args.meta, args.data, dir=args.dir, state=args.state, block_size=args.block_size)
    for sid, (host, addr) in sorted(dep.data.items()):
        print(f"data server {sid} on {host}: {addr}")
    print(f"state and logs: {dep.state}")
    print(dep.address)
    sys.stdout.flush()
    for p in dep.procs.values():  # the servers outlive this command
        p.returncode = 0
    return 0


def _stop(args: argparse.Namespace) -> int:
    from malleable.adhocfs._deploy import stop_fs

    stop_fs(args.meta)
    print(f"stopped {args.meta}")
    return 0


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def _status(args: argparse.Namespace) -> int:
    from malleable.adhocfs._deploy import MetaClient

    with MetaClient(args.meta) as mc:
        st = mc.status()
    if args.json:
        print(
            json.dumps(
                {
                    "servers": st.servers,
                    "epoch": st.epoch,
                    "epochs": st.epochs,
                    "files": st.files,
                    "change": st.change,
                    "rio": st.rio,
                    "history": st.history,
                },
                indent=2,
            )
        )
        return 0
    print(
        f"adhocfs {args.meta}: {st.files} files, epoch {st.epoch} = servers "
        f"{st.epochs.get(str(st.epoch), [])}, requested I/O (RIO) {st.rio:.1f} MB/s"
    )
    print(
        f"{'sid':>4} {'host':<10} {'state':<9} {'blocks':>7} {'bytes':>10} {'reads':>7} {'writes':>7} "
        f"{'req/s':>7} {'AIO MB/s':>9}  address"
    )
    for s in st.servers:
        if not s.get("reachable"):
            print(
                f"{s['sid']:>4} {s['host']:<10} {s['state']:<9} {'-':>7} {'-':>10} {'-':>7} {'-':>7} "
                f"{'-':>7} {'-':>9}  {s['addr'] or '-'} (not answering)"
            )
            continue
        print(
            f"{s['sid']:>4} {s['host']:<10} {s['state']:<9} {s['blocks']:>7} {_fmt_bytes(s['bytes']):>10} "
            f"{s['reads']:>7} {s['writes']:>7} {s['req_rate']:>7.1f} {s['aio']:>9.1f}  {s['addr']}"
        )
    if st.change:
        _print_change(st.change)
    return 0


def _print_change(ch: dict[str, Any]) -> None:
    done, total = ch.get("moved", 0), ch.get("planned", 0)
    pct = f" {100 * done / total:.0f}%" if total else ""
    print(
        f"change in progress: {ch.get('kind')} {ch.get('state')} servers {ch.get('sids')} "
        f"mode {ch.get('mode', '-')}: {done}/{total} blocks moved{pct}"
    )


def _put(args: argparse.Namespace) -> int:
    from malleable.adhocfs._client import connect

    with (
        connect(args.meta) as fs,
        open(args.local, "rb") as src,
        fs.open(args.remote, "wb", block_size=args.block_size) as dst,
    ):
        total = 0
        while chunk := src.read(CHUNK):
            total += dst.write(chunk)
    print(f"{args.local} -> {args.remote}: {total} bytes")
    return 0


def _get(args: argparse.Namespace) -> int:
    from malleable.adhocfs._client import connect

    with connect(args.meta) as fs, fs.open(args.remote, "rb") as src:
        out = sys.stdout.buffer if args.local == "-" else open(args.local, "wb")
        try:
            total = 0
            while chunk := src.read(CHUNK):
                out.write(chunk)
                total += len(chunk)
        finally:
            if out is not sys.stdout.buffer:
                out.close()
    if args.local != "-":
        print(f"{args.remote} -> {args.local}: {total} bytes")
    return 0


def _ls(args: argparse.Namespace) -> int:
    from malleable.adhocfs._client import connect

    with connect(args.meta) as fs:
        base = args.path.rstrip("/")
        for name in fs.listdir(args.path):
            if args.long:
                st = fs.stat(f"{base}/{name}")
                kind = "d" if st.is_dir else "-"
                print(f"{kind} {st.size:>12} {st.block_size or '-':>8} {st.status:<8} {name}")
            else:
                print(name)
    return 0
