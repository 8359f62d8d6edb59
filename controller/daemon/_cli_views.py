"""What the controller's commands print: the text tables (squeue, sinfo -N, sacct and scontrol habits) and the
``--json`` documents with their versioned schema. Pure functions of the rows the daemon or the state file gives."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from malleable.errors import ConfigError
from malleable.launch import compress_hostlist  # host lists print as Slurm prints them: node[1-3,7]

from ._timefmt import format_duration, format_elapsed, format_limit

__all__ = ["FIELDS", "JSON_SCHEMA", "STATE_CODES", "Field", "document", "exit_code", "format_lines", "fs_lines",
           "history_lines", "info_lines", "job_json", "measured_intensity", "node_lines", "parse_format",
           "queue_lines", "terminal_safe"]

JSON_SCHEMA = 1
"""Version of the ``--json`` documents (docs/controller.md, "JSON output"); raised when a field changes meaning
or goes away, not when one is added."""

FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")

STATE_CODES = {"PENDING": "PD", "STARTING": "CF", "RUNNING": "R", "COMPLETED": "CD", "FAILED": "F",
               "CANCELLED": "CA", "TIMEOUT": "TO"}
"""squeue's short state codes (CF, "configuring", is a job whose processes are being started)."""


_ESCAPES: dict[int, str] = {
    **{c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))},
    0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r",
    **{c: f"\\u{c:04x}" for c in (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))},
}

_UNSAFE = re.compile("[" + "".join(re.escape(chr(c)) for c in _ESCAPES) + "]")


def terminal_safe(text: str) -> str:
    """``text`` with every control character (C0, DEL, C1) and bidirectional override written as an escape
    (``\\x1b``, ``\\n``, ``\\u202e``): a job's name or path, chosen by whoever submitted it, cannot move the
    operator's cursor, forge a line or recolour the terminal. The ``--json`` documents keep the exact text."""
    return text.translate(_ESCAPES) if _UNSAFE.search(text) else text     # most lines have nothing to escape


def _safe(lines: list[str]) -> list[str]:
    return [terminal_safe(line) for line in lines]


# ------------------------------------------------------------------------------------------------ fields
def out_paths(j: dict[str, Any]) -> tuple[str, str]:
    """The files the job's output really goes to: the default ``malleable-ID.out`` in its working directory when
    no ``-o`` was given, and stderr with stdout when no ``-e`` was given."""
    out = j["out"] or f"malleable-{j['id']}.out"
    out = out if os.path.isabs(out) else os.path.join(j["cwd"], out)
    err = j["err"] or ""
    err = (err if os.path.isabs(err) else os.path.join(j["cwd"], err)) if err else out
    return out, err


def exit_code(j: dict[str, Any]) -> str | None:
    """sacct's ``ExitCode`` ``N:S`` (exit code : signal) of an ended job; None while it has not ended or if the
    code was lost. A shell's ``128+S`` (the job's processes were killed by signal S) reads as ``0:S``."""
    code = j.get("exit_code")
    if j["state"] not in FINAL or code is None:
        return None
    if 128 < code <= 128 + 64:
        return f"0:{code - 128}"
    return f"{code}:0"


def elapsed(j: dict[str, Any], now: float) -> float:
    """Seconds the job ran (so far)."""
    if not j["start"]:
        return 0.0
    return max(0.0, (j["end"] or now) - j["start"])


