"""Records shared by the simulator and the live controller: jobs, the machine snapshot, and policy decisions.

A scheduling policy is a pure function ``decide(snapshot, now) -> list[Decision]``. It reads a frozen
:class:`Snapshot` and returns frozen decision records; the engine (simulator or daemon) validates every decision
and raises :class:`~malleable.errors.PolicyError` on one that breaks an invariant. Policies mutate nothing.

Node ids are opaque hashable values: integers ``0..N-1`` in the simulator, host names in the live controller.
Decisions always name node ids, never only counts, so the same policy drives both.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeAlias

__all__ = [
    "FAILED_PRIORITY",
    "NO_REQUESTS",
    "Decision",
    "Decline",
    "Interrupt",
    "Job",
    "JobKind",
    "NodeId",
    "Phase",
    "PhaseKind",
    "Policy",
    "QueueView",
    "Remember",
    "Reserve",
    "ResizeJob",
    "RunningJob",
    "SizeRequest",
    "Snapshot",
    "StorageView",
    "StartJob",
    "Wake",
]

NodeId: TypeAlias = Hashable

FAILED_PRIORITY = 2
"""Queue priority of a job re-queued after a node failure (seed 000: the failed job goes first)."""


class JobKind(enum.Enum):
    """How the size of a job may be chosen (Feitelson's classes, seed 002 §2.4)."""

    RIGID = "rigid"            # runs on exactly ``procs`` nodes
    MOLDABLE = "moldable"      # the scheduler picks a size in [min_procs, max_procs] at start, fixed afterwards
    MALLEABLE = "malleable"    # the scheduler may also resize it while it runs, within [min_procs, max_procs]


class PhaseKind(enum.Enum):
    """What one phase of a job's application model does (seeds 000 §4.2/§6, 004 §1.4)."""

    COMPUTE = "compute"        # ``amount`` seconds of work at the job's requested size, scaled by the speedup model
    READ = "read"              # ``amount`` bytes from the shared file system (its bandwidth is shared)
    WRITE = "write"            # ``amount`` bytes to the shared file system
    STAGE_IN = "stage-in"      # ``amount`` bytes file system -> burst buffer, before the computation
    CHECKPOINT = "checkpoint"  # ``amount`` bytes nodes -> burst buffer (computation suspended), then drained to the
                               # file system in the background, concurrently with the next phases
    STAGE_OUT = "stage-out"    # ``amount`` bytes burst buffer -> file system; the job ends when it and every drain end


@dataclass(frozen=True, slots=True)
class Phase:
    """One phase of a job's application model (ElastiSim-like): a computation or a transfer.

    Attributes:
        kind: what the phase does.
        amount: seconds of work (compute, at ``Job.procs`` nodes) or bytes (transfers).
        point: a scheduling point follows the phase: a malleable job may be resized only there (ElastiSim's
            semantics; ``Snapshot.points`` lists the jobs waiting at one).
    """

    kind: PhaseKind
    amount: float
    point: bool = False


@dataclass(frozen=True, slots=True, eq=False)
class Job:
    """What a scheduler knows about a job: never its real run time (only the user's estimate).

    Equality is identity: two records are the same job only if they are the same object; compare ``id`` otherwise.

    Attributes:
        id: job id (the SWF job number in traces); unique among jobs in the system at one time.
        submit: submission time (s).
        procs: requested (preferred) size in nodes; the size the estimate refers to.
        estimate: the user's wall-time estimate (s) at ``procs`` nodes; the simulator guarantees run <= estimate.
        kind: rigid, moldable or malleable.
        min_procs: smallest allowed size (== procs for rigid jobs).
        max_procs: largest allowed size (== procs for rigid jobs).
        serial: Amdahl serial fraction in [0, 1] used by the speedup model (0 = linear speedup).
        rho: scalability parameter of seed 002 (0 = linear speedup, larger = more sub-linear), used by the
            ``rho_power`` speedup model and by the MEBF policies to rank jobs.
        priority: queue priority; the engine keeps the queue sorted by ``(-priority, submission)``. 0 for every
            submitted job; jobs re-queued after a failure (or an :class:`Interrupt`) get a higher one.
        constraint: sizes the job can run on besides ``[min_procs, max_procs]``: ``""`` (any), ``"pof2"``
            (powers of two), ``"even"`` or ``"odd"``; policies that resize read it (seed 003's EBS).
        bb: burst-buffer capacity (bytes) the job holds for its whole run, a second cluster-wide resource
            (seed 004); 0 for none.
        phases: the application model (:class:`Phase`), run by the I/O-aware simulator; empty: the job just
            runs for its run time (every engine's default).
        intensity: I/O intensity ``i_j(n)`` (I/O time over total time, seed 000 §4.2) per size, as
            ``((n, i), ...)`` sorted by ``n``; see :meth:`io_intensity`.
    """

    id: int
    submit: float
    procs: int
    estimate: float
    kind: JobKind = JobKind.RIGID
    min_procs: int = 0
    max_procs: int = 0
    serial: float = 0.0
    rho: float = 0.0
    priority: int = 0
    constraint: str = ""
    bb: float = 0.0
    phases: tuple[Phase, ...] = ()
    intensity: tuple[tuple[int, float], ...] = ()

    @staticmethod
    def rigid(id: int, submit: float, procs: int, estimate: float) -> Job:  # noqa: A002 - mirrors the field
        """A rigid job of ``procs`` nodes (min = max = procs)."""
        return Job(id, submit, procs, estimate, JobKind.RIGID, procs, procs, 0.0)

    def allows(self, size: int) -> bool:
        """Whether ``size`` nodes is a valid size for this job."""
        return self.min_procs <= size <= self.max_procs

    def io_intensity(self, size: int) -> float:
        """``i_j(size)``: the given value at ``size``, linear between given sizes, the nearest one beyond them;
        0 when the job gives none (a compute-only job)."""
        pts = self.intensity
        if not pts:
            return 0.0
        if size <= pts[0][0]:
            return pts[0][1]
        for (n0, i0), (n1, i1) in zip(pts, pts[1:]):
            if size <= n1:
                return i0 + (i1 - i0) * (size - n0) / (n1 - n0)
        return pts[-1][1]


@dataclass(frozen=True, slots=True, eq=False)
class RunningJob:
    """A running job as a policy sees it. Replaced (never mutated) when the job is resized.

    Attributes:
        job: the job record.
        nodes: the node ids it holds now.
        size: ``len(nodes)``.
        start: when it first started.
        since: start of the current segment (last start or resize, after any reconfiguration cost).
        progress: fraction of the job's work done at ``since`` (0 at start, 1 when finished).
        end_estimate: estimated end from the user's estimate scaled by the speedup model (the real end is
            never later).
        resizes: how many times it has been resized.
        mtct: the job's last reported MPI-time-to-compute-time ratio (seed 003), or None when it reports none
            (in the simulator: from the engine's ``mtct`` model at the current size).
    """

    job: Job
    nodes: Sequence[NodeId]
    size: int
    start: float
    since: float
    progress: float
    end_estimate: float
    resizes: int = 0
    mtct: float | None = None

    @property
    def id(self) -> int:
        """The job id."""
        return self.job.id

    def remaining_estimate(self, now: float) -> float:
        """Estimated seconds left at ``now`` (never negative)."""
        return max(0.0, self.end_estimate - now)


@dataclass(frozen=True, slots=True)
class StartJob:
    """Start queued job ``job_id`` on exactly these free nodes (size within the job's bounds)."""

    job_id: int
    nodes: Sequence[NodeId]


@dataclass(frozen=True, slots=True)
class ResizeJob:
    """Give running malleable job ``job_id`` exactly this node set: nodes it no longer lists are released, new
    ones must be free. Its end is recomputed from the work left under the speedup model, plus the reconfiguration
    cost."""

    job_id: int
    nodes: Sequence[NodeId]


@dataclass(frozen=True, slots=True)
class Interrupt:
    """Stop running job ``job_id`` now and put it back in the queue with ``priority`` (node stealing, seed 000
    §3.1: the victim is "marked failed" and restarts later from scratch; its nodes become free at once)."""

    job_id: int
    priority: int = 1


@dataclass(frozen=True, slots=True)
class Reserve:
    """Record that queued job ``job_id`` is expected to start at ``start`` on ``size`` nodes (backfilling
    reservations). Informational for the engine (shown by ``malleable queue``, checked by invariant tests)."""

    job_id: int
    start: float
    size: int


@dataclass(frozen=True, slots=True)
class Wake:
    """Ask for a scheduling pass at time ``at`` even if no job arrives or ends then (periodic policies)."""

    at: float


@dataclass(frozen=True, slots=True)
class Remember:
    """Hand an immutable value to the next pass of the same policy (``Snapshot.memo``).

    It lets a pure policy keep derived data (an availability profile) between passes. The value must be treated
    as immutable by the policy; the engine stores it as is.
    """

    value: Any


@dataclass(frozen=True, slots=True)
class Decline:
    """Refuse running job ``job_id``'s size request (``Snapshot.requests``); the job goes on at its size and is
    told ``reason``. A request the policy neither grants (a ``ResizeJob`` of that job to a size it wants) nor
    declines stays outstanding: deferred to a later pass."""

    job_id: int
    reason: str = "declined by the policy"


@dataclass(frozen=True, slots=True)
class SizeRequest:
    """A running malleable job asks for a new size (the application's ``request_adapt``, an evolving job): exactly
    ``procs`` nodes, or any size in ``[min_procs, max_procs]`` (0: that bound not given), since ``at``."""

    procs: int
    min_procs: int = 0
    max_procs: int = 0
    at: float = 0.0

    def wants(self, size: int) -> bool:
        """Whether ``size`` nodes answer the request."""
        if self.procs:
            return size == self.procs
        return (not self.min_procs or size >= self.min_procs) and (not self.max_procs or size <= self.max_procs)


Decision: TypeAlias = StartJob | ResizeJob | Reserve | Wake | Remember | Interrupt | Decline


class QueueView(Sequence[Job]):
    """A read-only sequence over the engine's queue, so a pass does not copy a queue of 10^5 jobs.

    The engine freezes it (copies it into a tuple) before changing its queue whenever the snapshot or the view
    is still referenced after the policy returned, so a kept snapshot never changes.
    """

    __slots__ = ("_items",)

    def __init__(self, items: Sequence[Job]) -> None:
        self._items = items

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, i):  # type: ignore[override]
        return self._items[i]

    def __iter__(self) -> Iterator[Job]:
        return iter(self._items)

    def __repr__(self) -> str:
        return f"QueueView({list(self._items)!r})"

    def freeze(self) -> None:
        """Detach from the engine's list (called by the engine)."""
        if not isinstance(self._items, tuple):
            self._items = tuple(self._items)


