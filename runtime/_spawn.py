"""Expansion over MPI: spawn one group per host (concurrently), one readiness barrier with a deadline, merge.

Roles and phases are named ``parent_*`` (processes already in the world) and ``child_*`` (spawned). All spawns of
one expansion are issued at once from threads, each on its own duplicate of the world, so k hosts cost about one
spawn. Then the only exchange before the merge is a barrier on each group's intercommunicator, which a joiner
enters from ``adapt_begin``: it proves that the joiner is alive and asks to merge, so nothing is ever sent to a
joiner that did not answer (with MPICH over OFI a message to a process that died poisons the sender's progress).
The parents poll it with a deadline and agree on the outcome, and rank 0 tells every joiner to merge (with the
group's place in the merge) or to exit. Everything else a joiner needs travels with the merge, in one
``allgather`` over the new world (see ``_expand.finish``). So an expansion costs ``MPI_Comm_spawn`` +
``MPI_Intercomm_merge`` + a barrier, a message and a collective, and a failed one leaves the old world untouched.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

from mpi4py import MPI

from malleable.errors import AdaptError, AdaptTimeout
from malleable.runtime._mpi import current
from malleable.runtime._record import get_logger
from malleable.runtime._waits import wait_request

TYPE_CHECKING = False   # typing stays unloaded: a joiner imports this on every expansion's path
if TYPE_CHECKING:
    import threading
    from typing import Any

    from malleable.runtime._layout import ExpandPlan

__all__ = ["INITIAL_OPTION", "Leftovers", "Merged", "child_give_up", "child_merge", "child_ready", "parent_go",
           "parent_merge", "parent_ready", "parent_spawn", "spawn_command"]

log = get_logger(__name__)

_TAG = 4711
_POLL = 0.0005  # longest sleep between polls during an adaptation: these waits are short, latency matters
INITIAL_OPTION = "malleable_initial"
"""``python -X`` option marking the processes ``malleable run``'s anchor spawns at the start: they join in
``init_adapt`` (they are part of the job's initial size), not in ``adapt_begin``."""
_ABORT = "abort"     # rank 0's word instead of go: the expansion is given up; both sides disconnect


class Leftovers:
    """What failed expansions left behind; owned by the runtime, which must settle it before MPI_Finalize.

    ``threads``: spawn threads still inside ``MPI_Comm_spawn`` when their expansion gave up (each cleans up its
    group by itself once the call returns). ``stale``: a group was abandoned with members that may be dead or
    stopped, which some MPIs still count as connected when finalizing. ``pending``: sends to abandoned joiners
    that may never complete (kept so their buffers outlive them). ``kept``: intercommunicators of groups given up
    without their joiners' word that they are done with them. A joiner still alive may yet send on such a
    communicator (its half of the readiness barrier); freed, its context id would go to the next spawn, and a
    late message then lands in that new communicator from a rank it does not have (Open MPI's ob1 aborts the
    process there). They are freed only at the job's end, when no spawn follows (:meth:`release`).
    """

    __slots__ = ("kept", "pending", "stale", "threads")

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []
        self.stale = False
        self.pending: list[Any] = []
        self.kept: list[Any] = []

    def drop(self, inter: Any) -> None:
        """Give up ``inter`` without its joiners' word: it is kept until :meth:`release`, and the job is stale."""
        self.kept.append(inter)
        self.stale = True

    def release(self) -> None:
        """Free the kept intercommunicators (the job is ending: no spawn reuses their context ids)."""
        for inter in self.kept:
            inter.Free()
        self.kept = []

    def settle(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the straggling threads; True if none is left inside MPI."""
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        self.threads = [t for t in self.threads if t.is_alive()]
        return not self.threads


def spawn_command(initial: bool = False) -> tuple[str, list[str]]:
    """The command that re-runs this program for joiners (``python -m pkg.mod ...`` is kept as ``-m``); the
    processes of the job's initial size get ``-X malleable_initial``."""
    argv = list(getattr(sys, "orig_argv", []) or [sys.executable, *sys.argv])
    return sys.executable, (["-X", INITIAL_OPTION] if initial else []) + argv[1:]


def _spawn_one(comm: Any, cmd: str, args: list[str], n: int, host: str | None, out: list, i: int,
               abandoned: threading.Event, timeout: float, leftovers: Leftovers) -> None:  # a thread per group
    try:
        _spawn_call(comm, cmd, args, n, host, out, i)
    finally:
        if abandoned.is_set():  # the expansion gave up while this call was inside MPI: undo it here
            _late_cleanup(out[i], timeout, leftovers)
            comm.Free()


def _late_cleanup(inter: Any, timeout: float, leftovers: Leftovers) -> None:
    """Tell a group that started after its expansion was given up to exit, and drop it (each parent's thread)."""
    if inter is None or isinstance(inter, Exception):
        return
    _give_up_groups(inter.Get_rank(), [inter], [not _meet(inter, timeout)], timeout, leftovers)
    log.info("a group spawned after its expansion was given up has been told to exit")


def _spawn_call(comm: Any, cmd: str, args: list[str], n: int, host: str | None, out: list, i: int) -> None:
    info = MPI.Info.Create()
    try:
        b = current()
        for key, value in b.spawn_info(b.spawn_host(host)).items():
            info.Set(key, value)
        errcodes: list[int] = []
        out[i] = comm.Spawn(cmd, args, maxprocs=n, info=info, root=0, errcodes=errcodes)
        out[i].Set_errhandler(MPI.ERRORS_RETURN)   # a joiner that died is an error returned here, not an abort
        bad = [e for e in errcodes if e != MPI.SUCCESS]
        if bad:
            out[i] = AdaptError(f"spawn of {n} process(es) on {host or 'the default host'} failed: {bad}")
    except MPI.Exception as e:
        out[i] = AdaptError(f"spawn of {n} process(es) on {host or 'the default host'} failed: {e.Get_error_string()}")
    finally:
        info.Free()


def parent_spawn(world: Any, plan: ExpandPlan, timeout: float, leftovers: Leftovers,
                 initial: bool = False) -> list[Any]:
    """Spawn the plan's groups concurrently; collective over ``world``.

    ``MPI_Comm_spawn`` returns once the joiners initialised MPI; whether they go on is :func:`parent_ready`'s
    question. A spawn still inside MPI at the deadline is left to its thread (recorded in ``leftovers``), which
    tells the group to exit once the call returns; the expansion fails at once.

    Returns:
        One intercommunicator per group, in plan order.

    Raises:
        AdaptError: on every rank of ``world`` when any group failed to spawn in time; groups that did start
            are told to exit and their intercommunicators are released.
    """
    import threading

    cmd, args = spawn_command(initial)
    k = len(plan.counts)
    dups = [world.Dup() for _ in range(k)]
    out: list[Any] = [None] * k
    abandoned = threading.Event()
    threads = [
        threading.Thread(target=_spawn_one, name=f"malleable-spawn-{i}", daemon=True,
                         args=(dups[i], cmd, args, plan.counts[i], plan.hosts[i], out, i, abandoned, timeout,
                               leftovers))
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
    started = [out[i] for i in range(k) if i not in late and out[i] is not None and not isinstance(out[i], Exception)]
    if started:
        _give_up_groups(world.rank, started, _agree(world, [_meet(x, timeout) for x in started]), timeout, leftovers)
    raise AdaptError("expansion failed: " + ("; ".join(problems) if problems else "a peer rank failed"))


def _meet(inter: Any, timeout: float, deadline: float | None = None) -> str:
    """This parent's side of the readiness barrier with one group: '' once every joiner entered it, else why not."""
    left = timeout if deadline is None else max(0.0, deadline - time.monotonic())
    try:
        wait_request(inter.Ibarrier(), left, "joiners ready to merge", cap=_POLL)
    except AdaptTimeout as e:
        return str(e)
    except MPI.Exception as e:       # a joiner died (Open MPI reports it here)
        return f"joiners: {e.Get_error_string()}"
    return ""


def _agree(world: Any, problems: list[str]) -> list[bool]:
    """Per group, whether every parent saw every joiner in the barrier (one collective over ``world``)."""
    seen = world.allgather([not p for p in problems])
    return [all(row[i] for row in seen) for i in range(len(problems))]


def parent_ready(world: Any, inters: list[Any], timeout: float, leftovers: Leftovers,
                 first: Callable[[float], None] | None = None, go: bool = True) -> None:
    """Last check before the blocking merge: every joiner is alive and asks to merge; collective over ``world``.

    Every group must reach a barrier on its intercommunicator within ``timeout``: a joiner that died, or stopped
    before its ``adapt_begin``, never does. The ranks agree on the outcome and rank 0 tells each joiner to merge
    or to exit. ``first`` (on rank 0) is another wait that must succeed. With ``go`` False a success is not
    announced yet: :func:`parent_go` does it later (an expansion prepared in the background merges at the
    application's next safe point).

    Raises:
        AdaptError: on every rank of ``world`` when a group is not ready; the groups are told to exit and dropped.
    """
    deadline = time.monotonic() + timeout
    problems = [_meet(x, timeout, deadline) for x in inters]
    if first is not None and not any(problems):
        try:
            first(max(0.0, deadline - time.monotonic()))
        except AdaptTimeout as e:
            problems = [str(e)] * len(inters)
    seen = _agree(world, problems)
    if all(seen):
        if go:
            parent_go(world, inters)
        return
    _give_up_groups(world.rank, inters, seen, timeout, leftovers)
    why = next((p for p in problems if p), "joiners not ready on another rank")
    raise AdaptError(f"expansion failed: {why}")


def parent_go(world: Any, inters: list[Any]) -> None:
    """Rank 0 tells every joiner to merge, with its group's place: ``(index, groups, old size)``."""
    if world.rank != 0:
        return
    MPI.Request.waitall([inter.isend((i, len(inters), world.size), dest=r, tag=_TAG + 1)
                         for i, inter in enumerate(inters) for r in range(inter.remote_size)])


def _give_up_groups(rank: int, inters: list[Any], seen: list[bool], timeout: float, leftovers: Leftovers) -> None:
    """Release given-up groups alike on every parent. A group every parent met in the barrier is alive and waits
    for rank 0's word: it is told to exit, and both sides disconnect. Nothing is sent to any other group (a member
    may be dead, and a message to a dead process may poison the sender's MPI): it is dropped (kept unfreed until
    the job ends, see :class:`Leftovers`), the job is marked stale, and its joiners give up on their own when
    their wait ends."""
    for inter, ok in zip(inters, seen, strict=True):
        if not ok:
            leftovers.drop(inter)
            continue
        sends = _try_sends(inter, _ABORT, _TAG + 1) if rank == 0 else []
        try:
            for req in sends:
                wait_request(req, timeout, "joiners told to exit", cap=_POLL)
            # the joiners meet the parents once they have the word: disconnecting before that may lose it
            wait_request(inter.Ibarrier(), timeout, "joiners told to exit", cap=_POLL)
            inter.Disconnect()
        except (AdaptTimeout, MPI.Exception):
            leftovers.pending += sends
            leftovers.drop(inter)


def abandon(world: Any, inters: list[Any], timeout: float, leftovers: Leftovers) -> None:
    """Give up groups that were ready but never merged (the job ended, or another decision came first); collective
    over ``world``: the joiners exit after ``MPI_Finalize``."""
    _give_up_groups(world.rank, inters, [True] * len(inters), timeout, leftovers)


def _try_sends(inter: Any, msg: Any, tag: int) -> list[Any]:
    """Send ``msg`` to every joiner of ``inter`` that can still be reached (a dead one makes its send fail)."""
    sends = []
    for r in range(inter.remote_size):
        try:
            sends.append(inter.isend(msg, dest=r, tag=tag))
        except MPI.Exception as e:
            log.info("joiner %d of a given-up group is unreachable: %s", r, e.Get_error_string().splitlines()[0])
    return sends


def child_ready(parent: Any, timeout: float, go_timeout: float | None, started: float) -> tuple[int, int, int]:
    """Joiner side of :func:`parent_ready`: ``(index, groups, old size)`` of the merge; a joiner told to exit (or
    left without an answer) ends here.

    ``go_timeout`` None waits for the parents' word without limit (an overlapped expansion merges at their next
    safe point). ``started`` (``time.monotonic()``) is when this joiner's ``init_adapt`` ran, right after its
    ``MPI_Init`` let the parents' spawn return.
    """
    # give up before the parents do (they wait ``timeout`` from the spawn's return): a failed group is then gone
    # before they spawn anything else
    left = max(0.0, started + 0.75 * timeout - time.monotonic())
    try:
        wait_request(parent.Ibarrier(), left, "parents ready to merge", cap=_POLL)
        go = wait_request(parent.irecv(source=0, tag=_TAG + 1), go_timeout, "go from rank 0",
                          cap=_POLL if go_timeout is not None else 0.005)
    except (AdaptTimeout, MPI.Exception) as e:
        log.error("joiner gives up: %s", e)  # noqa: TRY400 - the timeout is the whole story
        child_give_up(parent)
    if isinstance(go, tuple):
        return go
    log.warning("the expansion was given up by the parents; joiner exits")
    try:
        wait_request(parent.Ibarrier(), timeout, "parents giving the expansion up", cap=_POLL)
    except (AdaptTimeout, MPI.Exception):
        child_give_up(parent)
    parent.Disconnect()
    MPI.Finalize()
    _exit_finalized()
    raise AssertionError("unreachable")


def child_give_up(parent: Any) -> None:
    """End a joiner whose expansion failed: finalize (where the MPI allows it), then exit 0; the launchers take a
    process that exits without ``MPI_Finalize`` for a failed one (hydra then signals the job, PRRTE ends it)."""
    parent.Free()
    if current().finalize_on_give_up:
        MPI.Finalize()
        _exit_finalized()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _exit_finalized() -> None:
    """End a joiner that finalized MPI with status 0: the C library's ``exit``, which runs the MPI library's exit
    handlers (after ``os._exit`` hydra takes the process for a crashed one and, unless told to keep going, ends
    the whole job), but not the interpreter's teardown."""
    import ctypes

    sys.stdout.flush()
    sys.stderr.flush()
    ctypes.CDLL(None).exit(0)


class Merged:
    """Result of the merge: the new world and the old↔joiners intercommunicator."""

    __slots__ = ("intercomm", "world")

    def __init__(self, world: Any, intercomm: Any) -> None:
        self.world, self.intercomm = world, intercomm


def parent_merge(world: Any, inters: list[Any]) -> Merged:
    """Merge the old world with the spawned groups (old ranks first, then groups in order).

    With one group, its spawn intercommunicator already joins exactly the old and the new processes and becomes
    the window's; with several, the window gets a new one and the spawn intercommunicators are released.
    """
    n_old = world.size
    parts = [inter.Merge(high=False) for inter in inters]
    if len(inters) == 1:
        return Merged(parts[0], inters[0])
    merged = _chain(parts[0], parts[1:], n_old, 1)
    inter = _old_new_intercomm(merged, n_old)
    for x in inters:
        current().release(x)
    return Merged(merged, inter)


def child_merge(parent: Any, index: int, n_groups: int, n_old: int) -> Merged:
    """Joiner side of :func:`parent_merge` for group ``index`` of ``n_groups``."""
    mine = parent.Merge(high=True)
    if n_groups == 1:
        return Merged(mine, parent)
    release = current().release
    if index == 0:
        merged = mine
    else:
        x = MPI.COMM_WORLD.Create_intercomm(0, mine, 0, _TAG + index)
        merged = x.Merge(high=True)
        release(x)
        release(mine)
    merged = _chain(merged, [None] * (n_groups - index - 1), n_old, index + 1)
    inter = _old_new_intercomm(merged, n_old)
    release(parent)
    return Merged(merged, inter)


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