def job_json(j: dict[str, Any], now: float) -> dict[str, Any]:
    """One job in the documented ``--json`` form (schema :data:`JSON_SCHEMA`), from a daemon or state-file row."""
    out, err = out_paths(j)
    order = j.get("order")
    return {
        "id": j["id"], "name": j["name"], "user": j.get("user", ""), "state": j["state"],
        "malleable": j["malleable"], "nodes": j["nodes"], "min_nodes": j["min_nodes"], "max_nodes": j["max_nodes"],
        "size": j["size"], "hosts": list(j["hosts"]), "submit": j["submit"], "start": j["start"] or None,
        "end": j["end"] or None, "elapsed": elapsed(j, now), "time_limit": j["time_limit"],
        "exit_code": j["exit_code"], "exit": exit_code(j), "reason": j["reason"], "cmd": list(j["cmd"]),
        "cwd": j["cwd"], "out": out, "err": err, "speedup": j.get("speedup", ""),
        "constraint": j.get("constraint", ""), "progress": j.get("progress") or {},
        "resizing": {"kind": order["kind"], "target": list(order["target"]), "procs": order["procs"]}
        if order else None,
        "unresponsive": bool(j.get("unresponsive")), "expected_start": j.get("expected_start"),
        "bb": j.get("bb", 0.0), "fs_servers": j.get("fs_servers", 0), "stage_in": list(j.get("stage_in") or []),
        "stage_out": list(j.get("stage_out") or []), "fs": j.get("fs") or {},
        "fs_min": j.get("fs_min", 0), "fs_max": j.get("fs_max", 0), "io_rate": j.get("io_rate", 0.0),
        "fs_replicas": j.get("fs_replicas", 0) or 1,
        "io_intensity": j.get("io_intensity", 0.0), "io_measured": measured_intensity(j),
    }


def measured_intensity(j: dict[str, Any]) -> float | None:
    """The I/O intensity the job measured and reported (``"io"`` progress phase), or None."""
    from ._reports import intensity_of

    return intensity_of(j.get("progress") or {})


def _io_lines(j: dict[str, Any]) -> list[str]:
    """The declared and the measured I/O intensity (the io-aware policy reads the measured one once there is one;
    nothing when neither is there)."""
    declared, measured = j.get("io_intensity") or 0.0, measured_intensity(j)
    if not declared and measured is None:
        return []
    io = (j.get("progress") or {}).get("io") or {}
    how = "-" if measured is None else (f"{measured:.3f} (I/O {io.get('io_seconds', 0):.2f} s of "
                                        f"{io.get('seconds', 0):.2f} s, {io.get('bytes') or 0} bytes)")
    return [f"  IoIntensity={declared:g} (declared) Measured={how}"]


def document(kind: str, body: Any) -> dict[str, Any]:
    """A ``--json`` document: ``{"schema": N, KIND: BODY}`` (or the body's keys for a dict body)."""
    if isinstance(body, dict) and kind == "":
        return {"schema": JSON_SCHEMA, **body}
    return {"schema": JSON_SCHEMA, kind: body}


# ------------------------------------------------------------------------------------------------ tables
def _held(j: dict[str, Any]) -> bool:
    return (j.get("fs") or {}).get("phase") == "held"


def _short_state(j: dict[str, Any]) -> str:
    if _held(j):
        return "SO"  # ended, its stage-out held (Slurm's STAGE_OUT)
    if j["state"] == "RUNNING" and j.get("order"):
        return "RS"  # resizing
    return STATE_CODES.get(j["state"], j["state"])


def _size(j: dict[str, Any]) -> str:
    if j["malleable"]:
        return f"{j['size'] or '-'}[{j['min_nodes']}-{j['max_nodes']}]"
    return str(j["nodes"])


def _nodelist(j: dict[str, Any]) -> str:
    if j["state"] == "PENDING" or _held(j):
        return f"({j.get('reason') or 'Priority'})"
    hosts = compress_hostlist(j["hosts"])
    if j.get("order"):
        hosts += f" -> {len(j['order']['target'])}"
    if j.get("unresponsive"):
        hosts += " (unresponsive)"
    return hosts


def _fmt_t(t: float | None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t)) if t else "-"


def _kind(j: dict[str, Any]) -> str:
    return "malleable" if j["malleable"] else "rigid"


