"""The ends of a process's time in the job: leaving after a shrink, the job's end, unhandled errors, and pauses.

``at_exit`` runs at interpreter exit: a spawned process reports its ``sys.exit`` status to rank 0 (the job ends with
the first non-zero one, whichever rank it came from), the spawn group meets, what failed expansions left behind is
settled (no thread may be inside MPI at ``MPI_Finalize``), and the process ends with the job's status.
"""

from __future__ import annotations

import atexit
import functools
import os
import sys
import time
from collections.abc import Callable

from mpi4py import MPI

from malleable.errors import AdaptTimeout
from malleable.runtime import _mpi, _spawn
from malleable.runtime._record import get_logger
from malleable.runtime._types import Pause, ProbeResult, Resume, Status
from malleable.runtime._waits import wait_request

TYPE_CHECKING = False   # typing stays unloaded: a joiner imports this on every expansion's path
if TYPE_CHECKING:
    from typing import Any

__all__ = ["at_exit", "exit_status", "group_exit_barrier", "install_hooks", "leave", "pause", "progress"]

log = get_logger(__name__)


def progress(comm: Any = None) -> None:
    """Let the MPI library move pending traffic: a nonblocking probe on this process's ``MPI_COMM_WORLD`` and on
    ``comm``, the job's world. Both are needed: MPICH over OFI moves a message to a process of another spawn group
    (the last message of a barrier, say) only when the sender probes a communicator that reaches it."""
    MPI.COMM_WORLD.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG)
    if comm is not None and comm != MPI.COMM_NULL:
        comm.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG)


def leave(whole_group: bool = False, spanned: bool = False) -> None:
    """Leaving side of a shrink: wait for the rest of the spawn group, then finalize MPI.

    A group that leaves whole finalizes at once (``MPI_Finalize`` is collective over connected processes: the group
    meets there); a member of a split group waits, idle, until the rest of its group leaves too. Where a process
    connected to other groups (``spanned``) cannot finalize once they end (``finalize_in_job``), such a member
    ends without it: the rest of its group leaves only at the job's end.
    """
    if not whole_group:
        group_exit_barrier(timeout=None)
        if spanned and not _mpi.current().finalize_in_job:
            return
    MPI.Finalize()


def group_exit_barrier(timeout: float | None, comm: Any = None) -> None:
    """All members of this process's spawn group (its MPI_COMM_WORLD) meet here before finalizing.

    A group that leaves whole meets within moments: polled closely for the first second, then every 50 ms (the
    members of a split group wait here, idle, until the rest of their group leaves). ``comm`` (the job's world)
    is probed meanwhile, so that this process's last messages to other groups go out.
    """
    req = MPI.COMM_WORLD.Ibarrier()
    poke = functools.partial(progress, comm) if comm is not None else None
    try:
        wait_request(req, 1.0 if timeout is None else min(1.0, timeout), "rest of the spawn group", cap=0.001,
                     poke=poke)
    except AdaptTimeout:
        wait_request(req, None if timeout is None else max(0.0, timeout - 1.0), "rest of the spawn group to leave",
                     cap=0.05, poke=poke)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def at_exit(rt: Any) -> None:
    """The job's end on this process (an ``atexit`` handler): report the exit status to rank 0, meet the spawn
    group, settle what failed expansions left, and end with the job's status."""
    if rt is not None and rt.finished:
        # A leaver: its host is free only once the process is gone, and the interpreter's teardown
        # (hundreds of ms with numpy loaded, on a busy node) is of no use to anybody: end here with
        # the C library's exit(), which still runs the MPI library's own exit handlers (os._exit
        # would skip them, and hydra then takes the process for a crashed one).
        _flush()
        _c_exit(0)
    if rt is None or MPI.Is_finalized():
        return
    code = rt.exit_code
    if rt.background is not None:  # an expansion still being prepared: its joiners must exit
        rt.background.abandon(rt.timeout, rt.leftovers)
    elif rt.prepared is not None:
        _spawn.abandon(rt.world, rt.prepared.inters, rt.timeout, rt.leftovers)
    if rt.alive_fd is not None:  # a spawned process: rank 0 gives the job this status if it is the first error
        try:
            os.write(rt.alive_fd, f"exit {code}\n".encode())
        except OSError:
            pass
    try:
        group_exit_barrier(timeout=rt.timeout * 10, comm=rt.world)
    except AdaptTimeout:
        log.warning("members of this process's spawn group never reached the end; finalizing anyway")
    b = _mpi.current()
    bare = (rt.spanned and not b.finalize_in_job) or (rt.leftovers.stale and not b.finalize_after_failed_spawn)
    if bare:
        # the job's processes all end without MPI_Finalize (below): they meet first over the job's world, so
        # that none ends while a message it sent (its part of the last gather) is still on its way
        try:
            wait_request(rt.world.Ibarrier(), rt.timeout, "the job's processes before their end", cap=0.001)
        except (AdaptTimeout, MPI.Exception) as e:
            log.warning("the job's processes did not all reach the end: %s", e)
    if rt.listener is not None:
        expected = [(g.gid, m) for g in rt.layout.groups if not g.base for m in range(g.size)]
        try:
            rt.listener.accept(expected, rt.timeout)   # joiners report in after their merge
        except AdaptTimeout as e:
            log.warning("%s", e)
        bad = [c for c in rt.listener.collect_exits(rt.timeout, progress=functools.partial(progress, rt.world))
               if c]
        if bad and not code:
            log.error("a spawned process of the job exited with status %d; so does the job", bad[0])
            code = bad[0]
    if not rt.leftovers.settle(rt.timeout):
        log.error("a spawn of a failed expansion is still inside MPI; ending without MPI_Finalize")
        _flush()
        if _mpi.current().reap_stuck_spawn:
            _reap_stuck_joiners(rt)
        os._exit(code or 1)
    if bare:
        if not b.finalize_in_job and rt.alive_fd is not None:
            code = 0  # a spawned process: rank 0 ends the job with its status
        elif not b.finalize_in_job and rt.listener is not None:
            try:   # the job's status reaches the launcher once its spawned processes are gone (see below)
                rt.listener.wait_gone(rt.listener.gids(), rt.timeout)
            except AdaptTimeout as e:
                log.warning("%s", e)
        _flush()
        os._exit(code)  # finalizing would wait for dead or stopped joiners forever, or fail (finalize_in_job)
    rt.leftovers.release()  # no spawn follows now that could reuse their context ids
    if rt.alive_fd is not None:
        code = 0  # a spawned process: rank 0 ends the job with its status (launchers differ on spawned ones)
    if code and rt.listener is not None:
        # a failing job's status must not reach the launcher while spawned processes still run (some launchers
        # then kill them and report their own status): finalize, wait until they are gone, then exit
        MPI.Finalize()
        try:
            rt.listener.wait_gone(rt.listener.gids(), rt.timeout)
        except AdaptTimeout as e:
            log.warning("%s", e)
    if rt.listener is not None:
        rt.listener.close()
    if code != rt.exit_code or MPI.Is_finalized():  # end with another status than sys.exit's
        if not MPI.Is_finalized():
            MPI.Finalize()
        _flush()
        _c_exit(code)


