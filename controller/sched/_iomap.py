"""I/O-aware mapping and scheduling of periodic HPC applications (seed 001: Carretero et al., ICS 2020).

Pure code: the application model, the eight list-scheduling priority orders of one I/O node, the Make-Pack
pack partitioning (Algorithm 1) with its I/O sensibility ``S``, the LPT distribution of packs over ``R`` I/O
nodes, the workload's I/O load (Eq. 6) and the synthetic workload generator of §6.2.2. The event-driven
simulator of the model lives in :mod:`._iomap_sim`. Nothing here reads a clock or does I/O; the generator draws
from the :class:`numpy.random.Generator` it is given.

Units: times in seconds, volumes in bytes (any unit), bandwidth ``b`` in volume per second (the paper's
simulations normalise ``b = 1``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from malleable.errors import ConfigError

__all__ = [
    "ALPHA_GRID",
    "App",
    "PRIORITIES",
    "Pack",
    "Priority",
    "Request",
    "first_fit",
    "generate_workload",
    "io_load",
    "lpt",
    "make_pack",
    "q_distribution",
]


@dataclass(frozen=True, slots=True)
class App:
    """A periodic application (§4.2, §6.2.2): ``iterations`` times a compute phase of ``compute`` seconds on
    ``nodes`` dedicated compute nodes followed by a blocking I/O phase moving ``volume``.

    The paper's chain ``W_i1, V_i1, ...`` does not say whether a chain starts with computation or I/O; we start
    with computation (an application reads or writes the results of its first iteration), so an application
    ends with an I/O phase. Alone on an I/O node of bandwidth ``b`` it lasts :meth:`length` (Eq. 1).
    """

    id: int
    nodes: int
    iterations: int
    compute: float
    volume: float

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.iterations < 1:
            raise ConfigError(f"app {self.id}: nodes and iterations must be >= 1 (got {self.nodes}, "
                              f"{self.iterations})")
        if not (self.compute >= 0 and self.volume >= 0 and self.compute + self.volume > 0
                and math.isfinite(self.compute + self.volume)):
            raise ConfigError(f"app {self.id}: compute and volume must be finite, >= 0 and not both 0 "
                              f"(got {self.compute}, {self.volume})")

    def io_time(self, b: float) -> float:
        """Duration of one I/O phase with exclusive access to bandwidth ``b``."""
        return self.volume / b

    def length(self, b: float) -> float:
        """``T_i(b)``: run time without contention, ``sum_j (w_ij + v_ij / b)`` (Eq. 1)."""
        return self.iterations * (self.compute + self.volume / b)

    def total_volume(self) -> float:
        """``sum_j v_ij``: everything the application transfers."""
        return self.iterations * self.volume


@dataclass(frozen=True, slots=True)
class Pack:
    """A set of applications started together on one I/O node's partition (§5); the next pack of that I/O
    node starts only when all of them have ended."""

    apps: tuple[App, ...]

    def nodes(self) -> int:
        """``P^Pack``: compute nodes the pack uses."""
        return sum(a.nodes for a in self.apps)

    def length(self, b: float) -> float:
        """``T^Pack``: its longest member's run time without contention (the pack's minimal length)."""
        return max((a.length(b) for a in self.apps), default=0.0)

    def occupation(self, b: float) -> float:
        """``L^Pack``: the fraction of ``T^Pack`` the I/O node must be busy, ``sum v / (b T^Pack)``."""
        t = self.length(b)
        return sum(a.total_volume() for a in self.apps) / (b * t) if t > 0 else 0.0

    def ids(self) -> tuple[int, ...]:
        """The members' ids, in the pack's order."""
        return tuple(a.id for a in self.apps)


# -- I/O scheduling: the eight priority orders (§5.1) ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Request:
    """A pending I/O phase: application ``app`` finished the compute phase of its iteration ``iteration``
    (0-based) at ``time`` and waits for the I/O node; ``release`` is the time its stretch counts from."""

    app: App
    iteration: int
    time: float
    release: float


def _remaining(r: Request, b: float) -> float:
    # the pending I/O phase plus every later iteration, without contention
    a = r.app
    return a.io_time(b) + (a.iterations - r.iteration - 1) * (a.compute + a.io_time(b))


def _stretch_now(r: Request, now: float, b: float) -> float:
    # the stretch the application would have at the end of this iteration if the I/O node were granted now
    a = r.app
    return (now + a.io_time(b) - r.release) / ((r.iteration + 1) * (a.compute + a.io_time(b)))


@dataclass(frozen=True, slots=True)
class Priority:
    """A list-scheduling priority order: the pending request with the smallest ``key(request, now, b)`` gets
    the free I/O node; ties go to the earlier request, then the lower application id (the paper gives no
    tie-break). ``dynamic``: the key changes while a request waits (it must be recomputed at each grant);
    otherwise it is fixed when the request is made."""

    name: str
    key: Callable[[Request, float, float], float]
    dynamic: bool = False
    doc: str = ""


PRIORITIES: dict[str, Priority] = {p.name: p for p in (
    Priority("lowest-id", lambda r, now, b: float(r.app.id), doc="lowest application id first"),
    Priority("longest-io", lambda r, now, b: -r.app.io_time(b), doc="longest I/O phase first"),
    Priority("shortest-io", lambda r, now, b: r.app.io_time(b), doc="shortest I/O phase first"),
    Priority("shortest-remaining", lambda r, now, b: _remaining(r, b),
             doc="least remaining contention-free work (this I/O phase and later iterations) first"),
    Priority("longest-remaining", lambda r, now, b: -_remaining(r, b),
             doc="most remaining contention-free work first"),
    Priority("fifo", lambda r, now, b: r.time, doc="earliest I/O request first"),
    Priority("bandwidth", lambda r, now, b: r.app.io_time(b) / (r.app.compute + r.app.io_time(b)),
             doc="lowest ratio of I/O time to execution time (v/b over w + v/b) first; v/b over w gives the "
                 "same order"),
    Priority("stretch", lambda r, now, b: -_stretch_now(r, now, b), dynamic=True,
             doc="worst stretch first: (now + v/b - release) / ((iteration + 1)(w + v/b)), the stretch at "
                 "the end of this iteration if granted now"),
)}
"""The eight I/O priority orders of §5.1, by name, in the paper's order."""


