"""Parameter sweeps: traces x policies x parameter grids x seeds, run in parallel, gathered into one table.

A sweep file (TOML) names the axes; every combination is one run::

    traces = ["workloads/HPC2N-2002-2.1-cln-first20000.swf.gz", "synthetic:20000:256:0.9"]
    policies = ["fcfs", "easy", "conservative"]
    seeds = [0, 1]

    [grid]                      # optional: every combination of these values
    malleable = [0.0, 0.5]      # fraction of jobs made malleable (seeded)
    limit = [10000]             # first N records of each trace

A trace is an SWF file (a relative path is taken from the sweep file's folder) or ``synthetic:N:NODES:LOAD`` (seeded
by the run's seed). Grid keys: ``malleable``, ``limit``, ``speedup`` (a model name), ``failures`` (``"MTBF,DOWN"``
in seconds, seeded), ``submit_scale`` (multiplies submit times: 0.5 halves the inter-arrival times), ``tau``.

Runs go to local processes (all cores by default) or to a Dask cluster (``dask.distributed``); a finished run is
one row (its axes, then the summary metrics) appended to the output table (CSV or JSON by extension) at once, so a
sweep that stops is resumed by running it again: runs whose key is already in the table are not run again.
"""

from __future__ import annotations

import csv
import itertools
import json
import logging
import os
import tomllib
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

from malleable.errors import ConfigError, SimulationError

__all__ = ["GRID_KEYS", "METRICS", "load_sweep", "read_table", "run_one", "run_sweep"]

log = logging.getLogger(__name__)

GRID_KEYS = ("malleable", "limit", "speedup", "failures", "submit_scale", "tau")
"""Parameters a sweep's grid may vary."""

METRICS = ("jobs", "skipped", "machine", "mean_wait", "max_wait", "mean_bsld", "makespan", "utilization",
           "resizes", "resized_jobs", "passes", "sim_seconds")
"""Columns of a run's row after its axes (``sim_seconds`` is the only one that differs between identical runs)."""

AXES = ("key", "trace", "policy", "seed", *GRID_KEYS)