def _c_exit(code: int) -> None:
    """End the process with the C library's ``exit``: the MPI library's exit handlers run, Python's teardown not."""
    import ctypes

    ctypes.CDLL(None).exit(code)


def exit_status(arg: Any) -> int:
    """The process status ``sys.exit(arg)`` gives."""
    if arg is None:
        return 0
    if isinstance(arg, int):
        return arg & 0xFF
    return 1


def _excepthook(state: Callable[[], Any], etype: type[BaseException], value: BaseException, tb: Any) -> None:
    sys.__excepthook__(etype, value, tb)
    rt = state()
    if rt is not None and not rt.finished and not MPI.Is_finalized() and etype is not KeyboardInterrupt:
        comm = rt.world if rt.world is not None else MPI.COMM_WORLD
        sys.stderr.write(f"malleable: unhandled {etype.__name__} on rank {comm.rank}; aborting the job\n")
        sys.stderr.flush()
        comm.Abort(1)


def install_hooks(state: Callable[[], Any]) -> None:
    """Install the process-wide hooks once per process; ``state()`` gives the runtime's state (or None)."""
    atexit.register(lambda: at_exit(state()))
    plain_exit = sys.exit

    def recording_exit(arg: Any = None) -> None:
        """``sys.exit`` that records the status, so rank 0 can make it the job's (see at_exit)."""
        rt = state()
        if rt is not None:
            rt.exit_code = exit_status(arg)
        plain_exit(arg)

    sys.exit = recording_exit
    if os.environ.get("MALLEABLE_ABORT_ON_ERROR", "1") != "0":
        sys.excepthook = functools.partial(_excepthook, state)


def _reap_stuck_joiners(rt: Any) -> None:
    """Kill the launcher's other children on this host that are not ranks of this job's world: joiners of a
    failed spawn stuck in ``MPI_Init`` (their connect/accept never completes), which would keep the launcher
    waiting after the job is over. Only called when the job ends with such a spawn still inside MPI."""
    import psutil  # only here: the normal exit path does not need it

    try:
        ours = set(rt.world.allgather(os.getpid()))
        parent = psutil.Process().parent()
        if rt.world.rank != 0 or parent is None:
            return
        me = psutil.Process().cmdline()
        for child in parent.children():
            if child.pid not in ours and child.cmdline() == me:
                log.warning("killing joiner %d stuck in MPI_Init after its expansion failed", child.pid)
                child.kill()
    except (psutil.Error, MPI.Exception) as e:
        log.warning("could not look for stuck joiners: %s", e)


def pause(rt: Any, p: Pause) -> ProbeResult:
    """Every rank waits here without using the CPU until the pause ends (rank 0 decides when; the others sleep in
    a barrier polled every 50 ms)."""
    t0 = time.monotonic()
    if rt.world.rank == 0:
        log.info("job paused at probe %d (%s)", rt.probes, f"{p.seconds:g} s" if p.seconds else "until resumed")
        deadline = None if p.seconds is None else t0 + p.seconds
        while deadline is None or time.monotonic() < deadline:
            if not rt.source.local and isinstance(rt.source.poll(rt.probes), Resume):
                break
            time.sleep(0.05 if deadline is None else min(0.05, max(0.0, deadline - time.monotonic())))
    wait_request(rt.world.Ibarrier(), None, "the end of the pause", cap=0.05)
    paused = time.monotonic() - t0
    if rt.world.rank == 0:
        log.info("job resumed after %.2f s", paused)
        rt.source.progress("pause", {"paused_seconds": paused, "probe": rt.probes})
    return ProbeResult(False, Status.STAYING, {"paused": paused, "probe": rt.probes})
