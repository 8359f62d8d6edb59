"""Job mounts: a job's own file system mounted at ``<root>/<job id>/fs`` on every host of the job, for unmodified
programs (``$MALLEABLE_FS_MOUNT``).

The operator names the root (``controller start --bb-mount-root DIR``); :func:`check_root` makes sure it is a
folder that only the daemon's user may change (a user who could write there could put a link where a mount point
is made). Before a job with a burst buffer is launched, the shell (:mod:`._fsshell`) calls :meth:`JobMounts.mount`:
on each host of the job a small child (``python -m malleable.controller.daemon._jobmount``, reached like the data
servers: directly, through ``netns-launch`` or ssh) reads its request on stdin (the address, the file system's
secret, the job's user) and mounts with adhocfs's own :func:`~malleable.adhocfs._fuse_mount.mount`. Its mount
daemon is the operator's code under the operator's credential, so it runs as the daemon's user (root); it touches
no path of the user's, only the network and the mount point, which is made where no user can write:

1. ``<root>/<job id>`` is made root's, mode 0700, and ``fs`` in it, by descriptor (``O_NOFOLLOW``,
   ``fstat``-checked): nobody else can put a link on the way;
2. the file system is mounted on ``<root>/<job id>/fs`` with ``allow_other`` and ``default_permissions``, every
   file shown as the job's user's (so the kernel lets the user do what an owner may);
3. only then is ``<root>/<job id>`` given to the job's user (``fchown``, still 0700): the user gets in, other users
   do not (the folder is the user's alone), and the user cannot move the mount point (the kernel refuses to
   rename a mount point).

A root job's mount is root's alone (no ``allow_other``).

A host a running job grows onto gets its mount the same way (:meth:`JobMounts.mount` with ``more``). Where the
hosts share one file tree (the namespace hosts), ``<root>/<job id>`` is the user's already there and is not taken
back (the job's processes on its other hosts use it): ``fs`` in it is checked by descriptor (a folder of the
daemon's user, not a link, not a mount), and the mount must then show up at exactly its path in the mount daemon's
mount table (read through ``/proc`` opened before the mount), else it is undone and the mount fails: a link the
user swapped in between would otherwise have put the mount elsewhere. :meth:`JobMounts.unmount_hosts` takes the
mount down from the hosts a job left, and only theirs.

Every mount daemon carries the tag ``<controller>.mnt<job>`` (``MALLEABLE_JOB_TAG``), by which it is found again
without any record: :meth:`JobMounts.unmount` (after the stage-out, on every host) and :meth:`JobMounts.sweep` (at
the daemon's start: every mount of this controller whose job is not running any more, left by a killed
controller) look the daemons up by their tag, detach their mount inside the daemon's own mount namespace
(``nsenter --mount``, ``umount -l``), end the daemon and remove the mount point.

Namespace hosts of the test cluster share one file tree; each login (``netns-launch``) has a mount namespace of
its own. A namespace host's mount daemon lives in the mount namespace of the login that mounted it, so the job's
processes on that host are started through a launcher (:data:`NETNS_WRAPPER`, written at start) that enters that
namespace first: every host has its own mount (its own daemon, in its own network namespace) at the same path.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import stat
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from malleable.errors import ConfigError

from ._hostpool import TAG_VAR, HostPool, scan_tagged

__all__ = ["MOUNT_ENV", "NETNS_WRAPPER", "JobMounts", "check_root", "mounts_under"]

log = logging.getLogger(__name__)

MOUNT_ENV = "MALLEABLE_FS_MOUNT"
"""Where the job's file system is mounted on every host of the job."""

NETNS_WRAPPER = ".netns-launch"
"""The launcher of jobs with a mount on a namespace pool, written in the root at start."""

_NS = ".ns"              # <root>/.ns/<job>/<host>: the mount daemon's pid on each namespace host
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FSTYPE = "fuse.adhocfs"
MOUNT_TIMEOUT = 60.0     # seconds one host's mount may take
EXIT_WAIT = 10.0         # seconds a mount daemon may take to exit after its mount is detached


