"""Subcommands of the adhocfs part: ``malleable fs start|stop|status|put|get|ls|mkdir|rm|mv|mount|umount``
and the elasticity commands ``expand|shrink|watch``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import sys
import time
from collections.abc import Callable
from typing import Any

from malleable.errors import ConfigError, FsError, MalleableError

__all__ = ["hosts_arg", "job_fs", "meta_option", "one_line", "parse_size", "register"]

CHUNK = 4 << 20
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> int:
    """``SIZE`` with an optional K, M, G or T suffix (powers of 1024, an optional trailing ``B`` or ``iB``).

    Raises:
        argparse.ArgumentTypeError: not a size.
    """
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*", text, re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"expected a size such as 512M or 2G, got {text!r}")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def one_line(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Run an ``fs`` subcommand so that every failure is one line naming it (exit 1, no traceback): OS and zmq
    errors become :class:`FsError`, a ``--meta`` that is not ``tcp://HOST:PORT`` a :class:`ConfigError`."""

    @functools.wraps(func)
    def run(args: argparse.Namespace) -> int:
        import zmq

        from malleable.adhocfs._rpc import ADDRESS

        cmd = getattr(args, "fs_command", "fs")
        if getattr(args, "job", None) is not None:
            if args.meta is not None:
                raise ConfigError(f"{cmd}: give --meta or --job, not both")
            args.meta = job_fs(cmd, args.job)
        meta = getattr(args, "meta", None)
        if cmd != "start" and hasattr(args, "meta") and meta is None:
            meta = args.meta = os.environ.get("MALLEABLE_FS") or None
            if meta is None:
                raise ConfigError(f"{cmd}: give --meta tcp://HOST:PORT or set MALLEABLE_FS")
        if cmd != "start" and meta is not None and not ADDRESS.match(meta):
            raise ConfigError(f"{cmd}: --meta must be the metadata address tcp://HOST:PORT "
                              f"(the last line of 'malleable fs start'), got {meta!r}")
        try:
            return func(args)
        except MalleableError as e:
            text = " ".join(str(e).split())
            if text == str(e):
                raise
            raise FsError(f"{cmd}: {text}") from None
        except (OSError, zmq.ZMQError) as e:
            raise FsError(f"{cmd}: {' '.join(str(e).split())}") from None

    return run


def meta_option(p: argparse.ArgumentParser) -> None:
    """The ``--meta`` and ``--job`` options of every command but ``start``."""
    p.add_argument("--meta", metavar="ADDR",
                   help="metadata address tcp://HOST:PORT (default $MALLEABLE_FS, set for a job that has a file "
                        "system)")
    p.add_argument("--job", type=int, metavar="ID",
                   help="the file system of controller job ID (submitted with --bb; the controller is found as "
                        "'malleable queue' finds it; needs the operator's secret)")


def job_fs(cmd: str, job: int) -> str:
    """The address of controller job ``job``'s file system; sets this process's secret to that file system's
    (derived from the operator's, so only the operator reaches a job's file system from outside the job).

    Raises:
        ConfigError: the job has no file system, or it is not running.
    """
    from malleable._secret import load_token
    from malleable.controller.daemon._client import Client
    from malleable.controller.daemon._fsshell import fs_secret

    with Client(timeout=10.0) as c:
        cid = c.status()["controller_id"]
        rec = c.info(job).job
    fs = rec.get("fs") or {}
    if not rec.get("bb"):
        raise ConfigError(f"{cmd}: job {job} has no file system (it was submitted without --bb)")
    if fs.get("phase") not in ("ready", "staging-out") or not fs.get("address"):
        raise ConfigError(f"{cmd}: job {job}'s file system is {fs.get('phase') or 'not started yet'}, not in use")
    os.environ["MALLEABLE_TOKEN"] = fs_secret(load_token(create=False), cid, job)
    return str(fs["address"])


