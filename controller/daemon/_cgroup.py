"""Each job in its own cgroup (v2), as Slurm's proctrack/cgroup does: every process the job starts on this machine
stays in it, whatever it does (a new session, a double fork, a cleared environment), so the controller can list
them, signal them all and kill them all at once (``cgroup.kill``), and knows the job is gone when the group is
empty.

The groups live under ``<cgroup v2 mount><the daemon's own cgroup>/malleable-<controller id>/job-<id>``. The job's
shepherd moves itself into its group before it starts anything (see ``_launch.SHEPHERD``). Where the machine has
no writable cgroup v2 hierarchy (no mount, no permission, a v1-only system) :attr:`JobCgroups.root` is None and the
controller falls back to the job's process group and its environment tag.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Iterable
from pathlib import Path

__all__ = ["JobCgroups", "cgroup2_base"]

log = logging.getLogger(__name__)


def cgroup2_base() -> Path | None:
    """This process's cgroup in the v2 hierarchy (the mount point plus the path of ``/proc/self/cgroup``), or
    None when there is no cgroup v2 mount."""
    mount = None
    try:
        with open("/proc/self/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) > 2 and parts[2] == "cgroup2":
                    mount = parts[1]
                    break
        own = next((ln.strip()[3:] for ln in open("/proc/self/cgroup") if ln.startswith("0::")), None)
    except OSError:
        return None
    if mount is None or own is None:
        return None
    return Path(mount) / own.lstrip("/")


class JobCgroups:
    """The cgroups of one controller's jobs.

    Args:
        controller_id: the controller's id (one folder per controller, so several share a machine).
        base: where to make the folder (default :func:`cgroup2_base`).
    """

    def __init__(self, controller_id: str, base: Path | None = None) -> None:
        self.root: Path | None = None
        base = base if base is not None else cgroup2_base()
        if base is None:
            log.info("no cgroup v2 hierarchy: jobs are tracked by process group and tag only")
            return
        root = base / f"malleable-{controller_id}"
        try:
            root.mkdir(exist_ok=True)
            probe = root / "job-probe"
            probe.mkdir(exist_ok=True)
            probe.rmdir()
        except OSError as e:
            log.info("cannot make cgroups under %s (%s): jobs are tracked by process group and tag only", base, e)
            return
        self.root = root

    def path(self, job_id: int) -> Path | None:
        """The job's cgroup folder (None without cgroups)."""
        return None if self.root is None else self.root / f"job-{job_id}"

    def create(self, job_id: int) -> str:
        """Make the job's group; returns its ``cgroup.procs`` file for the shepherd ("" without cgroups)."""
        p = self.path(job_id)
        if p is None:
            return ""
        try:
            p.mkdir(exist_ok=True)
        except OSError as e:
            log.warning("job %d: no cgroup (%s): tracked by process group and tag only", job_id, e)
            return ""
        return str(p / "cgroup.procs")

    def pids(self, job_id: int) -> list[int]:
        """Processes in the job's group (recursively; empty if it has none)."""
        p = self.path(job_id)
        if p is None or not p.exists():
            return []
        out: list[int] = []
        for procs in list(p.glob("**/cgroup.procs"))[:64]:      # the job's group and any it made inside
            try:
                out += [int(x) for x in procs.read_text().split()]
            except (OSError, ValueError):
                continue
        return sorted(set(out))

    def signal(self, job_id: int, sig: int) -> int:
        """Send ``sig`` to every process of the job's group (SIGKILL through ``cgroup.kill``, which no fork can
        outrun); returns how many processes there were."""
        pids = self.pids(job_id)
        if not pids:
            return 0
        p = self.path(job_id)
        assert p is not None
        if sig == signal.SIGKILL:
            try:
                (p / "cgroup.kill").write_text("1")
                return len(pids)
            except OSError:
                pass                      # kernels before 5.14: one by one
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        return len(pids)

    def remove(self, job_id: int) -> bool:
        """Remove the job's group if it is empty; whether it is gone."""
        p = self.path(job_id)
        if p is None or not p.exists():
            return True
        try:
            p.rmdir()
        except OSError:
            return False
        return True

    def sweep(self, active: Iterable[int]) -> None:
        """Remove the empty groups of jobs that are no longer active (after a restart too)."""
        if self.root is None:
            return
        keep = {f"job-{j}" for j in active}
        for p in self.root.glob("job-*"):
            if p.name not in keep and p.name[4:].isdigit():
                self.remove(int(p.name[4:]))

    def close(self) -> None:
        """Remove every empty group, and the controller's folder if nothing is left in it (running jobs keep
        theirs, for the next start)."""
        if self.root is None:
            return
        self.sweep(())
        try:
            self.root.rmdir()
        except OSError:
            pass