def check_root(path: str) -> str:
    """The mount root ``path`` made ready (created if missing, mode 0755): its real path.

    Raises:
        ConfigError: not absolute, not a folder, or one that another user than the daemon's may change (its
            owner, group or others' write bit), in one line.
    """
    if not path or not os.path.isabs(path):
        raise ConfigError(f"--bb-mount-root must be an absolute path, got {path!r}")
    real = os.path.realpath(path)
    if not os.path.lexists(real):
        try:
            os.makedirs(real, mode=0o755)
        except OSError as e:
            raise ConfigError(f"--bb-mount-root {path}: cannot make it: {e.strerror}") from None
    try:
        fd = os.open(real, _DIR)
    except OSError as e:
        raise ConfigError(f"--bb-mount-root {path}: not a folder ({e.strerror})") from None
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    if st.st_uid != os.geteuid():
        raise ConfigError(f"--bb-mount-root {path} is owned by uid {st.st_uid}, not by the controller's user "
                          f"(uid {os.geteuid()}): jobs' mount points are made in it")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ConfigError(f"--bb-mount-root {path} may be written by other users (mode {stat.S_IMODE(st.st_mode):o}"
                          f"): chmod go-w {path}")
    from malleable.adhocfs._fuse_mount import fuse_unavailable

    why = fuse_unavailable()
    if why:
        raise ConfigError(f"--bb-mount-root: FUSE is unavailable on this host: {why}")
    return real


def mounts_under(root: str, mountinfo: str = "/proc/self/mountinfo") -> list[str]:
    """adhocfs mount points under ``root`` in the mount namespace whose ``mountinfo`` is given."""
    try:
        with open(mountinfo, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return []
    return [where for where, _ in _adhocfs_mounts(text) if where.startswith(root.rstrip("/") + "/")]


def _adhocfs_mounts(mountinfo: str) -> list[tuple[str, str]]:
    """``(mount point, source)`` of every adhocfs mount in the text of a ``mountinfo``."""
    out = []
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) > 4 and tail[:1] == [_FSTYPE]:
            where = fields[4].replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n")
            out.append((where.replace("\\134", "\\"), tail[1] if len(tail) > 1 else ""))
    return out


