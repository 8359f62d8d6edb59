"""Expansion over MPI: spawn one group per host (concurrently), handshake with deadlines, merge in rank order.

Roles and phases are named ``parent_*`` (processes already in the world) and ``child_*`` (spawned).
All spawns of one expansion are issued at once from threads, each on its own duplicate of the
world, so k hosts cost about one spawn. Every wait has a deadline; nothing is merged until every
group has answered, so a failed expansion leaves the old world untouched.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mpi4py import MPI

from malleable.errors import AdaptError, AdaptTimeout
from malleable.runtime._layout import ExpandPlan
from malleable.runtime._mpi import current
from malleable.runtime._waits import wait_request

__all__ = ["Leftovers", "Merged", "child_connect", "child_give_up", "child_merge", "child_ready", "parent_go",
           "parent_merge", "parent_ready", "parent_spawn", "spawn_command"]

log = logging.getLogger(__name__)

_TAG = 4711
_POLL = 0.0005  # longest sleep between polls during an adaptation: these waits are short, latency matters


@dataclass
class Leftovers:
    """What failed expansions left behind; owned by the runtime, which must settle it before MPI_Finalize.

    ``threads``: spawn threads still inside ``MPI_Comm_spawn`` when their expansion gave up (each cleans up its
    group by itself once the call returns). ``stale``: a group was abandoned with members that may be dead or
    stopped, which some MPIs still count as connected when finalizing.
    """

    threads: list[threading.Thread] = field(default_factory=list)
    stale: bool = False

    def settle(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the straggling threads; True if none is left inside MPI."""
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        self.threads = [t for t in self.threads if t.is_alive()]
        return not self.threads


def spawn_command() -> tuple[str, list[str]]:
    """The command that re-runs this program for joiners (``python -m pkg.mod ...`` is kept as ``-m``)."""
    argv = list(getattr(sys, "orig_argv", []) or [sys.executable, *sys.argv])
    return sys.executable, argv[1:]


def _spawn_one(comm: Any, cmd: str, args: list[str], n: int, host: str | None, out: list, i: int,
               abandoned: threading.Event, timeout: float) -> None:
    try:
        _spawn_call(comm, cmd, args, n, host, out, i)
    finally:
        if abandoned.is_set():  # the expansion gave up while this call was inside MPI: undo it here
            _late_cleanup(out[i], timeout)
            comm.Free()


def _late_cleanup(inter: Any, timeout: float) -> None:
    """Tell a group that started after its expansion was given up to exit, and drop it."""
    if inter is None or isinstance(inter, Exception):
        return
    try:
        wait_request(inter.Ibarrier(), timeout, "late joiners", cap=0.01)
        if inter.Get_rank() == 0:
            for r in range(inter.remote_size):
                inter.send({"kind": "abort"}, dest=r, tag=_TAG)
        inter.Disconnect()
    except AdaptTimeout:
        inter.Free()
    log.info("a group spawned after its expansion was given up has been told to exit")


def _spawn_call(comm: Any, cmd: str, args: list[str], n: int, host: str | None, out: list, i: int) -> None:
    info = MPI.Info.Create()
    try:
        for key, value in current().spawn_info(host).items():
            info.Set(key, value)
        errcodes: list[int] = []
        out[i] = comm.Spawn(cmd, args, maxprocs=n, info=info, root=0, errcodes=errcodes)
        bad = [e for e in errcodes if e != MPI.SUCCESS]
        if bad:
            out[i] = AdaptError(f"spawn of {n} process(es) on {host or 'the default host'} failed: {bad}")
    except MPI.Exception as e:
        out[i] = AdaptError(f"spawn of {n} process(es) on {host or 'the default host'} failed: {e.Get_error_string()}")
    finally:
        info.Free()