# -- mapping: Make-Pack (Algorithm 1) and LPT (§6.2.4) ---------------------------------------------------------

_EPS = 1e-12  # relative slack of the constraint tests, so rounding of equal sums never rejects an exact fit


def _check_machine(p: int, b: float) -> None:
    if p < 1:
        raise ConfigError(f"compute nodes per I/O node P must be >= 1, got {p}")
    if not (b > 0 and math.isfinite(b)):
        raise ConfigError(f"I/O bandwidth b must be finite and > 0, got {b}")


def make_pack(apps: Sequence[App], s: float, p: int, b: float = 1.0) -> tuple[Pack, ...]:
    """Algorithm 1 (Make-Pack): partition ``apps`` into packs of at most ``p`` compute nodes and I/O occupation
    at most ``s``.

    Applications are taken by decreasing ``T_i(b)`` (ties: lower id first); each goes into the first pack of
    the list, kept sorted by decreasing ``P^Pack`` (a stable sort: ties keep their order), that satisfies
    Eq. 4 (``sum_j v_ij <= (s - L^Pack) b T^Pack``) and Eq. 5 (``Q_i <= p - P^Pack``), otherwise into a new
    pack. A new pack always takes the application, even one whose own occupation exceeds ``s`` (possible only
    for ``s < 1``): Algorithm 1 "creates an empty pack" and fits it there. ``s = inf`` is First-Fit (§6.2.3).

    Returns the packs in the final list order (decreasing ``P^Pack``).

    Raises:
        ConfigError: ``s <= 0`` or NaN, ``p < 1``, ``b <= 0``, or an application wider than ``p``.
    """
    if not s > 0:
        raise ConfigError(f"I/O sensibility S must be > 0, got {s}")
    _check_machine(p, b)
    for a in apps:
        if a.nodes > p:
            raise ConfigError(f"app {a.id} needs {a.nodes} compute nodes, more than P = {p}")
    # each open pack: [members, P^Pack, T^Pack, total volume]
    packs: list[list] = []
    for a in sorted(apps, key=lambda a: (-a.length(b), a.id)):
        vol = a.total_volume()
        for pk in packs:
            t = max(pk[2], a.length(b))  # == pk[2]: members come by decreasing length
            fits_io = math.isinf(s) or pk[3] + vol <= s * b * t * (1 + _EPS)
            if fits_io and pk[1] + a.nodes <= p:
                pk[0].append(a)
                pk[1] += a.nodes
                pk[2] = t
                pk[3] += vol
                break
        else:
            packs.append([[a], a.nodes, a.length(b), vol])
        packs.sort(key=lambda pk: -pk[1])
    return tuple(Pack(tuple(pk[0])) for pk in packs)