class JobMounts:
    """The job mounts of one daemon.

    Args:
        pool: the hosts (how to reach them).
        root: the mount root (checked by :func:`check_root`).
        cid: the controller id (part of the mount daemons' tag).
    """

    def __init__(self, pool: HostPool, root: str, cid: str) -> None:
        self.pool = pool
        self.root = root
        self.cid = cid
        self.wrapper = ""
        if pool.kind == "netns":
            self.wrapper = self._write_wrapper()
            os.makedirs(os.path.join(root, _NS), mode=0o755, exist_ok=True)

    def path(self, job_id: int) -> str:
        """Where job ``job_id``'s file system is mounted."""
        return os.path.join(self.root, str(job_id), "fs")

    def tag(self, job_id: int) -> str:
        """The tag of job ``job_id``'s mount daemons."""
        return f"{self.cid}.mnt{job_id}"

    def targets(self, hosts: Sequence[str]) -> list[str]:
        """The hosts a mount is made on: every slot of a ``local`` pool is this machine (one mount)."""
        hosts = list(dict.fromkeys(hosts))
        return hosts[:1] if self.pool.kind == "local" else hosts

    # -- the launch ----------------------------------------------------------------------------------------------
    def job_env(self, job_id: int) -> dict[str, str]:
        """What a job with a mount gets in its environment: the mount's path (and, on a namespace pool, the
        launcher that enters each host's mount namespace, for the runtime's spawns)."""
        env = {MOUNT_ENV: self.path(job_id)}
        if self.wrapper:
            env["MALLEABLE_LAUNCHER_EXEC"] = self.wrapper
        return env

    def job_argv(self, argv: list[str]) -> list[str]:
        """mpiexec's command line of a job with a mount: on a namespace pool, its launcher is :data:`NETNS_WRAPPER`
        (in place of the pool's ``netns-launch``, wherever the MPI's dialect names it)."""
        if not self.wrapper:
            return argv
        real = str(self.pool.launcher_exec)
        return [self.wrapper if a == real else a for a in argv]

    def _write_wrapper(self) -> str:
        """The namespace pool's launcher for jobs with a mount: ``netns-launch`` entered from the mount namespace of
        the host's mount daemon of the job (found by the pid file under ``.ns``), else plain ``netns-launch``."""
        real = str(self.pool.launcher_exec)
        text = f"""#!/bin/sh
# Written by the malleable controller: netns-launch, from the mount namespace of the job's mount on that host.
h=""; skip=""
for a in "$@"; do                  # the host: the first word that is no ssh option (nor an option's value)
  if [ -n "$skip" ]; then skip=""; continue; fi
  case $a in
    -[BbcDEeFIiJLlmOopQRSWw]) skip=1 ;;
    -*) ;;
    *) h=${{a##*@}}; break ;;
  esac
done
j=${{{TAG_VAR}:-}}; j=${{j##*.}}
f="{self.root}/{_NS}/$j/$h"
if [ -n "$j" ] && [ -n "$h" ] && [ -r "$f" ]; then
  p=$(cat "$f")
  if grep -q _fuse_mount "/proc/$p/cmdline" 2>/dev/null; then
    exec nsenter --mount="/proc/$p/ns/mnt" --wd="$PWD" -- {real} "$@"
  fi
fi
exec {real} "$@"
"""
        path = os.path.join(self.root, NETNS_WRAPPER)
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o755)
        os.replace(tmp, path)
        return path

    # -- mount -------------------------------------------------------------------------------------------------
    def mount(self, job_id: int, address: str, secret: str, hosts: Sequence[str], uid: int | None,
              gid: int | None, more: bool = False) -> dict[str, str]:
        """Mount job ``job_id``'s file system at ``address`` on every one of ``hosts`` (concurrently), for the job's
        user ``uid``/``gid`` (None: the daemon's); each host with "" (mounted) or why not. When one fails, the
        mounts this call made are taken down again: every mount of the job before the launch, only the new hosts'
        for ``more`` (hosts a running job grows onto; the mounts of its other hosts are in use). On a ``local``
        pool the job's one mount serves every slot: ``more`` has nothing to do."""
        if more and self.pool.kind == "local":
            return {h: "" for h in hosts}
        targets = self.targets(hosts)
        req = {"address": address, "secret": secret, "dir": self.path(job_id), "root": self.root,
               "uid": uid, "gid": gid, "tag": self.tag(job_id)}
        with ThreadPoolExecutor(max_workers=min(8, max(1, len(targets)))) as ex:
            answers = dict(zip(targets, ex.map(lambda h: self._run_on(h, "mount", req), targets), strict=True))
        out = {h: str(a.get("error") or "") for h, a in answers.items()}
        if self.pool.kind == "netns":
            self._write_pids(job_id, {h: int(a["pid"]) for h, a in answers.items() if not a.get("error")})
        if any(out.values()):
            made = [h for h, why in out.items() if not why]
            if more:
                self.unmount_hosts(job_id, made)
            else:
                self.unmount(job_id, targets)
            out.update({h: "taken down again: the mount failed on another host" for h in made})
            return out
        log.info("job %d: file system mounted at %s on %d host(s)", job_id, self.path(job_id), len(targets))
        return out

    def _write_pids(self, job_id: int, pids: dict[str, int]) -> None:
        folder = Path(self.root, _NS, str(job_id))
        folder.mkdir(parents=True, exist_ok=True, mode=0o755)
        for h, pid in pids.items():
            (folder / h).write_text(str(pid))

    def _run_on(self, host: str, verb: str, req: dict[str, Any]) -> dict[str, Any]:
        """Run the child with ``verb`` and ``req`` on ``host``; its one JSON answer (``error`` when it failed)."""
        cmd = [sys.executable, "-m", __name__, verb]
        argv = cmd if self.pool.kind == "local" else self.pool._remote_argv(host, cmd)  # noqa: SLF001 - its way in
        env = {k: v for k, v in os.environ.items() if k not in ("MALLEABLE_KEY", "MALLEABLE_KEY_FILE",
                                                                  "MALLEABLE_TOKEN", TAG_VAR)}
        try:
            done = subprocess.run(argv, input=json.dumps(req), capture_output=True, text=True, env=env,
                                  timeout=MOUNT_TIMEOUT, start_new_session=True, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            return {"error": f"{verb} did not answer: {e}"}
        lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
        try:
            return dict(json.loads(lines[-1]))
        except (IndexError, ValueError):
            text = " ".join((done.stderr or done.stdout).split())[-300:]
            return {"error": f"{verb} exited {done.returncode}: {text or 'no answer'}"}

    # -- unmount -----------------------------------------------------------------------------------------------
    def unmount(self, job_id: int, hosts: Sequence[str]) -> str:
        """Take job ``job_id``'s mounts down on ``hosts`` (on this machine for local and namespace pools: every
        host's mount daemon is here); "" or what went wrong."""
        if self.pool.kind in ("local", "netns"):
            errors = _unmount_here(self.root, {job_id}, self.cid, keep=None)
        else:
            req = {"root": self.root, "cid": self.cid, "jobs": [job_id]}
            with ThreadPoolExecutor(max_workers=min(8, max(1, len(hosts)))) as ex:
                answers = list(ex.map(lambda h: (h, self._run_on(h, "unmount", req)), self.targets(hosts)))
            errors = [f"{h}: {a['error']}" for h, a in answers if a.get("error")]
        with contextlib.suppress(OSError):
            for f in Path(self.root, _NS, str(job_id)).glob("*"):
                f.unlink()
            Path(self.root, _NS, str(job_id)).rmdir()
        if errors:
            log.warning("job %d: unmounting %s: %s", job_id, self.path(job_id), "; ".join(errors))
        else:
            log.info("job %d: %s unmounted on every host, its mount point removed", job_id, self.path(job_id))
        return "; ".join(errors)

    def unmount_hosts(self, job_id: int, hosts: Sequence[str]) -> dict[str, str]:
        """Take job ``job_id``'s mount down on ``hosts`` only (hosts a running job left: its other hosts keep
        theirs, and the mount point with them); each host with "" or what went wrong. Nothing to do on a ``local``
        pool (its one mount serves every slot until the job ends)."""
        if self.pool.kind == "local":
            return {h: "" for h in hosts}
        if self.pool.kind == "netns":
            return {h: self._unmount_netns(job_id, h) for h in hosts}
        req = {"root": self.root, "cid": self.cid, "jobs": [job_id]}
        with ThreadPoolExecutor(max_workers=min(8, max(1, len(hosts)))) as ex:
            answers = list(ex.map(lambda h: (h, self._run_on(h, "unmount", req)), hosts))
        return {h: str(a.get("error") or "") for h, a in answers}

    def _unmount_netns(self, job_id: int, host: str) -> str:
        """One namespace host's mount of the job: its daemon (found by its pid file, checked by its tag) has the
        mount detached in its own mount namespace and is ended; the mount point stays (the file tree is shared
        with the job's other hosts)."""
        pid_file = Path(self.root, _NS, str(job_id), host)
        try:
            pid = int(pid_file.read_text())
        except (OSError, ValueError):
            return ""                                   # never mounted there
        errors: list[str] = []
        if any(p.pid == pid for p in scan_tagged(self.tag(job_id)).get(self.tag(job_id), [])):
            errors = _detach(pid, os.path.join(self.root, str(job_id)))
            _end([pid])
        pid_file.unlink(missing_ok=True)
        return "; ".join(errors)

    def sweep(self, keep: set[int]) -> None:
        """At the start: every mount of this controller under the root whose job is not in ``keep`` (the jobs
        still running with their file system) is taken down, on every host, and its mount point removed."""
        if self.pool.kind in ("local", "netns"):
            errors = _unmount_here(self.root, None, self.cid, keep=keep)
        else:
            req = {"root": self.root, "cid": self.cid, "keep": sorted(keep)}
            with ThreadPoolExecutor(max_workers=8) as ex:
                answers = list(ex.map(lambda h: (h, self._run_on(h, "unmount", req)), self.pool.nodes))
            errors = [f"{h}: {a['error']}" for h, a in answers if a.get("error")]
        for d in Path(self.root, _NS).glob("*"):
            if d.name.isdigit() and int(d.name) not in keep:
                for f in d.glob("*"):
                    f.unlink(missing_ok=True)
                with contextlib.suppress(OSError):
                    d.rmdir()
        if errors:
            log.warning("cleaning job mounts under %s: %s", self.root, "; ".join(errors))


def _unmount_here(root: str, jobs: set[int] | None, cid: str, keep: set[int] | None) -> list[str]:
    """On this machine: detach the mounts of ``jobs`` (None: every job of ``cid`` not in ``keep``) in their
    daemons' mount namespaces, end the daemons, detach dead mounts left in this namespace, remove the mount
    points; what went wrong."""
    prefix = f"{cid}.mnt"
    errors: list[str] = []
    waits = []
    for tag, procs in scan_tagged(prefix).items():
        jid = tag[len(prefix):]
        if not jid.isdigit() or (jobs is not None and int(jid) not in jobs) or (keep and int(jid) in keep):
            continue
        for p in procs:                          # the mount as its daemon's namespace has it
            errors += _detach(p.pid, os.path.join(root, jid))
            waits.append(p.pid)
    _end(waits)
    for path in mounts_under(root):             # a mount whose daemon is gone answers ENOTCONN: detach it too
        name = os.path.relpath(path, root).split("/")[0]
        if name.isdigit() and (jobs is None or int(name) in jobs) and not (keep and int(name) in keep):
            subprocess.run(["umount", "-l", "-c", path], capture_output=True, timeout=30, check=False)
    for name in os.listdir(root):
        if name.isdigit() and (jobs is None or int(name) in jobs) and not (keep and int(name) in keep):
            if not mounts_under(os.path.join(root, name)):
                _remove(root, name)
    return errors


def _detach(pid: int, folder: str) -> list[str]:
    """Detach the adhocfs mounts under ``folder`` in the mount namespace of process ``pid`` (its mount daemon);
    what went wrong."""
    errors = []
    for path in mounts_under(folder, f"/proc/{pid}/mountinfo"):
        done = subprocess.run(["nsenter", f"--mount=/proc/{pid}/ns/mnt", "--", "umount", "-l", "-c", path],
                              capture_output=True, text=True, timeout=30, check=False)
        if done.returncode and "not mounted" not in done.stderr:
            errors.append(f"umount {path} (pid {pid}): {' '.join(done.stderr.split())[:200]}")
    return errors


def _end(pids: list[int]) -> None:
    """Wait for mount daemons to exit (their mount was detached); kill those that do not within the wait."""
    import psutil

    procs = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            procs.append(psutil.Process(pid))
    _, alive = psutil.wait_procs(procs, timeout=EXIT_WAIT)
    for p in alive:
        log.warning("mount daemon %d did not exit after its unmount: killed", p.pid)
        with contextlib.suppress(psutil.Error):
            p.send_signal(signal.SIGKILL)
    psutil.wait_procs(alive, timeout=5)


# ------------------------------------------------------------------------------------------------ the child
def _mount_point(root: str, name: str) -> None:
    """Make ``<root>/<name>/fs`` (folders, not through a link), ``<root>/<name>`` root's with mode 0700."""
    rfd = os.open(root, _DIR)
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o700, dir_fd=rfd)
        fd = os.open(name, _DIR, dir_fd=rfd)
        try:
            st = os.fstat(fd)
            if st.st_dev != os.fstat(rfd).st_dev:
                raise OSError(f"{root}/{name} is a mount already")
            os.fchown(fd, os.geteuid(), os.getegid())
            os.fchmod(fd, 0o700)
            with contextlib.suppress(FileExistsError):
                os.mkdir("fs", 0o755, dir_fd=fd)
            os.close(os.open("fs", _DIR, dir_fd=fd))          # a folder, not a link
        finally:
            os.close(fd)
    finally:
        os.close(rfd)


