"""The phases of an EPOP program (:class:`Init`, :class:`Elastic`, :class:`Rigid`, :class:`Branch`) and the
:class:`Program` that checks them; the driver that runs them is :mod:`malleable.runtime.epop`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from malleable.runtime._types import Status

if TYPE_CHECKING:
    from malleable.runtime.epop import Adaptation, Context

__all__ = ["Branch", "Elastic", "Init", "Program", "Rigid"]


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not name:
        raise ValueError(f"a phase name must be a non-empty string, got {name!r}")


def _check_callable(what: str, fn: Any) -> None:
    if not callable(fn):
        raise TypeError(f"{what} must be callable, got {type(fn).__name__}")


@dataclass(frozen=True, slots=True)
class Init:
    """Set-up phase: ``fn(ctx)`` runs once at the start, and on each joiner (status JOINING, no world yet)."""

    name: str
    fn: Callable[[Context], None]

    def __post_init__(self) -> None:
        _check_name(self.name)
        _check_callable("Init.fn", self.fn)


@dataclass(frozen=True, slots=True)
class Rigid:
    """A phase that never adapts: ``fn(ctx)`` runs once each time the flow reaches it."""

    name: str
    fn: Callable[[Context], None]

    def __post_init__(self) -> None:
        _check_name(self.name)
        _check_callable("Rigid.fn", self.fn)


@dataclass(frozen=True, slots=True)
class Branch:
    """Picks the next phase: ``fn(ctx)`` returns a phase name, or None to end the program.

    The answer must be the same on every rank (base it on collective results, e.g. ``ctx.stats``).
    """

    name: str
    fn: Callable[[Context], str | None]

    def __post_init__(self) -> None:
        _check_name(self.name)
        _check_callable("Branch.fn", self.fn)


AdaptFn = Callable[["Context", "Adaptation"], None]


@dataclass(frozen=True, slots=True)
class Elastic:
    """The malleable body of a program.

    Attributes:
        name: phase name.
        body: ``body(ctx, i)`` runs iteration ``i``; returning True ends the phase early (the
            answer must be the same on every rank).
        iters: iteration count, or ``iters(ctx) -> int`` evaluated when the phase starts.
        setup: ``setup(ctx)`` builds what depends on the world (neighbours, Cartesian
            communicators); it runs when the phase starts and after every adaptation.
            Communicators made from ``ctx.comm`` are freed by the driver before each adaptation.
        on_staying, on_leaving, on_joining: adaptation blocks ``fn(ctx, adaptation)`` run inside
            the window by processes that stay, leave or join (move the data block here).
        adapt: the block for every role that has no specific one.
        probe_every: probe at iteration boundaries ``i`` with ``i % probe_every == 0``.
    """

    name: str
    body: Callable[[Context, int], bool | None]
    iters: int | Callable[[Context], int]
    setup: Callable[[Context], None] | None = None
    on_staying: AdaptFn | None = None
    on_leaving: AdaptFn | None = None
    on_joining: AdaptFn | None = None
    adapt: AdaptFn | None = None
    probe_every: int = 1

    def __post_init__(self) -> None:
        _check_name(self.name)
        _check_callable("Elastic.body", self.body)
        if not callable(self.iters) and (not isinstance(self.iters, int) or self.iters < 0):
            raise ValueError(f"Elastic.iters must be an int >= 0 or a callable, got {self.iters!r}")
        if not isinstance(self.probe_every, int) or self.probe_every < 1:
            raise ValueError(f"Elastic.probe_every must be an int >= 1, got {self.probe_every!r}")
        for what in ("setup", "on_staying", "on_leaving", "on_joining", "adapt"):
            fn = getattr(self, what)
            if fn is not None:
                _check_callable(f"Elastic.{what}", fn)

    def block(self, role: Status) -> AdaptFn | None:
        """The adaptation block for ``role`` (STAYING, LEAVING or JOINING)."""
        specific = {Status.STAYING: self.on_staying, Status.LEAVING: self.on_leaving,
                    Status.JOINING: self.on_joining}.get(role)
        return specific or self.adapt

    def total(self, ctx: Context) -> int:
        """The phase's iteration count."""
        n = self.iters(ctx) if callable(self.iters) else self.iters
        if not isinstance(n, int) or n < 0:
            raise ValueError(f"phase {self.name!r}: iters must give an int >= 0, got {n!r}")
        return n


Phase = Init | Rigid | Elastic | Branch


@dataclass(frozen=True)
class Program:
    """An EPOP program: phases run in order; a Branch picks the next one; Init phases come first.

    Raises:
        ValueError: no phases, duplicate names, or an Init phase after another kind.
        TypeError: an element is not a phase.
    """

    phases: tuple[Phase, ...]

    def __init__(self, phases: Sequence[Phase]) -> None:
        phases = tuple(phases)
        if not phases:
            raise ValueError("a program needs at least one phase")
        for p in phases:
            if not isinstance(p, Init | Rigid | Elastic | Branch):
                raise TypeError(f"not a phase: {p!r} (use Init, Elastic, Rigid or Branch)")
        names = [p.name for p in phases]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"duplicate phase name(s): {dup}")
        seen_other = False
        for p in phases:
            if isinstance(p, Init) and seen_other:
                raise ValueError(f"Init phase {p.name!r} must come before every other phase")
            seen_other = seen_other or not isinstance(p, Init)
        object.__setattr__(self, "phases", phases)

    def index(self, name: str) -> int:
        """Position of the phase called ``name``.

        Raises:
            ValueError: no such phase.
        """
        for i, p in enumerate(self.phases):
            if p.name == name:
                return i
        raise ValueError(f"no phase called {name!r} (phases: {[p.name for p in self.phases]})")