def load_sweep(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The runs of a sweep file, each a dict of its axes with a stable ``key``.

    Raises:
        ConfigError: unreadable or malformed file, unknown keys, an empty axis, or an unknown policy.
    """
    p = Path(path)
    try:
        spec = tomllib.loads(p.read_text())
    except OSError as e:
        raise ConfigError(f"{p}: cannot read the sweep file: {e.strerror or e}") from e
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{p}: not a valid sweep file: {e}") from e
    unknown = set(spec) - {"traces", "policies", "seeds", "grid"}
    if unknown:
        raise ConfigError(f"{p}: unknown sweep keys {sorted(unknown)} (traces, policies, seeds, grid)")
    grid = spec.get("grid", {})
    if not isinstance(grid, dict) or set(grid) - set(GRID_KEYS):
        raise ConfigError(f"{p}: grid keys must be among {', '.join(GRID_KEYS)}")
    axes: dict[str, list] = {"trace": spec.get("traces"), "policy": spec.get("policies"),
                             "seed": spec.get("seeds", [0])}
    for k, v in grid.items():
        axes[k] = v if isinstance(v, list) else [v]
    for k, v in axes.items():
        if not isinstance(v, list) or not v:
            raise ConfigError(f"{p}: {k!r} must be a non-empty list")
    from malleable.controller.sched import get_policy
    for name in axes["policy"]:
        get_policy(str(name))                   # fails now, with the known names, not in a worker
    traces = [_trace_path(str(t), p.parent) for t in axes["trace"]]
    axes["trace"] = traces
    names = list(axes)
    runs = []
    for values in itertools.product(*(axes[k] for k in names)):
        run = {k: None for k in GRID_KEYS}
        run.update(zip(names, values, strict=True))
        run["key"] = run_key(run)
        runs.append(run)
    return runs


def _trace_path(t: str, base: Path) -> str:
    if t.startswith("synthetic:"):
        parts = t.split(":")
        try:
            n, machine, load = int(parts[1]), int(parts[2]), float(parts[3])
        except (IndexError, ValueError):
            raise ConfigError(f"bad synthetic trace {t!r}: want synthetic:N:NODES:LOAD") from None
        if n < 1 or machine < 1 or not load > 0 or len(parts) != 4:
            raise ConfigError(f"bad synthetic trace {t!r}: want synthetic:N:NODES:LOAD") from None
        return t
    q = Path(t)
    q = q if q.is_absolute() else base / q
    if not q.exists():
        raise ConfigError(f"trace not found: {q}")
    return str(q)


def run_key(run: dict[str, Any]) -> str:
    """The run's identity in the table: its axes, in a fixed order."""
    return json.dumps([run.get(k) for k in AXES[1:]], separators=(",", ":"))


def run_one(run: dict[str, Any]) -> dict[str, Any]:
    """Simulate one run of a sweep and return its row (its axes and the summary metrics)."""
    from malleable.controller.sched import SPEEDUPS, get_policy

    from ._engine import Simulator
    from ._metrics import summary
    from ._swf import read_swf
    from ._workload import synthetic

    seed = int(run["seed"])
    t = run["trace"]
    if t.startswith("synthetic:"):
        _, n, machine, load = t.split(":")
        w = synthetic(int(n), machine=int(machine), load=float(load), seed=seed)
        if run.get("limit"):
            w = w.head(int(run["limit"]))
    else:
        w = read_swf(t, limit=int(run["limit"]) if run.get("limit") else None)
    if run.get("submit_scale") not in (None, 1, 1.0):
        w.submit = w.submit * float(run["submit_scale"])
    if run.get("malleable"):
        w = w.with_malleable(float(run["malleable"]), seed=seed)
    extra: dict[str, Any] = {}
    if run.get("speedup"):
        if run["speedup"] not in SPEEDUPS:
            raise ConfigError(f"unknown speedup model {run['speedup']!r}; known: {', '.join(SPEEDUPS)}")
        extra["speedup"] = SPEEDUPS[run["speedup"]]
    if run.get("failures"):
        from malleable.controller.experiments import failure_plan
        mtbf, down = (float(x) for x in str(run["failures"]).split(","))
        extra["failures"] = failure_plan(w.machine, float(w.submit[0]), float(w.submit[-1]), mtbf, down, seed)
    result = Simulator(w, get_policy(run["policy"]), name=run["policy"], **extra).run()
    s = summary(result, float(run["tau"]) if run.get("tau") else 10.0)
    row = {k: run.get(k) for k in AXES}
    row.update({k: s[k] for k in METRICS if k in s})
    row["machine"] = w.machine
    row["passes"] = result.passes
    return row


def read_table(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The rows of a sweep's output table (CSV or JSON); none if it does not exist yet."""
    p = Path(path)
    if not p.exists():
        return []
    try:
        if p.suffix == ".json":
            data = json.loads(p.read_text() or "[]")
            if not isinstance(data, list):
                raise ConfigError(f"{p}: not a sweep table (a JSON list of rows)")
            return data
        with open(p, newline="") as f:
            return [_typed(r) for r in csv.DictReader(f)]
    except (OSError, json.JSONDecodeError, csv.Error, UnicodeDecodeError) as e:
        raise ConfigError(f"{p}: cannot read the sweep table: {e}") from e


def _typed(row: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in row.items():
        if v == "":
            out[k] = None
            continue
        try:
            out[k] = int(v)
        except ValueError:
            try:
                out[k] = float(v)
            except ValueError:
                out[k] = v
    return out


class _Table:
    """The output table, written as rows arrive (CSV: appended; JSON: rewritten)."""

    def __init__(self, path: Path, rows: list[dict[str, Any]]) -> None:
        self.path = path
        self.rows = rows
        self.fields = list(AXES) + list(METRICS)

    def add(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        if self.path.suffix == ".json":
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_text(json.dumps(self.rows, indent=1) + "\n")
            tmp.replace(self.path)
            return
        new = not self.path.exists() or self.path.stat().st_size == 0
        with open(self.path, "a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=self.fields, extrasaction="ignore")
            if new:
                w.writeheader()
            w.writerow({k: "" if row.get(k) is None else row.get(k) for k in self.fields})


def run_sweep(runs: list[dict[str, Any]], out: str | os.PathLike[str], *, workers: int | None = None,
              dask: str | None = None, progress: bool = False,
              runner: Callable[[dict[str, Any]], dict[str, Any]] = run_one) -> list[dict[str, Any]]:
    """Run every run not yet in ``out`` and append its row there; returns the whole table.

    Args:
        runs: from :func:`load_sweep`.
        out: the table (``.csv`` or ``.json``); its existing rows are kept and their runs skipped.
        workers: local processes (default: all cores); 1 runs in this process.
        dask: address of a Dask scheduler (``tcp://host:8786``): the runs go there instead.
        progress: show a progress bar (tqdm, on stderr).
        runner: the function that runs one run (must be importable by the workers).

    Raises:
        ConfigError: an output table that cannot be read, or of another format than CSV/JSON.
        SimulationError: a run failed (the rows of the runs finished before are kept).
    """
    path = Path(out)
    if path.suffix not in (".csv", ".json"):
        raise ConfigError(f"sweep output must end in .csv or .json, got {path}")
    table = _Table(path, read_table(path))
    done = {r.get("key") for r in table.rows}
    todo = [r for r in runs if r["key"] not in done]
    log.info("sweep: %d runs, %d already in %s, %d to run", len(runs), len(runs) - len(todo), path, len(todo))
    bar = None
    if progress and todo:
        from tqdm import tqdm
        bar = tqdm(total=len(todo), unit="run", desc="sweep")
    try:
        for row in _results(todo, workers, dask, runner):
            table.add(row)
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return table.rows


def _results(todo: list[dict[str, Any]], workers: int | None, dask: str | None,
             runner: Callable[[dict[str, Any]], dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Rows of the runs as they finish, from this process, local processes or a Dask cluster."""
    if not todo:
        return
    if dask:
        yield from _dask_results(todo, dask, runner)
        return
    n = workers or os.cpu_count() or 1
    if n <= 1 or len(todo) == 1:
        for r in todo:
            yield _checked(runner, r)
        return
    with ProcessPoolExecutor(max_workers=min(n, len(todo))) as pool:
        pending = {pool.submit(runner, r): r for r in todo}
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for f in finished:
                r = pending.pop(f)
                try:
                    yield f.result()
                except Exception as e:
                    for g in pending:
                        g.cancel()
                    raise SimulationError(f"run {r['key']} failed: {e}") from e


def _checked(runner: Callable[[dict[str, Any]], dict[str, Any]], r: dict[str, Any]) -> dict[str, Any]:
    try:
        return runner(r)
    except Exception as e:
        raise SimulationError(f"run {r['key']} failed: {e}") from e


def _dask_results(todo: list[dict[str, Any]], address: str,
                  runner: Callable[[dict[str, Any]], dict[str, Any]]) -> Iterable[dict[str, Any]]:
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise ConfigError("--dask needs the 'distributed' package: pip install 'malleable[dask]'") from None
    try:
        client = Client(address, timeout=30)
    except (OSError, TimeoutError) as e:
        raise ConfigError(f"cannot reach the Dask scheduler at {address}: {e}") from e
    try:
        futures = {client.submit(runner, r, pure=False): r for r in todo}
        for f in as_completed(futures):
            r = futures[f]
            try:
                yield f.result()
            except Exception as e:
                client.cancel(list(futures))
                raise SimulationError(f"run {r['key']} failed: {e}") from e
    finally:
        client.close()