def _give(root: str, name: str, uid: int, gid: int) -> None:
    """``<root>/<name>`` (the folder holding the mount point) becomes the job's user's, mode 0700."""
    rfd = os.open(root, _DIR)
    try:
        fd = os.open(name, _DIR, dir_fd=rfd)
        try:
            os.fchown(fd, uid, gid)
            os.fchmod(fd, 0o700)
        finally:
            os.close(fd)
    finally:
        os.close(rfd)


def _remove(root: str, name: str) -> None:
    """Remove ``<root>/<name>`` and what it holds (after its mount is gone): taken back first, then removed without
    following links (a user's folder may hold anything the user put there)."""
    import shutil

    rfd = os.open(root, _DIR)
    try:
        try:
            fd = os.open(name, _DIR, dir_fd=rfd)
        except OSError:
            return
        try:
            os.fchown(fd, os.geteuid(), os.getegid())
            os.fchmod(fd, 0o700)
        finally:
            os.close(fd)
        if shutil.rmtree.avoids_symlink_attacks:
            shutil.rmtree(name, dir_fd=rfd, ignore_errors=True)
    finally:
        os.close(rfd)


def _child_mount(req: dict[str, Any]) -> dict[str, Any]:
    from malleable.adhocfs._fuse_mount import mount

    uid, gid = req.get("uid"), req.get("gid")
    other = os.geteuid() == 0 and uid not in (None, 0)
    name = os.path.relpath(req["dir"], req["root"]).split("/")[0]
    joining = other and _given(req["root"], name, uid)
    if not joining:
        _mount_point(req["root"], name)
    os.environ["MALLEABLE_TOKEN"] = req["secret"]
    os.environ[TAG_VAR] = req["tag"]
    gid = gid if gid is not None else uid
    proc = os.open("/proc", _DIR)                 # opened before the mount: what it says cannot be the user's
    try:
        rec = mount(req["address"], req["dir"], allow_other=other, uid=uid if other else None,
                    gid=gid if other else None)
        if joining:
            _check_landed(proc, rec.pid, req["dir"], f"adhocfs:{req['address']}")
    finally:
        os.close(proc)
    if other and not joining:
        _give(req["root"], name, uid, gid)
    return {"pid": rec.pid}


