"""``malleable submit`` with sbatch's habits: ``-N``, ``-n/--ntasks``, ``--ntasks-per-node``, ``--wrap``, and
``#MALLEABLE`` directives at the top of the script (read as sbatch reads ``#SBATCH``: options in the comment
lines before the first command; the command line wins). Checked here, so a bad request fails with one line
before anything reaches the daemon."""

from __future__ import annotations

import argparse
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from malleable.errors import ConfigError

from ._timefmt import parse_limit

__all__ = ["DIRECTIVE", "add_submit_options", "check_command", "find_script", "read_directives", "resolve"]

DIRECTIVE = "#MALLEABLE"
MAX_SCRIPT_LINES = 1000   # directives are looked for in the script's first lines only, like sbatch's header

# Every submit option and its value when neither the command line nor a directive gives it (the parsers use
# argparse.SUPPRESS, so what they return is exactly what was given).
DEFAULTS: dict[str, Any] = {
    "nodes": None, "ntasks": None, "ntasks_per_node": None, "min": None, "max": None, "pref": None, "time": None,
    "output": "", "error": "", "job_name": "", "wrap": None, "speedup": "", "constraint": "", "parsable": False,
    "bb": None, "fs_servers": None, "stage_in": [], "stage_out": [], "fs_min": None, "fs_max": None, "io_rate": None,
    "fs_replicas": None,
    "io_intensity": None, "dependency": None,
}


def add_submit_options(p: argparse.ArgumentParser) -> None:
    """The job options (the same on the command line and in ``#MALLEABLE`` lines); no defaults here."""
    p.add_argument("-N", "--nodes", type=int, help="rigid job on exactly this many nodes")
    p.add_argument("-n", "--ntasks", type=int,
                   help="rigid job of this many processes: ntasks / slots-per-host nodes (must fill whole hosts)")
    p.add_argument("--ntasks-per-node", type=int, help="processes per node: must equal the controller's --slots")
    p.add_argument("--min", type=int, help="malleable: fewest nodes")
    p.add_argument("--max", type=int, help="malleable: most nodes")
    p.add_argument("--pref", type=int, help="malleable: preferred start size (default min)")
    p.add_argument("-t", "--time", help="time limit: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S; 0 or UNLIMITED: none")
    p.add_argument("-o", "--output", help="stdout file (%%j = job id; default malleable-%%j.out)")
    p.add_argument("-e", "--error", help="stderr file (default: with stdout)")
    p.add_argument("-J", "--job-name", help="job name")
    p.add_argument("--wrap", metavar="CMD", help="run the shell command CMD (sh -c CMD) instead of a script")
    p.add_argument("--speedup", metavar="MODEL",
                   help="how the job speeds up with nodes, for the policy: linear, amdahl:F (serial fraction F) "
                        "or rho:R (scalability R); F and R between 0 and 1")
    p.add_argument("--constraint", choices=("pof2", "even", "odd"),
                   help="malleable: node counts the job may take (powers of two, even or odd)")
    p.add_argument("--parsable", action="store_true", help="print only the job id")
    p.add_argument("--bb", metavar="SIZE",
                   help="burst buffer for the run, e.g. 2G: the job gets a file system of its own (address in "
                        "MALLEABLE_FS) and waits, reason (BurstBufferResources), while that much is not free")
    p.add_argument("--fs-servers", type=int, metavar="N", help="data servers of the job's file system (default 1)")
    p.add_argument("--fs-min", type=int, metavar="A",
                   help="fewest data servers it may shrink to (default --fs-servers)")
    p.add_argument("--fs-max", type=int, metavar="B", help="most data servers it may grow to (default --fs-servers)")
    p.add_argument("--fs-replicas", type=int, metavar="R",
                   help="copies of each block in the job's file system (default 1; at most --fs-max): with 2, a "
                        "data server that dies loses nothing")
    p.add_argument("--io-rate", metavar="BYTES_S",
                   help="the I/O rate the job wants from its file system (RIO; 200M = 200 MiB/s); it grows for it")
    p.add_argument("--io-intensity", type=float, metavar="I",
                   help="the job's I/O time over its run time, 0 to 1, for the io-aware policy (default 0; what "
                        "the job measures with malleable.runtime.io_phase replaces it while it runs)")
    p.add_argument("-d", "--dependency", metavar="TYPE:ID[:ID...]",
                   help="wait for other jobs, as sbatch: afterok:ID[:ID...] (they completed; if one did not, this "
                        "job is cancelled, reason DependencyNeverSatisfied), afterany:ID[:ID...] (they ended); "
                        "several joined by ',' must all hold")
    p.add_argument("--stage-in", action="append", metavar="LOCAL:/FS/PATH",
                   help="copy a local file into the job's file system before it starts (repeatable)")
    p.add_argument("--stage-out", action="append", metavar="/FS/PATH:LOCAL",
                   help="copy a file of the job's file system out after it ends, also when it failed (repeatable)")