def queue_lines(rows: list[dict[str, Any]], now: float) -> list[str]:
    """squeue's table: running jobs, then the queue in its order."""
    out = [f"{'JOBID':>6} {'NAME':<14} {'USER':<8} {'KIND':<9} {'ST':<3} {'TIME':>9} {'NODES':>9}  NODELIST(REASON)"]
    zero = format_duration(0)
    for j in rows:
        t = format_duration(elapsed(j, now)) if j["start"] else zero     # a pending job has not run
        out.append(f"{j['id']:>6} {j['name'][:14]:<14} {j.get('user', '')[:8]:<8} {_kind(j):<9} {_short_state(j):<3} "
                   f"{t:>9} {_size(j):>9}  {_nodelist(j)}")
    return _safe(out)


def node_lines(rows: list[dict[str, Any]]) -> list[str]:
    """sinfo -N's table; the NODE column is as wide as the longest host name."""
    w = max([4, *(len(r["name"]) for r in rows)])
    out = [f"{'NODE':<{w}} {'STATE':<11} JOB"]
    for r in rows:
        job = "" if r["job"] is None else str(r["job"])
        if r["drain"] is not None:
            job += f" (checking: job {r['drain']})"
        if r.get("reason"):
            job += f" (down: {r['reason'][:100]})"
        out.append(f"{r['name']:<{w}} {r['state']:<11} {job.strip()}".rstrip())
    return _safe(out)


def history_lines(rows: list[dict[str, Any]], now: float) -> list[str]:
    """sacct's table: ``ExitCode`` as ``N:S``, ``Elapsed`` as ``HH:MM:SS``, newest job first."""
    out = [f"{'JOBID':>6} {'NAME':<14} {'USER':<8} {'KIND':<9} {'STATE':<10} {'EXITCODE':>8} {'ELAPSED':>10} "
           f"{'NODES':>9}  START"]
    for j in rows:
        el = format_elapsed(elapsed(j, now)) if j["start"] else "-"
        out.append(f"{j['id']:>6} {j['name'][:14]:<14} {j.get('user', '')[:8]:<8} {_kind(j):<9} {j['state']:<10} "
                   f"{exit_code(j) or '-':>8} {el:>10} {_size(j):>9}  {_fmt_t(j['start'])}")
    return _safe(out)


# ------------------------------------------------------------------------------------------------ --format
@dataclass(frozen=True)
class Field:
    """A column of ``history -o``: sacct's name for it, its default width and its text for a job."""

    name: str
    width: int
    text: Callable[[dict[str, Any], float], str]


FIELDS = {f.name.lower(): f for f in (
    Field("JobID", 12, lambda j, now: str(j["id"])),
    Field("JobName", 14, lambda j, now: j["name"]),
    Field("User", 9, lambda j, now: j.get("user", "")),
    Field("Kind", 9, lambda j, now: _kind(j)),
    Field("State", 10, lambda j, now: j["state"]),
    Field("ExitCode", 8, lambda j, now: exit_code(j) or ""),
    Field("Elapsed", 10, lambda j, now: format_elapsed(elapsed(j, now)) if j["start"] else ""),
    Field("Timelimit", 10, lambda j, now: format_limit(j["time_limit"])),
    Field("Submit", 19, lambda j, now: _fmt_t(j["submit"])),
    Field("Start", 19, lambda j, now: _fmt_t(j["start"]) if j["start"] else "Unknown"),
    Field("End", 19, lambda j, now: _fmt_t(j["end"]) if j["end"] else "Unknown"),
    Field("NNodes", 8, lambda j, now: str(j["size"] or j["nodes"])),
    Field("Size", 9, lambda j, now: _size(j)),
    Field("NodeList", 15, lambda j, now: compress_hostlist(j["hosts"]) or "None assigned"),
    Field("WorkDir", 20, lambda j, now: j["cwd"]),
    Field("Reason", 20, lambda j, now: j["reason"] or "None"),
)}
"""The fields ``history -o/--format`` takes, by lower-case name (names are matched in any case, as sacct's)."""


