"""The shell's side of job file systems: starting a job's adhocfs servers, staging files in and out, stopping the
servers and checking their hosts clean, for the core's :class:`~._events.StartFs` and :class:`~._events.StopFs`.
What is staged, and when, is decided by the core (:class:`~._storage.Storage`); it is carried out here.

Each request runs in a thread of its own (starting servers and copying files take seconds, the daemon's loop must
go on answering), which reports what happened as core events (:class:`~._events.FsProgress`,
:class:`~._events.FsReady`, :class:`~._events.FsFailed`, :class:`~._events.FsStopped`); the loop takes them with
:meth:`FsShell.events` and hands them to the core. The servers are started with adhocfs's own code
(:func:`~malleable.adhocfs.start_fs`, as ``malleable fs start`` does), under a secret of their own that is derived
from the operator's and the job id, so the job's environment gets a credential that opens that file system and
nothing else; they carry a tag of their own (``<controller>.fs<job>``), by which the hosts are searched for
leftovers after the stop.

While a file system is up, a sampler thread measures it every :data:`SAMPLE_EVERY` seconds (the bytes its data
servers read and wrote since the last look, from the metadata server's status, as ``malleable fs status`` shows
them) and reports :class:`~._events.FsSample`; a :class:`~._events.ScaleFs` of the core adds a data server with
adhocfs's own expand or removes one with its shrink (partial redistribution), in a thread, answered by
:class:`~._events.FsScaled`. A data server found dead in a file system that keeps copies of each block is declared
lost (adhocfs's ``lose``), so the job's writes go on with the other copies.

After a restart, a file system taken over (:class:`~._events.AttachFs`) gets its handle rebuilt from the metadata
server's status, so it is measured, grown and shrunk as before; a stop without an address (a start cut by the
restart) kills the servers by their tag on the hosts given.

With a mount root (``controller start --bb-mount-root``), the file system is also mounted on every host of the job
before it is launched and taken down after its stage-out (:mod:`._jobmount`); while the job runs, it is mounted on
a host the job grows onto (:class:`~._events.MountFs`) and taken down from a host it left
(:class:`~._events.UnmountFs`). These changes of a job's mounts are carried out one at a time, in the order they
were asked for (a job that leaves a host and grows back onto it gets the unmount first), and each is reported as
:class:`~._events.FsMounted`.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import queue
import shutil
import stat
import tempfile
import threading
import time
from concurrent.futures import Future
from typing import Any

from malleable.errors import MalleableError

from ._events import (
    AbortFs,
    AttachFs,
    FsAttached,
    FsFailed,
    FsFault,
    FsHeld,
    FsMounted,
    FsProgress,
    FsReady,
    FsSample,
    FsScaled,
    FsStopped,
    MountFs,
    ScaleFs,
    StartFs,
    StopFs,
    UnmountFs,
)
from ._hostpool import TAG_VAR, HostPool
from ._jobmount import JobMounts
from ._stager import Staged
from ._stager import run as run_stager

__all__ = ["FS_ENV", "FsShell", "fs_secret"]

log = logging.getLogger(__name__)

FS_ENV = "MALLEABLE_FS"
"""The job's file-system address (what every ``malleable fs`` command reads when ``--meta`` is not given)."""

TOKEN_ENV = "MALLEABLE_TOKEN"  # noqa: S105 - the name of the variable, not a secret
"""Where adhocfs servers and clients read their shared secret."""

CLEAN_WAIT = 10.0        # seconds the servers may take to exit after the stop before they are killed
SAMPLE_EVERY = 2.0       # seconds between two measurements of a running file system
SAMPLE_TIMEOUT = 5.0     # seconds a measurement may wait for the metadata server
SCALE_TIMEOUT = 300.0    # seconds a shrink's redistribution may take


def fs_secret(token: bytes, cid: str, job_id: int) -> str:
    """The secret of job ``job_id``'s file system under controller ``cid`` whose operator's secret is ``token``
    (derived, so it is never stored: the daemon and ``malleable fs --job`` compute it again)."""
    return hmac.new(token, f"adhocfs:{cid}:{job_id}".encode(), hashlib.sha256).hexdigest()


