"""The live core's side of job mounts (``controller start --bb-mount-root``): which hosts of a running job get its
file system mounted or unmounted, and when; the shell (:mod:`._jobmount`) does it.

A job's mount follows its hosts while it runs:

- **grow**: an expansion's order reaches the job only once its added hosts are clean *and* mounted: the first
  poll that finds them clean asks for the mount (:class:`~._events.MountFs`), later polls answer "nothing yet"
  until the shell reports (:class:`~._events.FsMounted`). A mount that fails ends the order as if the job had
  refused it (its hosts are checked and freed, the job goes on at its size), and says why in the job's events;
- **shrink**: a host the job left is unmounted (:class:`~._events.UnmountFs`) once it is checked free of the job's
  processes (the host-free check), never before: no mount is pulled from under a running process;
- every outcome, the mount before the launch and the unmount at the end included, is a job event ``mount`` or
  ``umount`` naming the host and the path (``malleable info``).

The record of where a job's file system is mounted is :attr:`~._fsrecord.JobFs.mounted` (stored with the job).
"""

from __future__ import annotations

from collections.abc import Sequence

from ._events import FsMounted, MountFs, UnmountFs
from ._fsrecord import FsPhase
from ._records import JobRec, JobState
from ._state import Part

__all__ = ["MountPlan", "to_mount", "to_unmount"]


def to_mount(added: Sequence[str], mounted: Sequence[str], mounting: Sequence[str]) -> tuple[str, ...]:
    """The hosts of an expansion (``added``) whose mount must still be asked for."""
    return tuple(h for h in added if h not in mounted and h not in mounting)


def to_unmount(host: str, hosts: Sequence[str], mounted: Sequence[str]) -> bool:
    """Whether a job whose file system is ``mounted`` on those hosts and that holds ``hosts`` (those of an
    expansion in flight included) must lose its mount on ``host``, just checked free of its processes."""
    return host in mounted and host not in hosts


class MountPlan(Part):
    """Where a running job's file system is mounted, as its hosts change (see the module docstring)."""

    def _mounts(self, j: JobRec) -> bool:
        return self.config.mounts and bool(j.bb) and j.fs.phase == FsPhase.READY and bool(j.fs.address)

    def order_ready(self, j: JobRec) -> bool:
        """Whether the job's expansion order (its added hosts clean) may be sent: every added host has the mount.
        Asks for the missing ones the first time."""
        o = j.order
        if o is None or o.kind != "expand" or not self._mounts(j):
            return True
        new = to_mount(o.added, j.fs.mounted, j.fs.mounting)
        if new:
            j.fs.mounting = [*j.fs.mounting, *new]
            self.out.save(j)
            uid, gid = j.acting_ids
            self.out.emit(MountFs(j.id, j.fs.address, new, uid, gid))
        return all(h in j.fs.mounted for h in o.added)

    def host_free(self, job_id: int, host: str) -> None:
        """``host`` was checked free of job ``job_id``'s processes: a running job that left it loses its mount."""
        j = self.state.jobs.get(job_id)
        if j is None or j.state != JobState.RUNNING or not self._mounts(j):
            return
        if to_unmount(host, self.state.all_hosts(j), j.fs.mounted):
            j.fs.mounted = [h for h in j.fs.mounted if h != host]
            self.out.save(j)
            self.out.emit(UnmountFs(j.id, (host,)))

    def reported(self, e: FsMounted) -> str:
        """A mount or unmount was done (or not): each host's outcome is a job event, the record follows. Returns
        why the job's expansion order must be given up ("" when not: the mount of its added hosts failed)."""
        for host, why in e.results:
            text = f"{e.path} on {host}: " + (f"failed: {why}" if why else "done")
            self.out.log_event(e.job_id, e.verb, text[:500], e.now)
        j = self.state.jobs.get(e.job_id)
        if j is None or e.verb != "mount" or j.fs.phase not in (FsPhase.STARTING, FsPhase.READY):
            return ""
        done = [h for h, why in e.results if not why]
        failed = {h: why for h, why in e.results if why}
        j.fs.mounting = [h for h in j.fs.mounting if h not in dict(e.results)]
        j.fs.mounted = list(dict.fromkeys([*j.fs.mounted, *done]))
        self.out.save(j)
        o = j.order
        lost = [h for h in (o.added if o is not None and o.kind == "expand" and not o.sent else ()) if h in failed]
        return "; ".join(f"mounting the job's file system on {h}: {failed[h]}" for h in lost)[:500]