def parent_spawn(world: Any, plan: ExpandPlan, timeout: float, leftovers: Leftovers) -> list[Any]:
    """Spawn the plan's groups concurrently and handshake with each; collective over ``world``.

    A spawn still inside MPI at the deadline is left to its thread (recorded in ``leftovers``), which tells
    the group to exit once the call returns; the expansion fails at once.

    Returns:
        One intercommunicator per group, in plan order.

    Raises:
        AdaptError: on every rank of ``world`` when any group failed to spawn or to answer in time;
            groups that did start are told to exit and their intercommunicators are released.
    """
    cmd, args = spawn_command()
    k = len(plan.counts)
    dups = [world.Dup() for _ in range(k)]
    out: list[Any] = [None] * k
    abandoned = threading.Event()
    threads = [
        threading.Thread(target=_spawn_one, name=f"malleable-spawn-{i}", daemon=True,
                         args=(dups[i], cmd, args, plan.counts[i], plan.hosts[i], out, i, abandoned, timeout))
        for i in range(k)
    ]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    problems = []
    for i, t in enumerate(threads):
        if t.is_alive():
            problems.append(f"spawn on {plan.hosts[i] or 'the default host'} did not return within {timeout:g} s")
        elif isinstance(out[i], Exception):
            problems.append(str(out[i]))
    answered = [False] * k
    if not problems:
        for i in range(k):
            try:
                wait_request(out[i].Ibarrier(), timeout, f"joiners on {plan.hosts[i] or 'the default host'}",
                             cap=_POLL)
                answered[i] = True
            except AdaptTimeout as e:
                problems.append(str(e))
                break
            except MPI.Exception as e:         # a joiner died in the handshake (Open MPI reports it here)
                problems.append(f"joiners on {plan.hosts[i] or 'the default host'}: {e.Get_error_string()}")
                break
    ok = world.allreduce(0 if problems else 1, op=MPI.MIN)
    if not ok:
        abandoned.set()  # threads still inside MPI clean up after themselves
    late = [i for i, t in enumerate(threads) if t.is_alive()]
    leftovers.threads += [threads[i] for i in late]
    for i in range(k):
        if i not in late:
            dups[i].Free()
    if ok:
        return list(out)
    for i in range(k):
        inter = out[i]
        if i in late:
            continue
        if answered[i]:
            if world.rank == 0:
                for r in range(inter.remote_size):
                    inter.send({"kind": "abort"}, dest=r, tag=_TAG)
            inter.Disconnect()
        elif inter is not None and not isinstance(inter, Exception):
            inter.Free()  # a member may be dead: no Disconnect handshake with it
            leftovers.stale = True
    raise AdaptError("expansion failed: " + ("; ".join(problems) if problems else "a peer rank failed"))


def parent_send_context(world: Any, inters: list[Any], contexts: list[dict]) -> None:
    """Rank 0 sends each group its context (kind, index, layout, ...); the others do nothing."""
    if world.rank != 0:
        return
    reqs = []
    for inter, ctx in zip(inters, contexts, strict=True):
        for r in range(inter.remote_size):
            reqs.append(inter.isend(dict(ctx, member=r), dest=r, tag=_TAG))
    for req in reqs:
        req.wait()


def parent_ready(world: Any, inters: list[Any], timeout: float, leftovers: Leftovers,
                 first: Callable[[float], None] | None = None, go: bool = True) -> None:
    """Last check before the blocking merge: every joiner is alive and waiting; collective over ``world``.

    Every group must reach a barrier on its intercommunicator within ``timeout`` (a joiner stopped or killed
    after the handshake never does); the ranks agree on the outcome and rank 0 tells each joiner ``go`` or
    ``abort``. ``first`` (on rank 0) is another wait that must succeed (the joiners' liveness reports).
    With ``go`` False a success is not announced yet: :func:`parent_go` does it later (an expansion prepared
    in the background merges at the application's next safe point).

    Raises:
        AdaptError: on every rank of ``world`` when a group is not ready; the groups are dropped.
    """
    deadline = time.monotonic() + timeout
    problem = ""
    if first is not None:
        try:
            first(timeout)
        except AdaptTimeout as e:
            problem = str(e)
    reqs = [inter.Ibarrier() for inter in inters]
    if not problem:
        for req in reqs:
            try:
                wait_request(req, max(0.0, deadline - time.monotonic()), "joiners ready to merge", cap=_POLL)
            except AdaptTimeout as e:
                problem = str(e)
                break
    ok = world.allreduce(0 if problem else 1, op=MPI.MIN)
    if ok and not go:
        return
    parent_go(world, inters, bool(ok))
    if ok:
        return
    for inter in inters:
        inter.Free()  # a stopped or dead member cannot take part in a Disconnect
    leftovers.stale = True
    raise AdaptError(f"expansion failed: {problem or 'joiners not ready on another rank'}")


def parent_go(world: Any, inters: list[Any], ok: bool) -> None:
    """Rank 0 tells every joiner to merge (``ok``) or to exit; an abort is not waited for (a stopped joiner
    may never receive it)."""
    if world.rank != 0:
        return
    sends = [inter.isend(ok, dest=r, tag=_TAG + 1) for inter in inters for r in range(inter.remote_size)]
    if ok:
        MPI.Request.waitall(sends)