class FsShell:
    """Job file systems of one daemon.

    Args:
        pool: the host pool (how to reach hosts and look for leftovers).
        token: the operator's secret (each file system's secret is derived from it).
        cid: the controller id (part of the servers' tag and of the derivation).
        mounts: the job mounts (None: file systems are not mounted).
    """

    def __init__(self, pool: HostPool, token: bytes, cid: str, mounts: JobMounts | None = None) -> None:
        self.pool = pool
        self.mounts = mounts
        self.token = token
        self.cid = cid
        self.results: queue.Queue[Any] = queue.Queue()
        self.threads: list[threading.Thread] = []
        self.deps: dict[int, Any] = {}           # job id -> the Deployment this daemon started
        self.names: dict[int, dict[int, str]] = {}   # job id -> {data server id: pool host}
        self.scaling: set[int] = set()           # jobs whose file system is being changed (not sampled meanwhile)
        self.last: dict[int, tuple[float, dict[int, int]]] = {}   # job id -> (time, bytes per server) last seen
        self.lost: dict[int, set[int]] = {}      # job id -> data servers reported not answering
        self.stopped: set[int] = set()           # jobs whose file system is being stopped or is gone
        self.faults: dict[int, FsFault] = {}     # job id -> a fault found by the last sample, to be reported
        self.aborts: dict[int, threading.Event] = {}   # job id -> set to stop its staging
        self.mount_q: queue.Queue[tuple[Future[Any], Any, tuple[Any, ...]]] = queue.Queue()   # mount changes
        self.mount_worker: threading.Thread | None = None
        self.lock = threading.Lock()
        self.quit = threading.Event()
        self.sampler: threading.Thread | None = None

    # -- names and secrets -----------------------------------------------------------------------------------
    def secret(self, job_id: int) -> str:
        """The secret of job ``job_id``'s file system (never stored; derived again when needed)."""
        return fs_secret(self.token, self.cid, job_id)

    def tag(self, job_id: int) -> str:
        """The tag the job's servers carry."""
        return f"{self.cid}.fs{job_id}"

    def dir_prefix(self, job_id: int) -> str:
        """Name prefix of the temporary directories of the job's file system on this host (metadata database, server
        logs): :meth:`_sweep` finds them by it, even after its metadata server was killed."""
        return f"malleable-fs-{self.tag(job_id)}-"

    def host(self, name: str) -> str:
        """Where a server for pool host ``name`` runs: this machine for a ``local`` pool's slots."""
        return "127.0.0.1" if self.pool.kind == "local" else name

    def job_env(self, job: Any) -> dict[str, str]:
        """What a job with a ready file system gets in its environment: the address and the file system's secret."""
        addr = job.fs.address if job.bb else ""
        if not addr:
            return {}
        env = {FS_ENV: addr, TOKEN_ENV: self.secret(job.id)}
        if self.mounts is not None:
            env.update(self.mounts.job_env(job.id))
        return env

    def job_argv(self, job: Any, argv: list[str]) -> list[str]:
        """The mpiexec command line of a job whose file system is mounted (its launcher enters each host's mount)."""
        return self.mounts.job_argv(argv) if self.mounts is not None and job.bb and job.fs.address else argv

    def _server_env(self, job_id: int) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("MALLEABLE_KEY", "MALLEABLE_KEY_FILE")}
        env.update({TOKEN_ENV: self.secret(job_id), TAG_VAR: self.tag(job_id)})
        if self.pool.launcher_exec:
            env["MALLEABLE_LAUNCHER_EXEC"] = self.pool.launcher_exec
        return env

    # -- requests --------------------------------------------------------------------------------------------
    ACTIONS = (StartFs, StopFs, ScaleFs, AttachFs, AbortFs, MountFs, UnmountFs)
    """The core's actions carried out here (:meth:`carry_out`)."""

    def carry_out(self, a: Any) -> None:
        """Carry out one of the core's :data:`ACTIONS` (each in a thread of its own, or in the mount worker's)."""
        {StartFs: self.start, StopFs: self.stop, ScaleFs: self.scale, AttachFs: self.attach, AbortFs: self.abort,
         MountFs: self.mount_more, UnmountFs: self.unmount_left}[type(a)](a)

    def start(self, a: StartFs) -> None:
        """Start the file system of ``a`` in a thread (an :class:`AbortFs` from now on stops its stage-in)."""
        with self.lock:
            self.aborts[a.job_id] = threading.Event()
        self._thread(self._start, a, f"fs-start-{a.job_id}")

    def stop(self, a: StopFs) -> None:
        """Stage out and stop the file system of ``a`` in a thread."""
        self._thread(self._stop, a, f"fs-stop-{a.job_id}")

    def attach(self, a: AttachFs) -> None:
        """Check in a thread that the file system of ``a`` (started before a restart) answers, and measure it."""
        self._thread(self._attach, a, f"fs-attach-{a.job_id}")

    def scale(self, a: ScaleFs) -> None:
        """Add or remove a data server of ``a``'s file system in a thread."""
        with self.lock:
            self.scaling.add(a.job_id)
        self._thread(self._scale, a, f"fs-{a.kind}-{a.job_id}")

    def events(self) -> list[Any]:
        """The core events reported since the last call."""
        out = []
        while True:
            try:
                out.append(self.results.get_nowait())
            except queue.Empty:
                return out

    def join(self, timeout: float) -> None:
        """Wait (bounded) for the threads still starting or stopping file systems; stop sampling."""
        self.quit.set()
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))

    def busy(self) -> bool:
        """Whether a file system is being started or stopped, or a mount changed."""
        self.threads = [t for t in self.threads if t.is_alive()]
        return bool(self.threads) or self.mount_q.unfinished_tasks > 0

    def _thread(self, fn: Any, a: Any, name: str) -> None:
        t = threading.Thread(target=fn, args=(a,), name=name, daemon=True)
        self.threads = [x for x in self.threads if x.is_alive()] + [t]
        t.start()

    def _post(self, event: Any) -> None:
        self.results.put(event)

    # -- the work --------------------------------------------------------------------------------------------
    def _start(self, a: StartFs) -> None:
        try:
            self._start_fs(a)
        finally:
            with self.lock:
                self.aborts.pop(a.job_id, None)

    def _start_fs(self, a: StartFs) -> None:
        from malleable.adhocfs._deploy import start_fs

        jid = a.job_id
        secret = self.secret(jid).encode()
        try:
            dep = start_fs(self.host(a.meta), [self.host(h) for h in a.data], launcher=self.pool.launcher_exec,
                           token=secret, capacity=a.capacity, env=self._server_env(jid), replicas=a.replicas,
                           prefix=self.dir_prefix(jid))
        except (MalleableError, OSError, ValueError) as e:
            log.error("job %d: file system did not start: %s", jid, e)  # noqa: TRY400 - the reason is the message
            self._post(FsFailed(time.time(), jid, f"the servers did not start: {' '.join(str(e).split())[:400]}"))
            return
        with self.lock:
            self.deps[jid] = dep
            self.names[jid] = dict(zip(dep.data, a.data, strict=True))
        self._sampling()
        log.info("job %d: file system at %s", jid, dep.address)
        if self._aborted(jid):
            self._shut(jid, dep.address, (a.meta, *a.data))
            self._post(FsFailed(time.time(), jid, "stage-in cancelled"))
            return
        if a.stage_in:
            done = self._stage(jid, dep.address, "in", a.stage_in, a.uid, a.gid, a.limit)
            bad = next((s for s in done if s.error), None)
            if bad is not None or len(done) < len(a.stage_in):
                why = bad.error if bad is not None else "not every file was staged in"
                self._shut(jid, dep.address, (a.meta, *a.data))
                self._post(FsFailed(time.time(), jid, f"stage-in {bad.src if bad else ''} -> "
                                                      f"{bad.dst if bad else ''}: {why}"[:500]))
                return
        if self.mounts is not None and a.mount_hosts:
            err = self._mount(jid, dep.address, a.mount_hosts, a.uid, a.gid)
            if err or self._aborted(jid):
                self.mounts.unmount(jid, a.mount_hosts)
                self._shut(jid, dep.address, (a.meta, *a.data))
                self._post(FsFailed(time.time(), jid, err[:500] or "stage-in cancelled"))
                return
        self._post(FsReady(time.time(), jid, dep.address))

    def _stage(self, jid: int, address: str, direction: str, pairs: Any, uid: int | None, gid: int | None,
               limit: float) -> list[Staged]:
        """Stage ``pairs`` as ``uid``/``gid`` in a child process (:mod:`._stager`), reporting each one; an
        :class:`AbortFs` for the job stops it."""
        with self.lock:
            stop = self.aborts.setdefault(jid, threading.Event())
        return run_stager(address, self.secret(jid), direction, list(pairs), uid=uid, gid=gid, limit=limit,
                          stop=stop, on_pair=lambda s: self._post(
                              FsProgress(time.time(), jid, direction, s.src, s.dst, s.size, s.error)))

    def _aborted(self, jid: int) -> bool:
        with self.lock:
            stop = self.aborts.get(jid)
        return stop is not None and stop.is_set()

    def abort(self, a: AbortFs) -> None:
        """Stop the staging of ``a``'s job (its start then fails and its servers stop)."""
        with self.lock:
            stop = self.aborts.get(a.job_id)
        if stop is not None:
            stop.set()

    def _attach(self, a: AttachFs) -> None:
        """Check the file system and rebuild its handle: a :class:`~malleable.adhocfs.Deployment` without processes
        of this daemon (the stop kills the old servers by their tag) whose ``state`` (where later data servers
        write their logs) is the metadata server's own directory when it is on this host, else a new one (both
        removed at the stop); so it grows and shrinks as before."""
        from malleable.adhocfs._deploy import Deployment, MetaClient

        jid, error = a.job_id, ""
        try:
            with MetaClient(a.address, self.secret(jid).encode(), SAMPLE_TIMEOUT) as mc:
                st = mc.status()
        except Exception as e:  # noqa: BLE001 - any failure to answer is the reason reported
            error = " ".join(f"{type(e).__name__}: {e}".split())[:400]
            log.warning("job %d: its file system at %s does not answer after the restart: %s", jid, a.address, error)
        if not error:
            data = {s["sid"]: (s["host"], s["addr"]) for s in st.servers if s["state"] == "active"}
            with self.lock:
                if jid not in self.stopped:          # not already being stopped (the job ended meanwhile)
                    state = st.state if _own_dir(st.state) else tempfile.mkdtemp(prefix=self.dir_prefix(jid))
                    self.deps[jid] = Deployment(a.address, state, data=data)
                    self.names[jid] = dict(a.servers)
            self._sampling()
            log.info("job %d: re-attached its file system at %s", jid, a.address)
        self._post(FsAttached(time.time(), jid, error))

    def _stop(self, a: StopFs) -> None:
        jid = a.job_id
        with self.lock:
            self.stopped.add(jid)
        errors, held = [], False
        if a.stage_out:
            try:
                done = self._stage(jid, a.address, "out", a.stage_out, a.uid, a.gid, a.limit)
            finally:
                with self.lock:
                    self.aborts.pop(jid, None)
            errors = [f"stage-out {s.src}: {s.error}" for s in done if s.error]
            held = bool(errors) or len(done) < len(a.stage_out)     # nothing is deleted before its copy is complete
        self._unmount(a)
        if held:
            with self.lock:
                self.stopped.discard(jid)
            self._post(FsHeld(time.time(), jid, "; ".join(errors or ["stage-out incomplete"])[:500]))
            return
        left, err = self._shut(jid, a.address, a.hosts)
        self._post(FsStopped(time.time(), jid, left, err[:500]))

    def _unmount(self, a: StopFs) -> None:
        """The job's processes are gone: its mount is taken down on every host (after its stage-out, even a failed
        one: a held file system keeps its servers and data, not its mount), after the mount changes asked before."""
        if self.mounts is not None:
            self._in_order(self._unmount_all, a.job_id, a.mount_hosts).result()

    def _unmount_all(self, jid: int, hosts: tuple[str, ...]) -> None:
        assert self.mounts is not None
        try:
            err = self.mounts.unmount(jid, hosts)
        except Exception as e:  # noqa: BLE001 - reported; the stop goes on
            log.exception("job %d: unmounting its file system", jid)
            err = " ".join(f"{type(e).__name__}: {e}".split())[:300]
        self._post(FsMounted(time.time(), jid, "umount", self.mounts.path(jid),
                             tuple((h, err) for h in self.mounts.targets(hosts))))

    def _mount(self, jid: int, address: str, hosts: Any, uid: int | None, gid: int | None) -> str:
        """Mount the job's file system on its ``hosts`` before its launch (reported); "" or why not."""
        assert self.mounts is not None
        done = self.mounts.mount(jid, address, self.secret(jid), tuple(hosts), uid, gid)
        self._post(FsMounted(time.time(), jid, "mount", self.mounts.path(jid), tuple(done.items())))
        return "mount: " + "; ".join(f"{h}: {why}" for h, why in done.items() if why) if any(done.values()) else ""

    def mount_at_launch(self, job: Any) -> str:
        """Mount the file system of a job about to be launched on its hosts, where its record does not have it
        yet: one made while the job waited (an early stage-in) had no hosts to mount on. "" when mounted (or
        nothing to do), else why not (nothing is left mounted then)."""
        if self.mounts is None or not job.bb or not job.fs.address:
            return ""
        if set(self.mounts.targets(job.hosts)) <= set(job.fs.mounted):
            return ""
        return self._mount(job.id, job.fs.address, job.hosts, *job.acting_ids)

    # -- a running job's mounts, as its hosts change ----------------------------------------------------------
    def mount_more(self, a: MountFs) -> None:
        """Mount the job's file system on hosts it grows onto (in the mount worker), reported."""
        self._in_order(self._mount_more, a)

    def _mount_more(self, a: MountFs) -> None:
        assert self.mounts is not None
        try:
            done = self.mounts.mount(a.job_id, a.address, self.secret(a.job_id), a.hosts, a.uid, a.gid, more=True)
        except Exception as e:  # noqa: BLE001 - reported: the expansion waiting for it is given up
            log.exception("job %d: mounting its file system on %s", a.job_id, a.hosts)
            done = dict.fromkeys(a.hosts, " ".join(f"{type(e).__name__}: {e}".split())[:300])
        self._post(FsMounted(time.time(), a.job_id, "mount", self.mounts.path(a.job_id), tuple(done.items())))

    def unmount_left(self, a: UnmountFs) -> None:
        """Take the job's mount down from hosts it left (in the mount worker), reported."""
        self._in_order(self._unmount_left, a)

    def _unmount_left(self, a: UnmountFs) -> None:
        assert self.mounts is not None
        try:
            done = self.mounts.unmount_hosts(a.job_id, a.hosts)
        except Exception as e:  # noqa: BLE001 - reported
            log.exception("job %d: unmounting its file system from %s", a.job_id, a.hosts)
            done = dict.fromkeys(a.hosts, " ".join(f"{type(e).__name__}: {e}".split())[:300])
        self._post(FsMounted(time.time(), a.job_id, "umount", self.mounts.path(a.job_id), tuple(done.items())))

    def _in_order(self, fn: Any, *args: Any) -> Future[Any]:
        """Run ``fn(*args)`` in the mount worker, after the mount changes asked before; its future."""
        fut: Future[Any] = Future()
        self.mount_q.put((fut, fn, args))
        with self.lock:
            if self.mount_worker is None or not self.mount_worker.is_alive():
                self.mount_worker = threading.Thread(target=self._mount_loop, name="fs-mounts", daemon=True)
                self.mount_worker.start()
        return fut

    def _mount_loop(self) -> None:
        while True:
            fut, fn, args = self.mount_q.get()
            try:
                fut.set_result(fn(*args))
            except Exception as e:  # noqa: BLE001 - a bug in one change must not stop the next ones
                log.exception("a mount change failed")
                fut.set_exception(e)
            finally:
                self.mount_q.task_done()

    def _shut(self, jid: int, address: str, hosts: Any) -> tuple[tuple[str, ...], str]:
        """Stop the servers, wait for them, kill what is left on ``hosts``; returns (hosts with leftovers, error)."""
        from malleable.adhocfs._deploy import stop_fs

        err = ""
        try:
            if address:                          # unknown for one being started when the controller stopped
                stop_fs(address, timeout=10.0, token=self.secret(jid).encode())
        except (MalleableError, OSError) as e:
            err = f"stop: {' '.join(str(e).split())[:300]}"
            log.warning("job %d: stopping its file system at %s: %s", jid, address, err)
        with self.lock:
            dep = self.deps.pop(jid, None)
            self.names.pop(jid, None)
            self.last.pop(jid, None)
            self.lost.pop(jid, None)
        if dep is not None:
            dep.wait(CLEAN_WAIT)
        tag, names = self.tag(jid), [h for h in dict.fromkeys(hosts) if h]
        deadline = time.monotonic() + (CLEAN_WAIT if address else 0.0)   # nothing asked them to stop: kill now
        while True:
            left = {h: self.pool.leftovers(tag, h, ended=True) for h in names}
            left = {h: p for h, p in left.items() if p}
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        for h, pids in left.items():
            log.warning("job %d: file-system processes left on %s: %s; killing them", jid, h, pids)
            self.pool.kill(tag, h, pids)
        self._sweep(jid)
        return tuple(sorted(left)), err

    def _sweep(self, jid: int) -> None:
        """Remove this host's temporary directories of job ``jid``'s file system once its servers are gone: the
        metadata server removes its own when it is asked to stop, not when it is killed (a restart stopping a file
        system that was being started, or one that does not answer); a re-attached one's later servers may log in
        a directory of the daemon's. A job has one file system at a time (the next starts after this stop), so
        the prefix names only this one's. Only real directories of this daemon's user are removed."""
        root, prefix = tempfile.gettempdir(), self.dir_prefix(jid)
        with os.scandir(root) as it:
            paths = [e.path for e in it if e.name.startswith(prefix)]
        for path in paths:
            if _own_dir(path):
                shutil.rmtree(path, ignore_errors=True)


    # -- growing and shrinking -------------------------------------------------------------------------------
    def _scale(self, a: ScaleFs) -> None:
        from malleable.adhocfs._admin import expand_fs, shrink_fs

        jid, secret = a.job_id, self.secret(a.job_id).encode()
        sid, error = a.sid, ""
        dep = self.deps.get(jid)
        try:
            if dep is None:
                error = "the file system is not one this controller started (or it is being stopped)"
            elif a.kind == "add":
                servers, procs, _ = expand_fs(a.address, [self.host(a.host)], state=dep.state, token=secret,
                                              launcher=self.pool.launcher_exec, capacity=a.capacity,
                                              env=self._server_env(jid))
                sid = next(iter(servers))
                with self.lock:
                    dep.procs.update(procs)         # waited for at the stop, with the others
                    dep.data.update(servers)
                    self.names.setdefault(jid, {})[sid] = a.host
            else:
                shrink_fs(a.address, [a.sid], "partial", timeout=SCALE_TIMEOUT, token=secret)
        except (MalleableError, OSError, ValueError) as e:
            error = " ".join(str(e).split())[:400]
            log.warning("job %d: %s of a data server on %s failed: %s", jid, a.kind, a.host, error)
        finally:
            with self.lock:
                self.scaling.discard(jid)
                self.last.pop(jid, None)             # the next sample starts a new interval
        self._post(FsScaled(time.time(), jid, a.kind, a.host, sid, error))

    # -- measuring -------------------------------------------------------------------------------------------
    def _sampling(self) -> None:
        """Start the sampler thread once (it measures every file system this daemon runs)."""
        with self.lock:
            if self.sampler is None or not self.sampler.is_alive():
                self.sampler = threading.Thread(target=self._sample_loop, name="fs-sampler", daemon=True)
                self.sampler.start()

    def _sample_loop(self) -> None:
        while not self.quit.wait(SAMPLE_EVERY):
            with self.lock:
                jobs = [(jid, dep.address) for jid, dep in self.deps.items() if jid not in self.scaling]
            for jid, address in jobs:
                try:
                    ev = self.sample(jid, address, time.time())
                except Exception as e:  # noqa: BLE001 - a file system being stopped must not end the sampling
                    log.debug("job %d: no sample of its file system: %s", jid, e)
                    continue
                if ev is not None:
                    self._post(ev)
                fault = self.faults.pop(jid, None)
                if fault is not None:
                    self._post(fault)

    def sample(self, jid: int, address: str, now: float) -> FsSample | None:
        """Measure job ``jid``'s file system: its active data servers and the bytes/s they moved since the last
        sample (None at the first look or without I/O); None if it is being changed or stopped meanwhile."""
        from malleable.adhocfs._deploy import MetaClient

        with MetaClient(address, self.secret(jid).encode(), SAMPLE_TIMEOUT) as mc:
            st = mc.status()
        counts = {s["sid"]: s.get("read_bytes", 0) + s.get("write_bytes", 0) for s in st.servers
                  if s.get("reachable")}
        down = [s for s in st.servers if not s.get("reachable") and s.get("state") == "active"]
        with self.lock:
            if jid not in self.deps or jid in self.scaling:
                return None
            names = self.names.get(jid, {})
            seen = self.lost.setdefault(jid, set())
            new = [s for s in down if s["sid"] not in seen]
            seen.update(s["sid"] for s in new)
            prev, self.last[jid] = self.last.get(jid), (now, counts)
        lost = self._lose(jid, address, [s["sid"] for s in down]) if down and st.replicas > 1 else ""
        if new:
            where = ", ".join(f"{s['sid']} on {names.get(s['sid'], s['host'])}" for s in new)
            text = f"file system at {address}: data server(s) {where} do not answer; their blocks cannot be read " \
                   "or written"
            if st.replicas > 1:
                text = f"file system at {address}: data server(s) {where} do not answer; " + (
                    f"declaring them lost failed: {lost}" if lost else
                    "declared lost: the other copies serve their blocks, reads and writes go on")
            log.warning("job %d: %s", jid, text)
            self.faults[jid] = FsFault(now, jid, tuple(s["sid"] for s in new), text,
                                       tuple(names.get(s["sid"], s["host"]) for s in new))
        gone = {s["sid"] for s in down} if down and st.replicas > 1 and not lost else set()
        servers = tuple((s["sid"], names.get(s["sid"], s["host"])) for s in sorted(st.servers, key=lambda s: s["sid"])
                        if s["state"] == "active" and s["sid"] not in gone)
        aio = None
        if prev is not None and now > prev[0]:
            moved = sum(max(0, c - prev[1][sid]) for sid, c in counts.items() if sid in prev[1])
            aio = moved / (now - prev[0]) if moved > 0 else None
        return FsSample(now, jid, aio, servers)

    def _lose(self, jid: int, address: str, sids: list[int]) -> str:
        """Declare dead data servers of a file system with copies lost (adhocfs refuses one that still answers), so
        that writes go on with the other copies and their blocks are copied again; returns the error, if any (a
        refusal, say during a change, is tried again at the next sample)."""
        from malleable.adhocfs._admin import lose_fs

        try:
            lose_fs(address, sids, token=self.secret(jid).encode())
        except (MalleableError, OSError) as e:
            why = " ".join(str(e).split())[:300]
            log.warning("job %d: declaring data server(s) %s lost: %s", jid, sids, why)
            return why
        log.warning("job %d: data server(s) %s declared lost; the other copies serve their blocks", jid, sids)
        return ""


def _own_dir(path: str) -> bool:
    """Whether ``path`` is a directory (not a link to one) owned by this process's user."""
    try:
        st = os.lstat(path) if path else None
    except OSError:
        return False
    return st is not None and stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()
