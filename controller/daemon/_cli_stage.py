"""``malleable fs stage-out --job ID`` and ``malleable fs release --job ID``: what the owner of an ended job whose
stage-out failed does about it (its file system and data were kept, its buffer is still held). ``stage-out`` tries
the files not copied yet again and waits for the answer; ``release`` gives them up and frees the buffer."""

from __future__ import annotations

import argparse
import time
from typing import Any

from malleable.errors import MalleableError

__all__ = ["register"]

WAIT = 600.0        # seconds ``fs stage-out`` waits for the copy and the stop


def register(fsub: Any) -> None:
    """Add ``stage-out`` and ``release`` to the ``fs`` subcommands."""
    p = fsub.add_parser("stage-out", help="try again the failed stage-out of an ended job (--job ID)",
                        description="Copy again the stage-out files of job ID that were not copied (fix the cause "
                                    "first, e.g. make the destination folder); waits until they are and the file "
                                    "system is stopped, or the copy fails again (the file system is kept).")
    p.add_argument("--job", type=int, required=True, metavar="ID")
    p.add_argument("--timeout", type=float, default=WAIT, help=f"seconds to wait (default {WAIT:g})")
    p.set_defaults(func=_stage_out)
    p = fsub.add_parser("release", help="give up the failed stage-out of an ended job (--job ID): data dropped",
                        description="Stop the file system kept for job ID after its stage-out failed; the files "
                                    "not staged out are dropped and its burst buffer is free.")
    p.add_argument("--job", type=int, required=True, metavar="ID")
    p.set_defaults(func=_release)


def _phase(c: Any, job: int) -> dict[str, Any]:
    return dict(c.info(job).job.get("fs") or {})


def _stage_out(args: argparse.Namespace) -> int:
    from ._client import Client
    from ._fsrequest import StageOutAgain

    with Client(timeout=10.0) as c:
        c.call(StageOutAgain(args.job))
        deadline = time.monotonic() + args.timeout
        while (fs := _phase(c, args.job)).get("phase") == "staging-out":
            if time.monotonic() > deadline:
                raise MalleableError(f"fs stage-out: job {args.job}'s stage-out still runs after {args.timeout:g} s")
            time.sleep(0.2)
    copied = [x for x in fs.get("stage_out", []) if not x[3]]
    if fs.get("phase") == "held":
        raise MalleableError(f"fs stage-out: job {args.job}: {fs.get('error') or 'failed'}; the file system is "
                             "still kept")
    for src, dst, size, _ in copied:
        print(f"{src} -> {dst}: {size} bytes")
    print(f"job {args.job}: staged out; file system stopped, burst buffer free")
    return 0


def _release(args: argparse.Namespace) -> int:
    from ._client import Client
    from ._fsrequest import StageOutAgain

    with Client(timeout=10.0) as c:
        c.call(StageOutAgain(args.job, release=True))
    print(f"job {args.job}: file system released; its burst buffer is free once its servers stopped")
    return 0