class _DirectiveParser(argparse.ArgumentParser):
    """The submit options of ``#MALLEABLE`` lines; errors are raised, not printed with a usage."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(message)


def find_script(cmd: list[str]) -> Path | None:
    """The script of the command, where directives are read: the first of its first two words that is a file
    starting with ``#`` (``./job.sh``, ``sh job.sh``, ``python job.py``; a program like ``/usr/bin/python3`` is
    not a script)."""
    for word in cmd[:2]:
        p = Path(word)
        try:
            with open(p, "rb") as f:
                if p.is_file() and f.read(1) == b"#":
                    return p
        except OSError:
            continue
    return None


_INTERPRETER = re.compile(r"(sh|bash|dash|ksh|zsh|python[0-9.]*)$")


def check_command(cmd: list[str]) -> None:
    """Refuse at once, as sbatch does, a command whose script is missing or unreadable: the program (a path must
    be a readable file, a bare name must be on PATH), and the script an interpreter is given (``sh job.sh``,
    ``python job.py``: its first word that is not an option).

    Raises:
        ConfigError: naming the file and why.
    """
    def readable(path: str) -> None:
        try:
            with open(path, "rb"):
                pass
        except IsADirectoryError:
            raise ConfigError(f"{path} is a directory, not a script") from None
        except OSError as e:
            raise ConfigError(f"cannot open the script {path}: {e.strerror}") from None

    prog = cmd[0]
    if "/" in prog or os.path.exists(prog):
        readable(prog)
    elif shutil.which(prog) is None:
        raise ConfigError(f"{prog}: no such file, and no such command on PATH")
    if _INTERPRETER.match(os.path.basename(prog)):
        for word in cmd[1:]:
            if word in ("-c", "-m"):         # code or a module, not a script
                break
            if not word.startswith("-"):
                readable(word)
                break


def read_directives(script: Path) -> dict[str, Any]:
    """The options of the ``#MALLEABLE`` lines at the top of ``script`` (before its first line that is neither
    blank nor a comment; the ``#!`` line is skipped).

    Raises:
        ConfigError: an unreadable script, or a directive with a bad option (``FILE:LINE: ...``).
    """
    import shlex

    parser = _DirectiveParser(prog=DIRECTIVE, add_help=False, argument_default=argparse.SUPPRESS)
    add_submit_options(parser)
    ns = argparse.Namespace()
    try:
        with open(script, encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                s = line.strip()
                if lineno > MAX_SCRIPT_LINES or (s and not s.startswith("#")):
                    break
                if not s.startswith(DIRECTIVE) or not s[len(DIRECTIVE):len(DIRECTIVE) + 1].isspace():
                    continue
                try:
                    parser.parse_args(shlex.split(s[len(DIRECTIVE):]), namespace=ns)
                except (ConfigError, ValueError) as e:
                    raise ConfigError(f"{script}:{lineno}: {s}: {e}") from None
    except OSError as e:
        raise ConfigError(f"cannot read the script {script}: {e.strerror}") from None
    return vars(ns)


def _fits(n: int, constraint: str) -> bool:
    return {"pof2": n & (n - 1) == 0, "even": n % 2 == 0, "odd": n % 2 == 1}[constraint]


def _rigid_nodes(o: dict[str, Any], slots: Callable[[], int]) -> int:
    """Nodes of a rigid job from ``-N``, ``-n`` and ``--ntasks-per-node`` (Slurm's meaning; a host runs the
    controller's ``--slots`` processes, so the task counts must fill whole hosts)."""
    n_nodes, ntasks, per = o["nodes"], o["ntasks"], o["ntasks_per_node"]
    if ntasks is None and per is None:
        nodes = 1 if n_nodes is None else n_nodes
        if nodes < 1:
            raise ConfigError(f"-N must be >= 1, got {nodes}")
        return nodes
    s = slots()
    if per is not None and per != s:
        raise ConfigError(f"--ntasks-per-node {per}: this controller runs {s} process(es) on every host (its --slots)")
    if ntasks is None:
        return 1 if n_nodes is None else n_nodes
    if ntasks < 1:
        raise ConfigError(f"-n must be >= 1, got {ntasks}")
    if ntasks % s:
        lo, hi = ntasks // s * s, (ntasks // s + 1) * s
        use = f"-n {lo} or -n {hi}" if lo else f"-n {hi}"
        raise ConfigError(f"-n {ntasks} does not fill whole hosts: this controller runs {s} processes per host; "
                          f"use {use}")
    if n_nodes is not None and n_nodes * s != ntasks:
        raise ConfigError(f"-N {n_nodes} and -n {ntasks} disagree: {n_nodes} host(s) run {n_nodes * s} processes "
                          f"({s} per host)")
    return ntasks // s


def resolve(given: dict[str, Any], slots: Callable[[], int]) -> tuple[dict[str, Any], bool]:
    """Merge the defaults, the script's directives and the command line (``given``, which wins), and check the
    request: the keyword arguments of :meth:`~._client.Client.submit`, and whether ``--parsable`` was asked.
    ``slots()`` asks the daemon for its processes per host (only ``-n``/``--ntasks-per-node`` need it).

    Raises:
        ConfigError: a bad or contradictory option, with one line saying which.
    """
    cmd = list(given.get("cmd") or [])
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    wrap = given.get("wrap")
    if wrap is not None and cmd:
        raise ConfigError("give either --wrap CMD or a command, not both")
    script = find_script(cmd) if wrap is None else None
    directives = read_directives(script) if script is not None else {}
    o = {**DEFAULTS, **directives, **{k: v for k, v in given.items() if k in DEFAULTS}}
    if o["wrap"] is not None and wrap is None and cmd:
        raise ConfigError(f"{script}: --wrap in a script's directives makes no sense")
    if wrap is not None:
        if not wrap.strip():
            raise ConfigError("--wrap needs a command")
        cmd = ["sh", "-c", wrap]
    if not cmd:
        raise ConfigError("no command: malleable submit [options] SCRIPT [ARGS] | --wrap CMD | -- CMD ...")
    if wrap is None:
        check_command(cmd)
    if script is not None and script == Path(cmd[0]):
        if not os.access(script, os.X_OK):
            raise ConfigError(f"{cmd[0]} is not executable: chmod +x {cmd[0]}, or name its interpreter "
                              f"(malleable submit sh {cmd[0]})")
        cmd[0] = os.path.abspath(cmd[0])     # mpiexec looks a bare name up in PATH, sbatch takes it from here
    malleable = o["min"] is not None or o["max"] is not None
    if malleable:
        if o["nodes"] is not None or o["ntasks"] is not None or o["ntasks_per_node"] is not None:
            raise ConfigError("give either -N/-n (rigid) or --min/--max (malleable), not both")
        if o["min"] is None or o["max"] is None:
            raise ConfigError("a malleable job needs both --min and --max")
        lo, hi = o["min"], o["max"]
        pref = o["pref"] if o["pref"] is not None else lo
        if lo < 1 or not lo <= pref <= hi:
            raise ConfigError(f"need 1 <= --min <= --pref <= --max, got {lo}, {pref}, {hi}")
    else:
        if o["pref"] is not None:
            raise ConfigError("--pref is for malleable jobs (with --min/--max)")
        if o["constraint"]:
            raise ConfigError("--constraint is for malleable jobs (with --min/--max)")
        pref = lo = hi = _rigid_nodes(o, slots)
    constraint = o["constraint"] or ""
    if constraint:
        valid = [n for n in range(lo, hi + 1) if _fits(n, constraint)]
        if not valid:
            raise ConfigError(f"--constraint {constraint}: no node count between --min {lo} and --max {hi} is "
                              f"{constraint}")
        if o["pref"] is None:
            pref = valid[0]
        elif not _fits(pref, constraint):
            raise ConfigError(f"--pref {pref} is not {constraint} (--constraint {constraint})")
    speedup = ""
    if o["speedup"]:
        from ._protocol import parse_speedup

        try:
            speedup = parse_speedup(o["speedup"])
        except ValueError as e:
            raise ConfigError(str(e)) from None
    storage = _storage(o)
    io = o["io_intensity"]
    if io is not None and not 0.0 <= io <= 1.0:       # also rejects nan
        raise ConfigError(f"--io-intensity must be between 0 and 1, got {io:g}")
    dependency = ""
    if o["dependency"]:
        from malleable.controller.sched._depend import format_dependency, parse_dependency

        try:
            dependency = format_dependency(parse_dependency(o["dependency"]))
        except ValueError as e:
            raise ConfigError(str(e)) from None
    limit = parse_limit(o["time"]) if o["time"] else None        # None: the controller's default; 0: none
    out = os.path.abspath(o["output"]) if o["output"] else ""
    err = os.path.abspath(o["error"]) if o["error"] else ""
    name = o["job_name"] or ("wrap" if wrap is not None else "")          # sbatch names --wrap jobs "wrap"
    return ({"cmd": cmd, "nodes": pref, "min_nodes": lo, "max_nodes": hi, "malleable": malleable,
             "time_limit": limit or 0.0, "unlimited": limit == 0.0, "name": name, "out": out, "err": err,
             "speedup": speedup, "constraint": constraint, **storage, **({"io_intensity": io} if io else {}),
             **({"dependency": dependency} if dependency else {})},
            bool(o["parsable"]))


def _storage(o: dict[str, Any]) -> dict[str, Any]:
    """The burst-buffer request: ``--bb`` in bytes, the servers, the stage-in/out pairs as ``SRC:DST`` with the
    local side made absolute (the daemon runs elsewhere)."""
    from malleable.adhocfs._cli import parse_size

    from ._protocol import check_fs_bounds, check_fs_replicas, parse_stage

    if o["bb"] is None:
        if any(o[k] is not None for k in ("fs_servers", "fs_min", "fs_max", "io_rate", "fs_replicas")) \
                or o["stage_in"] or o["stage_out"]:
            raise ConfigError("--fs-servers, --fs-min, --fs-max, --io-rate, --fs-replicas, --stage-in and "
                              "--stage-out need a burst buffer: add --bb SIZE")
        return {}
    try:
        bb = parse_size(o["bb"])
    except argparse.ArgumentTypeError as e:
        raise ConfigError(f"--bb: {e}") from None
    if bb <= 0:
        raise ConfigError(f"--bb must be more than 0 bytes, got {o['bb']!r}")
    servers = (o["fs_min"] or 1) if o["fs_servers"] is None else o["fs_servers"]
    lo = servers if o["fs_min"] is None else o["fs_min"]
    hi = servers if o["fs_max"] is None else o["fs_max"]
    replicas = 1 if o["fs_replicas"] is None else o["fs_replicas"]
    why = check_fs_bounds(servers, lo, hi) or ("" if lo and hi else "--fs-min and --fs-max must be at least 1") \
        or check_fs_replicas(replicas, hi)
    if why:
        raise ConfigError(why)
    rate = 0.0
    if o["io_rate"] is not None:
        try:
            rate = float(parse_size(o["io_rate"]))
        except argparse.ArgumentTypeError as e:
            raise ConfigError(f"--io-rate: {e}") from None
        if rate <= 0:
            raise ConfigError(f"--io-rate must be more than 0 bytes/s, got {o['io_rate']!r}")
    stages: dict[str, list[str]] = {"in": [], "out": []}
    for direction in ("in", "out"):
        for spec in o[f"stage_{direction}"]:
            try:
                src, dst = parse_stage(spec, direction)
            except ValueError as e:
                raise ConfigError(str(e)) from None
            if direction == "in":
                src = os.path.abspath(src)
            else:
                dst = os.path.abspath(dst)
            stages[direction].append(f"{src}:{dst}")
    return {"bb": float(bb), "fs_servers": servers, "stage_in": stages["in"], "stage_out": stages["out"],
            "fs_min": lo, "fs_max": hi, "io_rate": rate, "fs_replicas": replicas}