def hosts_arg(text: str) -> list[str]:
    """A comma-separated host list (an argparse type)."""
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
        type=hosts_arg,
        metavar="HOST,...",
        help="data server hosts; repeat a host for several servers on it",
    )
    p.add_argument("--dir", default=None, help="backing directory root: blocks survive a data server restart")
    p.add_argument(
        "--state", default=None, help="directory for the metadata database and logs (default: temp)"
    )
    p.add_argument("--block-size", type=int, default=0, help="default block size in bytes (default 512 KiB)")
    p.add_argument("--replicas", type=int, default=1, metavar="R",
                   help="copies of each block, on the next servers in rendezvous order (default 1)")
    p.add_argument("--capacity", type=parse_size, default=0, metavar="SIZE",
                   help="most bytes each data server holds, e.g. 2G (default: no limit); writes beyond get ENOSPC")
    p.set_defaults(func=_start)

    p = fsub.add_parser("stop", help="stop every server of an instance",
                        description="Stop the metadata server and every data server. The state directory 'fs "
                                    "start' made (database and logs) is removed unless --keep; one given with "
                                    "--state is kept.")
    meta_option(p)
    p.add_argument("--keep", action="store_true", help="keep the state directory 'fs start' made")
    p.set_defaults(func=_stop)

    p = fsub.add_parser("status", help="servers, blocks, bytes, request rates, AIO and changes in progress")
    meta_option(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_status)

    p = fsub.add_parser("put", help="copy a local file into adhocfs")
    meta_option(p)
    p.add_argument("local")
    p.add_argument("remote")
    p.add_argument("--block-size", type=int, default=0)
    p.set_defaults(func=_put)

    p = fsub.add_parser("get", help="copy a file out of adhocfs ('-' for stdout)")
    meta_option(p)
    p.add_argument("remote")
    p.add_argument("local")
    p.set_defaults(func=_get)

    p = fsub.add_parser("ls", help="list a directory")
    meta_option(p)
    p.add_argument("path", nargs="?", default="/")
    p.add_argument("-l", "--long", action="store_true", help="kind, size, block size, state and modification time")
    p.set_defaults(func=_ls)

    p = fsub.add_parser("mkdir", help="make directories")
    meta_option(p)
    p.add_argument("-p", "--parents", action="store_true", help="make parents as needed; no error if it exists")
    p.add_argument("paths", nargs="+", metavar="PATH")
    p.set_defaults(func=_mkdir)

    p = fsub.add_parser("rm", help="remove files (and, with -r, directories and what they hold)")
    meta_option(p)
    p.add_argument("-r", "--recursive", action="store_true", help="remove directories and their contents")
    p.add_argument("paths", nargs="+", metavar="PATH")
    p.set_defaults(func=_rm)

    p = fsub.add_parser("mv", help="rename a file or directory")
    meta_option(p)
    p.add_argument("src")
    p.add_argument("dst")
    p.set_defaults(func=_mv)

    p = fsub.add_parser("mount", help="mount the file system on a directory (FUSE): programs use it as files",
                        description="Mount through FUSE and return once the mount is ready; a daemon serves it in "
                                    "the background (its log: --log, default beside its record in /run/malleable/"
                                    "mounts) until 'malleable fs umount DIR'. Consistency is close-to-open; what is "
                                    "relaxed (links, modes, locks across hosts) is in docs/adhocfs.md.")
    meta_option(p)
    p.add_argument("dir", metavar="DIR", help="an existing directory")
    p.add_argument("--timeout", type=float, default=5.0,
                   help="seconds before a silent server makes an operation fail with EIO (default 5)")
    p.add_argument("--log", default=None, metavar="FILE", help="the mount daemon's log")
    p.add_argument("--allow-other", action="store_true",
                   help="let other users in (files show as the owner's, mode 0644/0755, which the kernel enforces)")
    p.add_argument("--uid", type=int, default=None, help="owner shown for every file (default: yours)")
    p.add_argument("--gid", type=int, default=None, help="group shown for every file (default: yours)")
    p.set_defaults(func=_mount)

    p = fsub.add_parser("umount", help="unmount a directory mounted by 'fs mount'; its daemon exits",
                        description="Unmount and wait for the mount daemon to exit. A mount whose daemon died "
                                    "(programs get ENOTCONN) is removed the same way.")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("--lazy", action="store_true",
                   help="detach it even while programs use it (they keep it until they let go)")
    p.set_defaults(func=_umount)

    try:
        from malleable.adhocfs import _cli_elastic
    except ImportError:  # pragma: no cover - elasticity commands not installed
        return
    _cli_elastic.register(fsub)
    for parser in fsub.choices.values():
        parser.set_defaults(func=one_line(parser.get_default("func")))