def parse_format(text: str) -> list[tuple[Field, int]]:
    """sacct's ``--format``: ``JobID,JobName%30,State`` -> the fields with their widths.

    Raises:
        ConfigError: an unknown field or a bad width, with the fields there are.
    """
    out = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        name, _, width = item.partition("%")
        f = FIELDS.get(name.lower())
        if f is None:
            names = " ".join(x.name for x in FIELDS.values())
            raise ConfigError(f"invalid field requested: {name!r} (fields: {names})")
        if width and not (width.isdigit() and int(width) > 0):
            raise ConfigError(f"bad width in {item!r}: want FIELD%N with N >= 1")
        out.append((f, int(width) if width else f.width))
    if not out:
        raise ConfigError("-o/--format names no field")
    return out


def format_lines(rows: list[dict[str, Any]], fields: list[tuple[Field, int]], now: float) -> list[str]:
    """sacct's table for ``--format``: right-aligned columns of the given widths under a dashed line; a value too
    long for its column is cut and ends with ``+``."""
    def cell(text: str, w: int) -> str:
        return (text if len(text) <= w else text[:w - 1] + "+").rjust(w)

    out = [" ".join(cell(f.name, w) for f, w in fields), " ".join("-" * w for _, w in fields)]
    out += [" ".join(cell(f.text(j, now), w) for f, w in fields) for j in rows]
    return _safe(out)


# ------------------------------------------------------------------------------------------------ info
_PROGRESS_COLS = ("kind", "procs", "iterations", "iter", "iter_seconds", "iter_time", "mtct", "mpi_seconds", "seconds")
_MAX_COLS = 7


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "-" if v is None else str(v)[:16]


def progress_lines(progress: dict[str, Any]) -> list[str]:
    """The runtime's last report per phase as a table (at most seven columns; ``--json`` has all of it)."""
    phases = [(p, d) for p, d in progress.items() if isinstance(d, dict)]
    if not phases:
        return []
    keys: list[str] = []
    for _, d in phases:
        keys += [k for k in d if k != "phase" and k not in keys]
    cols = [k for k in _PROGRESS_COLS if k in keys] + [k for k in keys if k not in _PROGRESS_COLS]
    more = len(cols) > _MAX_COLS
    cols = cols[:_MAX_COLS]
    table = [["PHASE", *(c.upper() for c in cols)]]
    table += [[p[:16], *(_cell(d.get(c)) for c in cols)] for p, d in phases]
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    text = [True] + [any(isinstance(d.get(c), str) for _, d in phases) for c in cols]   # left-aligned columns
    lines = ["  " + "  ".join(c.ljust(widths[i]) if text[i] else c.rjust(widths[i]) for i, c in enumerate(r))
             for r in table]
    lines = [line.rstrip() for line in lines]
    if more:
        lines[0] += "  (more with --json)"
    return lines


def fs_lines(j: dict[str, Any]) -> list[str]:
    """The job's burst buffer and file system: address, state, and each stage-in/out file done so far."""
    from ._protocol import format_size

    fs = j.get("fs") or {}
    hosts = f" Meta={fs['meta']} Data={compress_hostlist(fs.get('data', []))}" if fs.get("meta") else ""
    out = [f"  BurstBuffer={format_size(j['bb'])} FsServers={j.get('fs_servers') or 1} "
           f"FsReplicas={j.get('fs_replicas') or 1} "
           f"Fs={fs.get('address') or '-'} FsState={fs.get('phase') or 'waiting'}{hosts}"]
    if fs.get("error"):
        out.append(f"  FsError={fs['error']}")
    out += _growth_lines(j, fs)
    for direction in ("in", "out"):
        planned, done = j.get(f"stage_{direction}") or [], fs.get(f"stage_{direction}") or []
        if not planned:
            continue
        ok = sum(1 for *_, err in done if not err)
        out.append(f"  stage-{direction}: {ok}/{len(planned)} file(s) done, {sum(d[2] for d in done)} bytes")
        for src, dst, size, err in done:
            out.append(f"    {src} -> {dst}: " + (f"FAILED: {err}" if err else f"{size} bytes"))
    return out