NO_REQUESTS: Mapping[int, SizeRequest] = MappingProxyType({})
"""The empty request map (snapshots of passes without outstanding requests)."""

_NO_POINTS: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class StorageView:
    """The I/O part of a snapshot (one field, so snapshots of machines without it cost nothing more).

    Attributes:
        bb_total: the machine's burst-buffer capacity (bytes; 0: none).
        bb_free: the capacity not held by running jobs (a start needs ``job.bb <= bb_free``).
        points: running malleable jobs with an application model that wait at a scheduling point now; only
            these may be resized (the I/O-aware simulator; empty elsewhere, where any running malleable job may).
    """

    bb_total: float = 0.0
    bb_free: float = 0.0
    points: frozenset[int] = _NO_POINTS


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The machine and queues at one scheduling pass. Built by the engine; policies only read it.

    Attributes:
        now: the current time (s).
        nodes: all node ids of the machine.
        free: the free node ids, in the engine's allocation order (take ``free[:k]`` for k nodes).
        running: running jobs, sorted by ``(end_estimate, start order)``.
        queue: queued jobs in priority (submission) order (a tuple or a :class:`QueueView`).
        changed: False only when, since the previous pass of this policy, no job ended or was resized and the
            previous pass's decisions were all applied: then the state differs from the end of that pass only by
            the ``arrived`` jobs at the tail of ``queue`` (and by time). A hint for incremental policies, which
            must decide exactly as if it were True. Engines without the information set it True.
        arrived: how many jobs at the tail of ``queue`` arrived since the previous pass (== len(queue) when
            unknown).
        reservations: the last ``Reserve`` decision per queued job id (empty when the policy makes none).
        memo: the value of the last ``Remember`` decision of this policy, or None.
        down: nodes that are neither free nor held by a job, as ``(node id, expected return time)`` sorted by
            that time (``inf`` when unknown): failed nodes, and (live) nodes being checked after their last job.
            Policies that build availability profiles count them back at that time.
        requests: the standing size requests of running malleable jobs by job id (live jobs that called
            ``request_adapt``; empty in simulations without evolving jobs). A request the job's size does not
            answer is outstanding: a policy grants it with a ``ResizeJob`` to a size it wants, refuses it with
            ``Decline`` (which drops it), or leaves it for later. A granted request stands until the job asks
            again or ends, so policies know the size the application wants.
        io: the burst buffer and the scheduling points (:class:`StorageView`), or None when the machine has no
            buffer and no job waits at a point; read them as ``bb_total``, ``bb_free`` and ``points``.
    """

    now: float
    nodes: Sequence[NodeId]
    free: Sequence[NodeId]
    running: tuple[RunningJob, ...]
    queue: Sequence[Job]
    changed: bool = True
    arrived: int = -1
    reservations: Mapping[int, Reserve] | None = None
    memo: Any = None
    down: tuple[tuple[NodeId, float], ...] = ()
    requests: Mapping[int, SizeRequest] = field(default_factory=lambda: NO_REQUESTS)
    io: StorageView | None = None

    @property
    def bb_total(self) -> float:
        """The machine's burst-buffer capacity (bytes; 0: none)."""
        return self.io.bb_total if self.io is not None else 0.0

    @property
    def bb_free(self) -> float:
        """Burst buffer not held by running jobs."""
        return self.io.bb_free if self.io is not None else 0.0

    @property
    def points(self) -> frozenset[int]:
        """Running phased malleable jobs waiting at a scheduling point now."""
        return self.io.points if self.io is not None else _NO_POINTS

    @property
    def n_free(self) -> int:
        """Number of free nodes."""
        return len(self.free)

    @property
    def n_nodes(self) -> int:
        """Number of nodes in the machine."""
        return len(self.nodes)

    @property
    def new_jobs(self) -> int:
        """Number of queue-tail jobs a policy must examine afresh (all of them unless the hint says otherwise)."""
        if self.changed or self.arrived < 0:
            return len(self.queue)
        return self.arrived


Policy: TypeAlias = Callable[[Snapshot, float], list[Decision]]
