"""Workloads as JSON lines: one job per line, what ``malleable history --export`` writes and ``malleable simulate
--workload`` reads.

The first line may be a header object ``{"format": "malleable-jobs", "version": 1, "machine": N, ...}``; every
other non-empty line is a job::

    {"id": 3, "submit": 12.5, "run": 40.2, "estimate": 600, "procs": 2,
     "kind": "malleable", "min": 1, "max": 4, "speedup": "amdahl:0.05"}

``id``, ``submit``, ``run`` and ``procs`` are required; ``estimate`` defaults to ``run``, ``kind`` to ``rigid``
(``rigid``, ``moldable`` or ``malleable``), ``min``/``max`` to ``procs``, ``speedup`` to ``linear`` (``linear``,
``amdahl:F`` or ``rho:R``, as ``malleable submit --speedup``). ``run`` is the run time at ``procs`` nodes. Other
keys are kept by the writer for the record (the live size history of an exported job, ``measured``) and ignored by
the reader. The machine size is ``--procs``, else the header's ``machine``, else the largest ``max``.

I/O (optional; the I/O-aware simulator runs it): the header's ``bb_total`` is the machine's burst-buffer capacity
in bytes; a job's ``bb`` the bytes of it the job holds while it runs; ``phases`` its application model, a list
of ``[kind, amount]`` or ``[kind, amount, true]`` (a scheduling point follows), kind one of ``compute`` (seconds
at ``procs`` nodes), ``read``, ``write``, ``stage-in``, ``checkpoint``, ``stage-out`` (bytes); ``intensity`` its
I/O intensity per size, ``[[n, i], ...]`` with ``0 <= i <= 1``::

    {"id": 7, "submit": 0, "run": 7200, "procs": 4, "bb": 4e11,
     "phases": [["stage-in", 4e11], ["compute", 3600], ["checkpoint", 2e11], ["compute", 3600], ["stage-out", 4e11]]}

Storage (optional, as ``malleable submit --fs-servers/--fs-min/--fs-max/--io-rate``): a job with any of
``fs_servers``, ``fs_min``, ``fs_max`` (data servers, integers) or ``io_rate`` (the requested rate, bytes/s) has a
file system of its own in the I/O-aware simulator; ``fs_servers`` (the servers it starts with) defaults to
``fs_min``, else 1; ``fs_min`` to ``fs_servers``; ``fs_max`` to the larger of the two; ``io_rate`` to 0 (then the
storage policy never grows it). They must satisfy ``1 <= fs_min <= fs_servers <= fs_max``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from malleable.controller.sched._model import Phase, PhaseKind
from malleable.controller.sched._speedup import speedup_params
from malleable.errors import TraceError

from ._workload import Workload, _sorted

__all__ = ["FORMAT", "read_jobs", "write_jobs"]

FORMAT = "malleable-jobs"
VERSION = 1
_KINDS = {"rigid": 0, "moldable": 1, "malleable": 2}


def write_jobs(path: str | os.PathLike[str], jobs: Iterable[Mapping[str, Any]], machine: int,
               **header: Any) -> int:
    """Write ``jobs`` (dicts with the keys above) after a header line; returns how many were written."""
    n = 0
    with open(path, "w") as f:
        f.write(json.dumps({"format": FORMAT, "version": VERSION, "machine": machine, **header}) + "\n")
        for job in jobs:
            f.write(json.dumps(job, separators=(",", ":")) + "\n")
            n += 1
    return n


def read_jobs(path: str | os.PathLike[str], procs: int | None = None) -> Workload:
    """Read a JSON-lines workload.

    Raises:
        TraceError: a line that is not a JSON object, a missing or ill-typed field, sizes that do not satisfy
            ``1 <= min <= procs <= max <= machine``, negative times or a bad speedup (the message gives the
            line number); or no job at all.
    """
    rows: list[tuple] = []
    io: list[tuple[float, tuple[Phase, ...], tuple[tuple[int, float], ...]]] = []
    fs: list[tuple[int, int, int, float] | None] = []
    bb_total = 0.0
    machine = procs
    name = os.path.basename(str(path))
    try:
        f = open(path)  # noqa: SIM115 - closed below
    except OSError as e:
        raise TraceError(f"{path}: {e.strerror}") from None
    with f:
        for no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise TraceError(f"{name}:{no}: not JSON ({e.msg})") from None
            if not isinstance(obj, dict):
                raise TraceError(f"{name}:{no}: not a JSON object")
            if obj.get("format") == FORMAT:
                if machine is None and isinstance(obj.get("machine"), int):
                    machine = obj["machine"]
                bb_total = _number(obj.get("bb_total", 0.0), f"{name}:{no}", "bb_total")
                continue
            rows.append(_row(obj, f"{name}:{no}"))
            io.append(_io(obj, f"{name}:{no}"))
            fs.append(_fs(obj, f"{name}:{no}"))
    if not rows:
        raise TraceError(f"{name}: no job in the file")
    biggest = max(r[7] for r in rows)
    machine = machine or biggest
    if biggest > machine:
        raise TraceError(f"{name}: a job allows {biggest} nodes but the machine has {machine} (give --procs)")
    c = list(zip(*rows, strict=True))
    w = Workload(np.array(c[0], dtype=np.int64), np.array(c[1], dtype=np.float64), np.array(c[2], dtype=np.float64),
                 np.array(c[3], dtype=np.float64), np.array(c[4], dtype=np.int32), machine,
                 np.array(c[5], dtype=np.int8), np.array(c[6], dtype=np.int32), np.array(c[7], dtype=np.int32),
                 np.array(c[8], dtype=np.float64), name=name, rho=np.array(c[9], dtype=np.float64))
    if len(set(w.ids.tolist())) != len(w):
        raise TraceError(f"{name}: job ids repeat")
    if any(b for b, _, _ in io):
        w.bb = np.array([b for b, _, _ in io])
        if float(w.bb.max()) > bb_total:
            raise TraceError(f"{name}: a job asks for {float(w.bb.max()):g} bytes of burst buffer but the machine "
                             f"has {bb_total:g} (the header's bb_total)")
    w.bb_total = bb_total
    if any(ph for _, ph, _ in io):
        w.phases = [ph for _, ph, _ in io]
    if any(i for _, _, i in io):
        w.intensity = [i for _, _, i in io]
    if any(x is not None for x in fs):
        w.fs = fs
    return _sorted(w)


def _number(v: Any, where: str, key: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v < 0 or v == float("inf"):
        raise TraceError(f"{where}: {key!r} must be a finite number >= 0, got {v!r}")
    return float(v)


_PHASES = {k.value: k for k in PhaseKind}


def _io(obj: dict[str, Any], where: str) -> tuple[float, tuple[Phase, ...], tuple[tuple[int, float], ...]]:
    """A job line's burst buffer, phases and intensities (all optional)."""
    bb = _number(obj.get("bb", 0.0), where, "bb")
    phases = []
    raw = obj.get("phases", [])
    if not isinstance(raw, list):
        raise TraceError(f"{where}: 'phases' must be a list of [kind, amount(, point)]")
    for k, ph in enumerate(raw):
        if not (isinstance(ph, list) and len(ph) in (2, 3) and ph[0] in _PHASES and
                (len(ph) == 2 or isinstance(ph[2], bool))):
            raise TraceError(f"{where}: phase {k} must be [kind, amount] or [kind, amount, true|false] with kind "
                             f"one of {', '.join(_PHASES)}, got {ph!r}")
        phases.append(Phase(_PHASES[ph[0]], _number(ph[1], where, f"phases[{k}] amount"),
                            bool(ph[2]) if len(ph) == 3 else False))
    pts = obj.get("intensity", [])
    if not isinstance(pts, list) or not all(isinstance(x, list) and len(x) == 2 and isinstance(x[0], int)
                                            and not isinstance(x[0], bool) and x[0] >= 1 for x in pts):
        raise TraceError(f"{where}: 'intensity' must be a list of [size, intensity]")
    inten = tuple(sorted((x[0], _number(x[1], where, "intensity")) for x in pts))
    if any(i > 1 for _, i in inten) or len({n for n, _ in inten}) != len(inten):
        raise TraceError(f"{where}: intensities must be in [0, 1], one per size")
    return bb, tuple(phases), inten


