"""Standard Workload Format (SWF) reader and writer (Parallel Workloads Archive, format v2.2).

18 whitespace-separated fields per job; header lines start with ``;`` (``; MaxProcs: 240``); -1 marks a missing
value; times may be fractional. Rules:

* procs = field 8 (requested processors) if > 0, else field 5 (allocated processors);
* run time = field 4; estimate = field 9 (requested time) if > 0, else the run time; raised to the run time
  when smaller (so a job never outlives its estimate);
* jobs with run time < 0, procs <= 0 or procs above the machine are skipped and counted by reason;
* machine size = header ``MaxProcs``, else ``MaxNodes``, else the ``procs`` argument;
* a malformed line (wrong field count, not a number) is reported with its line number and skipped and counted,
  or with ``strict=True`` raises :class:`~malleable.errors.TraceError`.
"""

from __future__ import annotations

import gzip
import io
import logging
import os
from array import array
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from malleable.errors import TraceError

from ._workload import Workload, _sorted

__all__ = ["read_swf", "write_swf"]

log = logging.getLogger(__name__)

_MAX_REPORTED = 10     # malformed lines logged one by one; the rest only counted


def _open(path: str | os.PathLike[str]) -> io.TextIOBase:
    p = Path(path)
    try:
        with open(p, "rb") as f:
            magic = f.read(2)
        if magic == b"\x1f\x8b":
            return io.TextIOWrapper(gzip.open(p, "rb"), encoding="utf-8", errors="replace")
        return open(p, encoding="utf-8", errors="replace")  # noqa: SIM115 - returned to a with-block
    except OSError as e:
        raise TraceError(f"{p}: cannot open: {e.strerror or e}") from e


def read_swf(path: str | os.PathLike[str], *, procs: int | None = None, strict: bool = False,
             limit: int | None = None) -> Workload:
    """Read an SWF file (plain or gzip-compressed, detected from its content).

    Args:
        path: the file.
        procs: machine size when the header gives neither ``MaxProcs`` nor ``MaxNodes``.
        strict: raise on the first malformed line instead of skipping it.
        limit: read only the first ``limit`` job records (malformed lines count as records).

    Returns:
        The workload sorted by submit time, with ``skipped`` counts (``run<0``, ``procs<=0``, ``procs>machine``)
        and ``malformed``.

    Raises:
        TraceError: the file cannot be read, a malformed line under ``strict`` (message ``FILE:LINE: why``), or
            no machine size is known.
    """
    header: dict[str, str] = {}
    cols = (array("q"), array("d"), array("d"), array("d"), array("q"))    # 40 bytes per record, no objects
    add_id, add_sub, add_run, add_req_time, add_procs = (c.append for c in cols)
    malformed = 0
    records = 0
    name = str(path)
    with _open(path) as f:
        try:
            for lineno, line in enumerate(f, 1):
                s = line.strip()
                if not s:
                    continue
                if s[0] == ";":
                    key, sep, value = s[1:].partition(":")
                    if sep:
                        header.setdefault(key.strip().lower(), value.strip())
                    continue
                if limit is not None and records >= limit:
                    break
                records += 1
                parts = s.split()
                try:
                    if len(parts) != 18:
                        raise ValueError(f"expected 18 fields, found {len(parts)}")  # noqa: TRY301
                    job = int(float(parts[0]))
                    submit = float(parts[1])
                    run = float(parts[3])
                    alloc = int(float(parts[4]))
                    req = int(float(parts[7]))
                    req_time = float(parts[8])
                    if submit != submit or run != run or req_time != req_time:   # NaN
                        raise ValueError("NaN field")  # noqa: TRY301
                except ValueError as e:
                    malformed += 1
                    msg = f"{name}:{lineno}: malformed SWF record ({e}): {s[:80]!r}"
                    if strict:
                        raise TraceError(msg) from None
                    if malformed <= _MAX_REPORTED:
                        log.warning("%s (skipped)", msg)
                    continue
                add_id(job)
                add_sub(submit)
                add_run(run)
                add_req_time(req_time)
                add_procs(req if req > 0 else alloc)
        except (OSError, EOFError, UnicodeError) as e:
            raise TraceError(f"{name}: read error: {e}") from e
    machine = _machine(header, procs, name)
    if malformed > _MAX_REPORTED:
        log.warning("%s: %d malformed lines skipped in all", name, malformed)
    return _columns(cols, machine, name, malformed)


def _machine(header: dict[str, str], procs: int | None, name: str) -> int:
    for key in ("maxprocs", "maxnodes"):
        v = header.get(key)
        if v is not None:
            try:
                m = int(float(v.split()[0]))
            except (ValueError, IndexError):
                raise TraceError(f"{name}: header {key} is not a number: {v!r}") from None
            if m > 0:
                return m
    if procs is None or procs < 1:
        raise TraceError(f"{name}: no MaxProcs/MaxNodes header; give the machine size (--procs)")
    return int(procs)


def _columns(cols: tuple[array, ...], machine: int, name: str, malformed: int) -> Workload:
    ids, submit, run, req_time, procs = (np.frombuffer(c, dtype=np.int64 if c.typecode == "q" else np.float64)
                                         for c in cols)
    bad_run = run < 0
    bad_procs = ~bad_run & (procs <= 0)
    too_big = ~bad_run & ~bad_procs & (procs > machine)
    keep = ~(bad_run | bad_procs | too_big)
    skipped = {k: int(v.sum()) for k, v in (("run<0", bad_run), ("procs<=0", bad_procs),
                                             ("procs>machine", too_big)) if v.any()}
    if skipped:
        log.info("%s: skipped %s", name, skipped)
    run = run[keep]
    est = np.where(req_time[keep] > 0, req_time[keep], run)
    est = np.maximum(est, run)
    w = Workload(ids[keep], submit[keep], run, est, procs[keep].astype(np.int32),
                 machine, skipped=skipped, malformed=malformed, name=Path(name).name)
    return _sorted(w)


def _num(x: float) -> str:
    x = float(x)
    return str(int(x)) if x.is_integer() else repr(x)


def write_swf(workload: Workload, path: str | os.PathLike[str], *, extra_header: Iterable[str] = ()) -> None:
    """Write ``workload`` as an SWF file (gzip-compressed when the name ends in ``.gz``).

    Only the fields a batch simulator reads are filled (1, 2, 4, 5, 8, 9); the others are -1.
    """
    p = Path(path)
    lines = [f"; MaxProcs: {workload.machine}", f"; MaxNodes: {workload.machine}",
             *(f"; {h}" for h in extra_header)]
    for i in range(len(workload)):
        pr = int(workload.procs[i])
        lines.append(f"{int(workload.ids[i])} {_num(workload.submit[i])} -1 {_num(workload.run[i])} {pr} -1 -1 "
                     f"{pr} {_num(workload.estimate[i])} -1 1 -1 -1 -1 -1 -1 -1 -1")
    data = ("\n".join(lines) + "\n").encode()
    if p.suffix == ".gz":
        with gzip.open(p, "wb") as f:
            f.write(data)
    else:
        p.write_bytes(data)
