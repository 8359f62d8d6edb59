"""What an application calls besides the four verbs: ask for a new size (:func:`request_adapt`) and register
arrays the runtime moves at every commit (:func:`register`, :func:`data`)."""

from __future__ import annotations

from typing import Any

from malleable.errors import AdaptError
from malleable.runtime import _registered, _requests
from malleable.runtime._decide import take_request
from malleable.runtime._world import _rt

__all__ = ["data", "register", "request_adapt"]


def request_adapt(procs: int | None = None, min: int | None = None, max: int | None = None) -> None:  # noqa: A002
    """Ask the decision source for a new size, from any rank (no collective; rank 0 delivers it).

    The answer comes through :func:`probe_adapt` at a later probe: a grant is a pending adaptation with
    ``info["request"] == "granted"``; a refusal is ``pending=False`` with ``info["request"] == "refused"`` and
    ``info["reason"]``; until then the request is outstanding (a newer one replaces it).

    Args:
        procs: exactly this many processes.
        min: at least this many.
        max: at most this many.

    Raises:
        ValueError: nothing asked, a count below 1, or inconsistent bounds.
        AdaptError: the runtime is not initialised, or this process left the job.
    """
    rt = _rt()
    if rt.finished or rt.world is None:
        raise AdaptError("request_adapt() on a process that is not in the job's world")
    req = _requests.check_request(procs, min, max, rt.world.rank)
    if rt.world.rank == 0:
        take_request(rt, req)
    elif rt.requests is None:   # between an adaptation and the next probe
        rt.queued_requests.append(req)
    else:
        rt.requests.send(req)


def register(name: str, local: Any, dist: str = "block", axis: int = 0, block: int = 1) -> None:
    """Register (or update) this rank's part of a distributed NumPy array, moved by the runtime at every commit.

    Call it on every rank of the world (a part may be empty) with the same ``dist``/``axis``/``block``; call it
    again when the local array object changes (cheap). After ``adapt_commit``, :func:`data` gives the new part
    (joiners: their part).

    Args:
        name: the array's name (arrays move in name order).
        local: this rank's part (the distributed axis is ``axis``).
        dist: ``"block"`` or ``"block-cyclic"``.
        axis: the distributed axis.
        block: block size of ``block-cyclic``.

    Raises:
        ValueError: unknown distribution, bad axis or block.
    """
    rt = _rt()
    cur = rt.registry.get(name)
    if cur is not None and (cur.dist, cur.axis, cur.block) == (dist, axis, block):
        cur.local = local
        return
    if dist not in _registered.DISTS:
        raise ValueError(f"register({name!r}): unknown dist {dist!r}; known: {', '.join(_registered.DISTS)}")
    if not 0 <= axis < max(1, len(getattr(local, "shape", ()))):
        raise ValueError(f"register({name!r}): axis {axis} out of range for shape {getattr(local, 'shape', None)}")
    if not isinstance(block, int) or block < 1:
        raise ValueError(f"register({name!r}): block must be an int >= 1, got {block!r}")
    rt.registry[name] = _registered.Registered(local, dist, axis, block)


def data(name: str) -> Any:
    """This rank's current part of the registered array ``name``.

    Raises:
        KeyError: nothing registered under that name (on a joiner: before its first commit).
    """
    try:
        return _rt().registry[name].local
    except KeyError:
        raise KeyError(f"no registered array {name!r}") from None