def first_fit(apps: Sequence[App], p: int, b: float = 1.0) -> tuple[Pack, ...]:
    """The First-Fit baseline of §6.2.3: Make-Pack with ``S = inf`` (processors only)."""
    return make_pack(apps, math.inf, p, b)


def lpt(packs: Sequence[Pack], r: int, b: float = 1.0) -> tuple[tuple[int, ...], ...]:
    """Largest Processing Time (§6.2.4, footnote 5): the longest remaining pack (by ``T^Pack``, the
    contention-free estimate; ties: lower index) goes to the I/O node whose assigned packs end the earliest
    (ties: lower node index).

    Returns, for each of the ``r`` I/O nodes, the indices into ``packs`` it runs, in the order it runs them.

    Raises:
        ConfigError: ``r < 1``.
    """
    if r < 1:
        raise ConfigError(f"the number of I/O nodes R must be >= 1, got {r}")
    load = [0.0] * r
    out: list[list[int]] = [[] for _ in range(r)]
    for i in sorted(range(len(packs)), key=lambda i: (-packs[i].length(b), i)):
        k = min(range(r), key=lambda k: (load[k], k))
        out[k].append(i)
        load[k] += packs[i].length(b)
    return tuple(tuple(x) for x in out)


def io_load(apps: Sequence[App], p: int, b: float = 1.0) -> float:
    """Eq. 6, the workload's I/O load ``alpha = P sum_i sum_j v_ij / b / sum_i Q_i T_i(b)``: the average I/O
    occupation of the I/O node if the ``P`` nodes were kept busy without gaps."""
    _check_machine(p, b)
    den = sum(a.nodes * a.length(b) for a in apps)
    return p * sum(a.total_volume() for a in apps) / b / den if den > 0 else 0.0


# -- synthetic workloads (§6.2.2) -------------------------------------------------------------------------------

ALPHA_GRID: tuple[float, ...] = (0.5, 0.75) + tuple(float(x) for x in range(1, 11))
"""The generation targets ``alpha_gen`` of §6.2.2, printed ``{0.5, 0.75, 1 ... 10}``: we read the ``...`` as
steps of 1."""


def q_distribution(mean: float, max_exp: int = 11) -> np.ndarray:
    """Probabilities over the sizes ``2^0 .. 2^max_exp`` with the given mean: the maximum-entropy one,
    ``p_j ~ exp(lam 2^j)`` (the paper only fixes the support and the mean). A mean at or beyond an end of the
    support puts all the mass on that end."""
    sizes = 2.0 ** np.arange(max_exp + 1)
    if mean <= sizes[0]:
        return np.eye(len(sizes))[0]
    if mean >= sizes[-1]:
        return np.eye(len(sizes))[-1]

    def dist(lam: float) -> np.ndarray:
        z = lam * sizes
        e = np.exp(z - z.max())
        return e / e.sum()

    lo, hi = -50.0, 50.0  # lam * 2^11 spans far beyond the mean's range at these ends
    for _ in range(200):
        mid = (lo + hi) / 2
        if float(dist(mid) @ sizes) < mean:
            lo = mid
        else:
            hi = mid
    return dist((lo + hi) / 2)


def _truncnorm(rng: np.random.Generator, mu: float, sd: float, lo: float, hi: float, n: int) -> np.ndarray:
    # rejection sampling; an interval the normal almost never reaches is a configuration error, not a hang
    out = np.empty(0)
    for _ in range(1000):
        if len(out) >= n:
            return out[:n]
        x = rng.normal(mu, sd, size=max(16, 2 * (n - len(out))))
        out = np.concatenate([out, x[(x >= lo) & (x <= hi)]])
    if len(out) >= n:
        return out[:n]
    raise ConfigError(f"the I/O load interval [{lo}, {hi}] is (almost) never reached by normal({mu}, {sd})")