def child_ready(parent: Any, timeout: float, go_timeout: float | None) -> None:
    """Joiner side of :func:`parent_ready`; a joiner told to abort (or left without an answer) exits here.

    ``go_timeout`` None waits for the parents' word without limit (they merge at their next safe point).
    """
    try:
        wait_request(parent.Ibarrier(), timeout, "parents ready to merge", cap=_POLL)
        go = wait_request(parent.irecv(source=0, tag=_TAG + 1), go_timeout, "go from rank 0", cap=0.005)
    except AdaptTimeout as e:
        log.error("joiner gives up: %s", e)  # noqa: TRY400 - the timeout is the whole story
        go = False
    if not go:
        log.warning("the expansion was given up by the parents; joiner exits")
        child_give_up(parent)


def child_give_up(parent: Any) -> None:
    """End a joiner whose expansion failed: finalize (where the MPI allows it), then exit 0; the launchers take a
    process that exits without ``MPI_Finalize`` for a failed one (hydra then signals the job, PRRTE ends it)."""
    parent.Free()
    if current().finalize_on_give_up:
        MPI.Finalize()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


@dataclass
class Merged:
    """Result of the merge: the new world and the old↔joiners intercommunicator."""

    world: Any
    intercomm: Any


def parent_merge(world: Any, inters: list[Any]) -> Merged:
    """Merge the old world with the spawned groups (old ranks first, then groups in order)."""
    n_old = world.size
    parts = [inter.Merge(high=False) for inter in inters]
    merged = _chain(parts[0], parts[1:], n_old, 1)
    return Merged(merged, _old_new_intercomm(merged, n_old))


def child_connect(timeout: float) -> tuple[Any, dict]:
    """Joiner side of the handshake: answer the parents, then receive the context.

    Raises:
        AdaptTimeout: the parents did not complete the handshake or send the context in time.
    """
    parent = MPI.Comm.Get_parent()
    # give up before the parents do: a failed group is then gone before they spawn anything else
    try:
        wait_request(parent.Ibarrier(), 0.75 * timeout, "handshake with the spawning processes", cap=_POLL)
    except (AdaptTimeout, MPI.Exception) as e:   # no answer in time, or a sibling died (Open MPI reports it)
        log.error("joiner gives up: %s", e)  # noqa: TRY400 - the timeout is the whole story
        child_give_up(parent)
    ctx = wait_request(parent.irecv(source=0, tag=_TAG), timeout, "adaptation context from rank 0", cap=_POLL)
    return parent, ctx


def child_merge(parent: Any, index: int, n_groups: int, n_old: int) -> Merged:
    """Joiner side of :func:`parent_merge` for group ``index`` of ``n_groups``."""
    mine = parent.Merge(high=True)
    if index == 0:
        merged = mine
    else:
        x = MPI.COMM_WORLD.Create_intercomm(0, mine, 0, _TAG + index)
        merged = x.Merge(high=True)
        release = current().release
        release(x)
        release(mine)
    merged = _chain(merged, [None] * (n_groups - index - 1), n_old, index + 1)
    return Merged(merged, _old_new_intercomm(merged, n_old))


def _chain(merged: Any, parts: list[Any], n_old: int, first_index: int) -> Any:
    """Fold groups ``first_index``.. into ``merged``: an intercomm through each (old ∪ group) comm, then Merge.

    ``parts[j]`` is that (old ∪ group) comm on old ranks and None on earlier joiners, for whom
    ``peer_comm`` is not significant (only the local leader, old rank 0, uses it; the group's
    leader is rank ``n_old`` there).
    """
    release = current().release
    for j, part in enumerate(parts):
        peer = part if part is not None else merged
        x = merged.Create_intercomm(0, peer, n_old, _TAG + first_index + j)
        nxt = x.Merge(high=False)
        release(x)
        release(merged)
        if part is not None:
            release(part)
        merged = nxt
    return merged


def _old_new_intercomm(merged: Any, n_old: int) -> Any:
    old = merged.rank < n_old
    local = merged.Split(0 if old else 1, merged.rank)
    inter = local.Create_intercomm(0, merged, n_old if old else 0, _TAG - 1)
    current().release(local)  # the joiners' side spans their spawn groups
    return inter