_FS_KEYS = ("fs_servers", "fs_min", "fs_max", "io_rate")


def _fs(obj: dict[str, Any], where: str) -> tuple[int, int, int, float] | None:
    """A job line's own file system ``(servers at start, fs_min, fs_max, io_rate)``, or None (module docstring)."""
    if not any(k in obj for k in _FS_KEYS):
        return None
    got: dict[str, int] = {}
    for key in _FS_KEYS[:3]:
        v = obj.get(key)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise TraceError(f"{where}: {key!r} must be an integer >= 1 (data servers), got {v!r}")
        got[key] = v
    rate = _number(obj.get("io_rate", 0.0), where, "io_rate")
    start = got.get("fs_servers", got.get("fs_min", 1))
    lo = got.get("fs_min", start)
    hi = got.get("fs_max", max(lo, start))
    if not lo <= start <= hi:
        raise TraceError(f"{where}: data servers must satisfy fs_min <= fs_servers <= fs_max, got {lo} <= {start} "
                         f"<= {hi}")
    return start, lo, hi, rate


def _row(obj: dict[str, Any], where: str) -> tuple:
    def num(key: str, default: Any = None) -> float:
        return _number(obj.get(key, default), where, key)

    def count(key: str, default: Any = None) -> int:
        v = obj.get(key, default)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise TraceError(f"{where}: {key!r} must be an integer >= 1, got {v!r}")
        return v

    for key in ("id", "submit", "run", "procs"):
        if key not in obj:
            raise TraceError(f"{where}: missing {key!r}")
    jid = obj["id"]
    if isinstance(jid, bool) or not isinstance(jid, int):
        raise TraceError(f"{where}: 'id' must be an integer, got {jid!r}")
    submit, run = num("submit"), num("run")
    est = max(num("estimate", run), run)
    p = count("procs")
    kind = obj.get("kind", "rigid")
    if kind not in _KINDS:
        raise TraceError(f"{where}: 'kind' must be rigid, moldable or malleable, got {kind!r}")
    lo, hi = (count("min", p), count("max", p)) if kind != "rigid" else (p, p)
    if not lo <= p <= hi:
        raise TraceError(f"{where}: sizes must satisfy min <= procs <= max, got {lo} <= {p} <= {hi}")
    try:
        serial, rho = speedup_params(str(obj.get("speedup", "linear")))
    except ValueError as e:
        raise TraceError(f"{where}: {e}") from None
    return (jid, submit, run, est, p, _KINDS[kind], lo, hi, serial, rho)