def _given(root: str, name: str, uid: int) -> bool:
    """Whether ``<root>/<name>`` is the job's user's already: another host of a shared file tree (the namespace
    hosts') mounted it for the job, whose processes there use it, so it is not taken back. Its mount point ``fs``
    is then checked by descriptor: a folder (not a link) of the daemon's user, not a mount here."""
    rfd = os.open(root, _DIR)
    try:
        try:
            fd = os.open(name, _DIR, dir_fd=rfd)
        except FileNotFoundError:
            return False
        try:
            st = os.fstat(fd)
            if st.st_uid != uid or st.st_uid == os.geteuid():
                return False
            sub = os.open("fs", _DIR, dir_fd=fd)
            try:
                mp = os.fstat(sub)
            finally:
                os.close(sub)
            if st.st_dev != os.fstat(rfd).st_dev or mp.st_dev != st.st_dev or mp.st_uid != os.geteuid():
                raise OSError(f"{root}/{name}/fs is not the mount point the controller made")
            return True
        finally:
            os.close(fd)
    finally:
        os.close(rfd)


def _check_landed(proc: int, pid: int, where: str, source: str) -> None:
    """The mount just made (``source``, served by ``pid``) is at ``where`` and nowhere else: its path went
    through a folder of the user's, who could have put a link on the way between the check and the mount. If it
    landed elsewhere it is undone and the mount fails. ``proc`` is ``/proc``, opened before the mount."""
    fd = os.open(f"{pid}/mountinfo", os.O_RDONLY | os.O_CLOEXEC, dir_fd=proc)
    with os.fdopen(fd, encoding="utf-8") as f:
        points = [p for p, src in _adhocfs_mounts(f.read()) if src == source]
    if points == [where]:
        return
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
    for p in points:
        subprocess.run(["umount", "-l", p], capture_output=True, timeout=30, check=False)
    raise OSError(f"the mount point {where} changed while it was mounted (found at {points}); mount undone")


def _child_unmount(req: dict[str, Any]) -> dict[str, Any]:
    jobs = set(req["jobs"]) if req.get("jobs") is not None else None
    errors = _unmount_here(req["root"], jobs, req["cid"], keep=set(req.get("keep", [])))
    return {"error": "; ".join(errors)} if errors else {}


def main() -> int:
    """The child run on a host: ``mount`` or ``unmount`` with a JSON request on stdin; one JSON line out."""
    from malleable.errors import MalleableError

    verb = sys.argv[1] if len(sys.argv) > 1 else ""
    try:
        req = json.loads(sys.stdin.read())
        answer = _child_mount(req) if verb == "mount" else _child_unmount(req) if verb == "unmount" else \
            {"error": f"unknown request {verb!r}"}
    except (MalleableError, OSError, ValueError, KeyError, subprocess.SubprocessError) as e:
        answer = {"error": " ".join(str(e).split())[:400]}
    print(json.dumps(answer), flush=True)
    return 0 if not answer.get("error") else 1


if __name__ == "__main__":
    sys.exit(main())