def _growth_lines(j: dict[str, Any], fs: dict[str, Any]) -> list[str]:
    """How the file system grows with the job: its bounds, the requested and achieved rates, its servers and its
    last decisions (from the storage policy)."""
    rate = j.get("io_rate") or 0.0
    lo, hi = j.get("fs_min") or j.get("fs_servers") or 1, j.get("fs_max") or j.get("fs_servers") or 1
    if lo == hi and not rate:
        return []
    aio = fs.get("aio")
    window = ",".join(f"{x / 1e6:.1f}" for x in (fs.get("samples") or [])[-3:]) or "-"
    out = [f"  FsBounds={lo}..{hi} RIO={rate / 1e6:g}MB/s AIO={'-' if aio is None else f'{aio / 1e6:.1f}'}MB/s "
           f"Window=[{window}]" + (f" Reclaiming={fs['reclaiming']}" if fs.get("reclaiming") else "")]
    servers = fs.get("servers") or []
    if servers:
        out.append("  data servers: " + ", ".join(f"{sid}@{h}" for sid, h in servers))
    for d in fs.get("decisions") or []:
        what = {"add": f"add on {d['host']}", "remove": f"remove {d['sid']}@{d['host']}",
                "reclaim": f"take back {d['host']}"}.get(d["kind"], d["kind"])
        out.append(f"    {time.strftime('%H:%M:%S', time.localtime(d['t']))}  {what}: {d['reason']}"[:160])
    return out


def info_lines(job: dict[str, Any], steps: list[dict[str, Any]], events: list[dict[str, Any]], n_events: int,
               now: float) -> list[str]:
    """scontrol show job's record, then the progress table, the size history and the last ``n_events`` events."""
    j = job
    kind = f"malleable {j['min_nodes']}..{j['max_nodes']} (pref {j['nodes']})" if j["malleable"] else \
        f"rigid {j['nodes']}"
    code = exit_code(j)
    head = f"JobId={j['id']} Name={j['name']} User={j.get('user') or '-'} State={j['state']} Kind={kind}"
    out = [head + (f" ExitCode={code}" if code else "")]
    el = f" Elapsed={format_elapsed(elapsed(j, now))}" if j["start"] else ""
    out.append(f"  Submit={_fmt_t(j['submit'])} Start={_fmt_t(j['start'])} End={_fmt_t(j['end'])}{el} "
               f"TimeLimit={format_limit(j['time_limit'])} Reason={j['reason'] or '-'}")
    out.append(f"  Command={' '.join(j['cmd'])}")
    if j.get("dependency"):
        out.append(f"  Dependency={j['dependency']}")
    o, e = out_paths(j)
    out.append(f"  WorkDir={j['cwd']} StdOut={o}" + (f" StdErr={e}" if e != o else ""))
    if j.get("speedup") or j.get("constraint"):
        out.append(f"  Speedup={j.get('speedup') or '-'} Constraint={j.get('constraint') or '-'}")
    if j.get("bb"):
        out += fs_lines(j)
    out += _io_lines(j)
    prog = progress_lines(j.get("progress") or {})
    if prog:
        out.append("  progress (last report per phase):")
        out += ["  " + line for line in prog]
    out.append("  size history:")
    t0 = steps[0]["t"] if steps else 0.0
    for s in steps:
        extra = ""
        if s["decided"] is not None:
            extra = f"  (decided +{s['decided'] - t0:.2f} s, took {s['t'] - s['decided']:.2f} s"
            extra += f", runtime {s['seconds']:.3f} s)" if s["seconds"] is not None else ")"
        hosts = compress_hostlist(s["hosts"])
        out.append(f"    +{s['t'] - t0:8.2f} s  {s['kind']:<7} {s['size']:>3} nodes  {hosts}{extra}")
    if n_events > 0 and events:
        shown = events[-n_events:]
        out.append(f"  events (last {len(shown)} of {len(events)}):" if len(shown) < len(events) else "  events:")
        for ev in shown:
            stamp = time.strftime("%H:%M:%S", time.localtime(ev["t"]))
            out.append(f"    {stamp}  {ev['kind']:<8} {ev['text'][:100]}")
    return _safe(out)