def _start(args: argparse.Namespace) -> int:
    from malleable.adhocfs._deploy import start_fs

    if args.replicas < 1:
        raise ConfigError(f"start: --replicas must be at least 1, got {args.replicas}")
    dep = start_fs(args.meta, args.data, dir=args.dir, state=args.state, block_size=args.block_size,
                   replicas=args.replicas, capacity=args.capacity)
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

    stop_fs(args.meta, keep=args.keep)
    print(f"stopped {args.meta}")
    return 0


def _mount(args: argparse.Namespace) -> int:
    from malleable.adhocfs._fuse_mount import mount

    rec = mount(args.meta, args.dir, timeout=args.timeout, log_file=args.log, allow_other=args.allow_other,
                uid=args.uid, gid=args.gid)
    print(f"mounted {rec.meta} on {rec.dir} (daemon pid {rec.pid}, log {rec.log})")
    return 0


def _umount(args: argparse.Namespace) -> int:
    from malleable.adhocfs._fuse_mount import umount

    umount(args.dir, lazy=args.lazy)
    print(f"unmounted {args.dir}")
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
                    "damaged": st.damaged,
                    "replicas": st.replicas,
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
        f"{'sid':>4} {'host':<10} {'state':<9} {'blocks':>7} {'used':>10} {'free':>10} {'reads':>7} {'writes':>7} "
        f"{'req/s':>7} {'AIO MB/s':>9}  address"
    )
    for s in st.servers:
        if not s.get("reachable"):
            why = "lost" if s["state"] == "lost" else "not answering"
            print(
                f"{s['sid']:>4} {s['host']:<10} {s['state']:<9} {'-':>7} {'-':>10} {'-':>10} {'-':>7} {'-':>7} "
                f"{'-':>7} {'-':>9}  {s['addr'] or '-'} ({why})"
            )
            continue
        cap = s.get("capacity", 0)
        free = _fmt_bytes(max(0, cap - s["bytes"])) if cap else "unlimited"
        print(
            f"{s['sid']:>4} {s['host']:<10} {s['state']:<9} {s['blocks']:>7} {_fmt_bytes(s['bytes']):>10} "
            f"{free:>10} {s['reads']:>7} {s['writes']:>7} {s['req_rate']:>7.1f} {s['aio']:>9.1f}  {s['addr']}"
        )
    if st.change:
        _print_change(st.change)
    if getattr(st, "damaged", None):
        print(f"damaged files ({len(st.damaged)}): " + ", ".join(st.damaged[:20])
              + (" ..." if len(st.damaged) > 20 else "") + " (details: malleable fs check)")
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
        names = fs.listdir(args.path)
        if not args.long:
            for name in names:
                print(name)
            return 0
        print(f"{'T':1} {'SIZE':>12} {'BLOCK':>8} {'STATE':<9} {'MODIFIED':<19} NAME")
        for name in names:
            st = fs.stat(f"{base}/{name}")
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(st.mtime)) if st.mtime else "-"
            print(f"{'d' if st.is_dir else '-'} {st.size:>12} {st.block_size or '-':>8} {st.status:<9} "
                  f"{when:<19} {name}{'/' if st.is_dir else ''}")
    return 0


def _mkdir(args: argparse.Namespace) -> int:
    from malleable.adhocfs._client import connect

    with connect(args.meta) as fs:
        for path in args.paths:
            if args.parents:
                fs.makedirs(path, exist_ok=True)
            else:
                fs.mkdir(path)
    return 0


def _rm(args: argparse.Namespace) -> int:
    from malleable.adhocfs._client import connect

    with connect(args.meta) as fs:
        for path in args.paths:
            if fs.stat(path).is_dir:
                if not args.recursive:
                    raise IsADirectoryError(f"{path} is a directory (use -r)")
                _rm_tree(fs, path)
            else:
                fs.remove(path)
    return 0


def _rm_tree(fs: Any, path: str) -> None:
    base = path.rstrip("/")
    for name in fs.listdir(path):
        child = f"{base}/{name}"
        if fs.stat(child).is_dir:
            _rm_tree(fs, child)
        else:
            fs.remove(child)
    fs.remove(path)


def _mv(args: argparse.Namespace) -> int:
    from malleable.adhocfs._client import connect

    with connect(args.meta) as fs:
        fs.rename(args.src, args.dst)
    return 0