def generate_workload(rng: np.random.Generator, alpha_gen: float, p: int = 2048, b: float = 1.0, *,
                      apps: tuple[int, int] = (25, 100), iterations: tuple[int, int] = (250, 1000),
                      compute: tuple[float, float] = (10.0, 100.0), mu: tuple[float, float] = (0.1, 0.9),
                      sigma: float = 0.1, sigma_is: str = "std", bounds: tuple[float, float] = (0.01, 1.0),
                      beta_mode: str = "exact", max_exp: int = 11) -> tuple[App, ...]:
    """One synthetic workload of §6.2.2 for target I/O load ``alpha_gen`` (its actual load is
    :func:`io_load`, which the evaluation uses instead of ``alpha_gen``).

    As printed: the share ``beta`` of low-I/O applications ~ U[0, 1]; the number of applications ~ U{25..100};
    per application (periodic): iterations ~ U{250..1000}, compute ``w`` ~ U[10, 100], I/O load ``v / (b w)``
    from a normal of mean ``mu[0] = 0.1`` (low I/O) or ``mu[1] = 0.9`` (high I/O) and spread 0.1, truncated;
    ``Q`` from ``{2^j, j = 0..11}`` with mean ``Qbar = P m / (alpha_gen (1 + m))``, ``m = beta mu1 + (1 -
    beta) mu2``.

    Choices the text leaves open (parameters where it allows several readings):
        sigma_is: the text says "variance sigma = 0.1"; ``"std"`` (default) reads 0.1 as the standard
            deviation, ``"variance"`` as the variance (standard deviation sqrt(0.1)).
        bounds: the truncation interval ``[x, y]`` is not given; default ``[0.01, 1]``: every I/O phase has
            a duration, and no phase moves more than its compute phase lasts (draws outside are redrawn).
        beta_mode: ``"exact"`` (default) makes ``round(beta n)`` applications, chosen at random, low-I/O;
            ``"bernoulli"`` draws each application low-I/O with probability ``beta``.
        Q: the distribution over ``{2^j}`` is not given; we use the maximum-entropy one with mean ``Qbar``
            (:func:`q_distribution`), all mass on 1 or ``2^max_exp`` when ``Qbar`` is outside; sizes above
            ``p`` are cut to ``p`` (only when ``p < 2^max_exp``).
        Integer ranges are inclusive; applications get ids 0..n-1 and all are released at time 0.

    Raises:
        ConfigError: ``alpha_gen <= 0``, empty or reversed ranges, or an unknown ``sigma_is``/``beta_mode``.
    """
    _check_machine(p, b)
    if not alpha_gen > 0:
        raise ConfigError(f"alpha_gen must be > 0, got {alpha_gen}")
    for name, (lo, hi) in (("apps", apps), ("iterations", iterations), ("compute", compute), ("bounds", bounds)):
        if not lo <= hi or lo < 0:
            raise ConfigError(f"{name} range must satisfy 0 <= low <= high, got {(lo, hi)}")
    if apps[0] < 1 or iterations[0] < 1 or compute[1] <= 0:
        raise ConfigError("at least one application, one iteration and some compute time are needed")
    if sigma_is not in ("std", "variance"):
        raise ConfigError(f"sigma_is must be 'std' or 'variance', got {sigma_is!r}")
    if beta_mode not in ("exact", "bernoulli"):
        raise ConfigError(f"beta_mode must be 'exact' or 'bernoulli', got {beta_mode!r}")
    sd = sigma if sigma_is == "std" else math.sqrt(sigma)
    beta = float(rng.uniform(0.0, 1.0))
    n = int(rng.integers(apps[0], apps[1] + 1))
    if beta_mode == "exact":
        low = np.zeros(n, dtype=bool)
        low[rng.permutation(n)[:round(beta * n)]] = True
    else:
        low = rng.random(n) < beta
    iters = rng.integers(iterations[0], iterations[1] + 1, size=n)
    w = rng.uniform(compute[0], compute[1], size=n)
    load = np.where(low, _truncnorm(rng, mu[0], sd, *bounds, n), _truncnorm(rng, mu[1], sd, *bounds, n))
    m = beta * mu[0] + (1 - beta) * mu[1]
    qbar = p * m / (alpha_gen * (1 + m))
    probs = q_distribution(qbar, max_exp)
    q = 2 ** rng.choice(max_exp + 1, size=n, p=probs)
    q = np.minimum(q, p)
    return tuple(App(i, int(q[i]), int(iters[i]), float(w[i]), float(load[i] * w[i] * b)) for i in range(n))
