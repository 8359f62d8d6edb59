"""The watcher behind ``malleable fs watch``: samples the achieved I/O rate (AIO) of the data servers,
applies the pure rule of :mod:`._rule` and carries out its decisions (expand onto pool hosts, shrink the
servers that hold the fewest blocks), logging every decision with its inputs.

AIO is measured from the servers' byte counters: the bytes read and written by all data servers between
two polls divided by the time between them (MB/s). A poll with no I/O records no sample (an idle file
system is neither too slow nor too fast). RIO is the rule's configured rate, or else the sum of the rates
declared by clients (``FileSystem.declare_rio``).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from malleable.adhocfs._admin import expand_fs, shrink_fs
from malleable.adhocfs._deploy import MetaClient
from malleable.adhocfs._rule import RuleConfig, ScaleDecision, Scaling, decide

__all__ = ["Watcher"]

log = logging.getLogger(__name__)


@dataclass
class Watcher:
    """Runs the scaling rule against one file system.

    Attributes:
        addr: metadata server address.
        cfg: rule parameters (``cfg.rio`` 0 means: use the rates declared by clients).
        pool: hosts that may receive new data servers (used round robin, least-used first).
        interval: seconds between samples.
        mode: redistribution mode of shrinks (partial or total).
        rate: bandwidth cap of shrink moves (MB/s, 0 unlimited).
        dir: backing directory root for new servers.
        state: directory for the logs of new servers.
        act: carry decisions out (False: only log them).
        clock: time source (monotonic seconds).
    """

    addr: str
    cfg: RuleConfig
    pool: Sequence[str] = ()
    interval: float = 1.0
    mode: str = "partial"
    rate: float = 0.0
    dir: str | None = None
    state: str | None = None
    act: bool = True
    token: bytes | None = None
    clock: Callable[[], float] = time.monotonic
    samples: list[float] = field(default_factory=list)
    last_change: float | None = None
    since_change: int = 0
    procs: dict[str, Any] = field(default_factory=dict)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    _prev: tuple[float, dict[int, int]] | None = None

    def _snapshot(self) -> tuple[list[dict[str, Any]], float]:
        with MetaClient(self.addr, self.token) as mc:
            st = mc.status()
        return st.servers, st.rio

    def sample(self, servers: list[dict[str, Any]], now: float) -> float | None:
        """Record the AIO since the previous call (MB/s), or None when there was no I/O."""
        counts = {
            s["sid"]: s.get("read_bytes", 0) + s.get("write_bytes", 0) for s in servers if s.get("reachable")
        }
        prev, self._prev = self._prev, (now, counts)
        if prev is None or now <= prev[0]:
            return None
        delta = sum(max(0, c - prev[1][sid]) for sid, c in counts.items() if sid in prev[1])
        if delta <= 0:
            return None
        aio = delta / (now - prev[0]) / 1e6
        self.samples.append(aio)
        self.since_change += 1
        return aio

    def step(self) -> ScaleDecision:
        """Sample, decide, act; returns the decision (also logged and kept in ``decisions``)."""
        now = self.clock()
        servers, declared = self._snapshot()
        aio = self.sample(servers, now)
        active = [s for s in servers if s["state"] == "active"]
        cfg = self.cfg if self.cfg.rio > 0 else dataclasses.replace(self.cfg, rio=declared)
        if cfg.rio <= 0:
            d = ScaleDecision(Scaling.KEEP, 0, None, "no RIO configured or declared")
        else:
            d = decide(self.samples, len(active), cfg, now, self.last_change, self.since_change)
        record = {
            "t": now,
            "aio": aio,
            "servers": len(active),
            "rio": cfg.rio,
            "action": d.action.value,
            "count": d.count,
            "avg_d": d.avg_d,
            "reason": d.reason,
        }
        log.info(
            "rule: %s x%d with %d servers, AIO %s MB/s: %s",
            d.action.value,
            d.count,
            len(active),
            "-" if aio is None else f"{aio:.1f}",
            d.reason,
        )
        if self.act and d.action is not Scaling.KEEP:
            record["result"] = self._carry_out(d, active)
            self.last_change = self.clock()
            self.since_change = 0
        self.decisions.append(record)
        return d

    def _carry_out(self, d: ScaleDecision, active: list[dict[str, Any]]) -> dict[str, Any]:
        if d.action is Scaling.EXPAND:
            used = [s["host"] for s in active]
            pool = sorted(self.pool, key=lambda h: (used.count(h), list(self.pool).index(h)))
            if not pool:
                log.warning("expand wanted but no pool hosts were given")
                return {"error": "no pool hosts"}
            hosts = [pool[i % len(pool)] for i in range(d.count)]
            servers, procs, info = expand_fs(
                self.addr, hosts, dir=self.dir, state=self.state, token=self.token
            )
            self.procs.update(procs)
            return {"added": sorted(servers), **info}
        victims = [s["sid"] for s in sorted(active, key=lambda s: (s.get("blocks", 0), -s["sid"]))][: d.count]
        info = shrink_fs(self.addr, victims, self.mode, self.rate, token=self.token)
        return {"removed": victims, **info}

    def run(self, duration: float | None = None, steps: int | None = None) -> list[dict[str, Any]]:
        """Step every ``interval`` seconds for ``duration`` seconds or ``steps`` steps (else forever)."""
        end = None if duration is None else self.clock() + duration
        n = 0
        while (end is None or self.clock() < end) and (steps is None or n < steps):
            t0 = self.clock()
            self.step()
            n += 1
            time.sleep(max(0.0, self.interval - (self.clock() - t0)))
        return self.decisions
