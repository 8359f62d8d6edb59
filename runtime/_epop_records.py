"""Records of the EPOP driver: per-phase measurements, adaptations, and the result of a run."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["AdaptRecord", "PhaseStats", "RunResult", "mean_profile"]


def mean_profile(per_rank: list[dict[str, list[float]]]) -> tuple[tuple[str, float, float], ...]:
    """Per MPI call, the mean over ranks of its time and count: ``(name, seconds, calls)``, longest first."""
    names = sorted({n for calls in per_rank for n in calls})
    k = max(1, len(per_rank))
    rows = [(n, sum(c.get(n, [0.0, 0])[0] for c in per_rank) / k, sum(c.get(n, [0.0, 0])[1] for c in per_rank) / k)
            for n in names]
    return tuple(sorted(rows, key=lambda r: -r[1]))


@dataclass(frozen=True, slots=True)
class PhaseStats:
    """Measurements of one phase run at one process count (a segment between adaptations).

    ``seconds`` is the slowest rank's phase time, ``mpi_seconds`` the mean MPI time and ``mtct``
    the mean of the per-rank MPI-time / phase-time ratios; ``profile`` has, per MPI call made through
    ``ctx.comm`` (or ``ctx.mpi(name)``), its mean time and call count per rank.
    """

    phase: str
    kind: str
    visit: int
    procs: int
    first_iter: int
    iterations: int
    seconds: float
    mpi_seconds: float
    mtct: float
    profile: tuple[tuple[str, float, float], ...] = ()

    @property
    def iter_seconds(self) -> float:
        """Mean time of one iteration (the phase time for init and rigid phases)."""
        return self.seconds / max(1, self.iterations)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (with ``iter_seconds``; the profile as ``{call: {"seconds", "calls"}}``)."""
        d = asdict(self)
        d["profile"] = {n: {"seconds": t, "calls": c} for n, t, c in self.profile}
        return dict(d, iter_seconds=self.iter_seconds)


@dataclass(frozen=True, slots=True)
class AdaptRecord:
    """One adaptation as the driver saw it: where it happened and what it cost.

    ``seconds`` is world rank 0's time from the pending probe until the rebuilt world was ready
    (adaptation blocks and ``setup`` included); ``runtime_seconds`` the runtime's begin-to-commit time.
    """

    kind: str
    old_size: int
    new_size: int
    phase: str
    iteration: int
    probe: int
    seconds: float
    runtime_seconds: float

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


@dataclass(frozen=True, slots=True)
class RunResult:
    """What :func:`run_program` returns on every process.

    ``left`` is True on processes released by a shrink (they must return from the application);
    ``rank``/``size`` are those of the final world (-1/0 on processes that left).
    """

    left: bool
    data: Any
    stats: tuple[PhaseStats, ...]
    adaptations: tuple[AdaptRecord, ...]
    seconds: float
    rank: int
    size: int

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary (without the data block), with the Amdahl model of each elastic phase."""
        from malleable.runtime._model import fit_amdahl

        models = {}
        for phase in dict.fromkeys(s.phase for s in self.stats if s.kind == "elastic"):
            m = fit_amdahl((s.procs, s.iter_seconds) for s in self.stats if s.phase == phase and s.iterations)
            if m is not None:
                models[phase] = m.as_dict()
        return {"left": self.left, "seconds": self.seconds, "rank": self.rank, "size": self.size,
                "stats": [s.as_dict() for s in self.stats],
                "adaptations": [a.as_dict() for a in self.adaptations], "models": models}
