"""The controller daemon: a zmq ROUTER loop around the core (:mod:`._core`), carrying out its actions.

One loop, one thread: receive and answer messages (command line and runtime links), notice jobs that ended,
check draining hosts for leftover processes, enforce time limits, and run a scheduling pass after every event
and on a tick. All waits are bounded (the socket poll by the tick); hosts are checked in a background thread.

The shell authenticates: each message is checked with the key its seal names (the operator's shared secret, a
user's key or a job's key, :mod:`._keys`), and the requester it stands for goes with the request to the rules of
:mod:`._access`. Every message gets an answer, under the key it came with: an error of any kind, a bug
included, is logged and answered, and the loop goes on with the next message.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import secrets
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import zmq

from malleable._secret import load_token
from malleable._sockets import encryption_wanted, limit_frames, secure_socket, server_public_key
from malleable.controller.sched._registry import make_policy
from malleable.errors import (
    AuthError,
    ConfigError,
    MalleableError,
    ProtocolError,
    Refusal,
    Rejected,
    ReplayError,
    UnknownJob,
)

from . import _protocol as P
from ._access import authorize
from ._backlog import Backlog
from ._cgroup import JobCgroups
from ._config import DaemonConfig
from ._core import Core
from ._events import (
    HostClean,
    HostDown,
    HostUp,
    JobExited,
    JobLaunched,
    Kill,
    Launch,
    LaunchFailed,
    Relaunch,
    Reply,
    Request,
    Schedule,
    Stop,
    Tick,
)
from ._fsshell import FsShell
from ._gate import Gate
from ._hostpool import START_GRACE, HeldExits, Prober, proc_info, scan_tagged, soft_stop
from ._identity import run_as
from ._jobmount import JobMounts
from ._keys import job_credential
from ._launch import job_argv, job_env, launcher, read_rc, start_job, stop_job
from ._parts import encode_reply
from ._paths import addr_file, jobs_dir
from ._records import JobState
from ._statefile import StateLock, check_state
from ._store import Store
from ._views import VIEWS, DaemonViews

__all__ = ["Daemon", "DaemonConfig", "make_policy", "run_foreground"]

log = logging.getLogger(__name__)

CHECK_EVERY = 0.2     # seconds between checks of draining hosts


class Daemon(DaemonViews):
    """The controller service: the shell around :class:`~._core.Core`. ``start()`` binds, ``serve()`` runs until
    shutdown, ``close()`` releases.

    It turns what happens into the core's events (messages, processes ending, hosts checked or failing, the
    clock) and carries out the actions the core returns: persistence in one transaction first, then launches,
    stops, kills and the reply to the message being handled.

    Args:
        config: the settings.
        token: the shared secret (default: ``MALLEABLE_TOKEN`` or the key file, created if missing).
    """

    def __init__(self, config: DaemonConfig, token: bytes | None = None) -> None:
        self.config = config
        self.pool = config.pool
        self.token = token if token is not None else load_token(create=True)
        Path(config.state).parent.mkdir(parents=True, exist_ok=True)
        self.lock = StateLock(config.state)
        self.lock.acquire()                     # one daemon per state, for this daemon's whole life
        try:
            check_state(config.state)
            self.store = Store(config.state)
        except BaseException:
            self.lock.release()
            raise
        self.backlog = Backlog(self.store, lambda a: _ACTIONS[type(a)](self, a))
        cid = self.store.get_meta("controller_id")
        if cid is None:
            cid = secrets.token_hex(4)
            self.store.set_meta("controller_id", cid)
        self.cid = cid
        self.users = {n: nonce for n, (nonce, _) in self.store.load_users().items()}
        self.gate = Gate(self.token, cid, self.users, lambda jid: jid in self.core.jobs)
        self.cgroups = JobCgroups(cid)
        self.prober = Prober(self.pool)
        self.held_exits = HeldExits()
        self.fs = FsShell(self.pool, self.token, cid, JobMounts(self.pool, config.mount_root, cid)
                          if config.mount_root else None)
        self.curve_public = server_public_key(self.token) if encryption_wanted() else ""
        core = dataclasses.replace(config.core, mounts=bool(config.mount_root))   # the core names the mount hosts
        self.core = Core(self.pool.nodes, make_policy(config.policy, config.params), core,
                         hosts=self.store.load_hosts(), jobs=self.store.load_jobs(),
                         ended=self.store.ended_jobs(), policy_name=config.policy)
        if self.fs.mounts is not None:            # mounts a killed controller left: all but its running jobs'
            self.fs.mounts.sweep({j.id for j in self.core.jobs.values() if j.launched and j.fs.address
                                  and not JobState(j.state).final})
        self._do(self.core.take_actions())        # its records, and the file systems to take over
        self.jobs_dir = jobs_dir(config.state)
        self.ctx: zmq.Context[Any] | None = None
        self.sock: zmq.Socket[Any] | None = None
        self.address = ""
        self.job_address = ""
        self.procs: dict[int, Any] = {}          # job id -> Popen (ours) or psutil.Process (re-attached)
        self.allowed: dict[int, int] = {}        # local pools: rank processes a shrunk job keeps
        self.termed: dict[int, set[tuple[int, str]]] = {}   # job id -> (pid, name) sent its SIGTERM
        self.term_since: dict[int, float] = {}   # job id -> when its first (soft) stop came
        self.started = time.time()
        self.shutdown = False
        self.cancel_on_exit = False
        self.dirty = True
        self._last_tick = 0.0
        self._last_check = 0.0
        self._last_probe = 0.0
        self.handled = 0
        self.rejected = 0
        self.mpi = ""                   # the MPI jobs run under (its backend's name), known at start

    def tag(self, job_id: int) -> str:
        """The environment tag of a job's processes."""
        return f"{self.cid}.{job_id}"

    # -- life cycle ------------------------------------------------------------------------------------------
    def start(self) -> str:
        """Bind the ROUTER socket, re-attach running jobs and publish the address; returns it."""
        bind = self.config.bind or (self.pool.advertise if self.pool.kind == "netns" else "127.0.0.1")
        port = self.config.port
        if port is None:
            prev = self.store.get_meta("port")
            port = int(prev) if prev else 0
        self.ctx = zmq.Context()
        s = self.ctx.socket(zmq.ROUTER)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.ROUTER_HANDOVER, 1)
        limit_frames(s, P.MAX_FRAME)
        secure_socket(s, self.token, server=True)
        try:
            if port:
                s.bind(f"tcp://{bind}:{port}")
            else:
                port = s.bind_to_random_port(f"tcp://{bind}")
        except zmq.ZMQError as e:
            s.close(0)
            self.ctx.term()
            self.ctx = None
            raise ConfigError(f"cannot listen on {bind}:{port}: {e}") from None
        self.sock = s
        self.address = f"tcp://{bind}:{port}"
        self.gate.bind_local(self.ctx, self.config.state)
        advertise = bind if bind not in ("0.0.0.0", "*") else self.pool.advertise  # noqa: S104 - a comparison
        self.job_address = f"tcp://{advertise}:{port}"
        try:
            exe, backend = launcher()
            self.mpi, mpi = backend.name, f"MPI {backend.name} ({exe})"
        except ConfigError as e:        # said here; each job's launch then fails with the same line
            mpi = f"no MPI: {e}"
        with self.store.tx():
            self.store.set_meta("port", str(port))
            self.store.add_event(None, "start", f"controller {self.cid} on {self.address}, pool {self.pool.kind} "
                                 f"{len(self.pool.nodes)} hosts, {mpi}, policy {self.config.policy}")
        self._recover()
        if self.config.host_check:                  # unreachable hosts are down from the start
            self._apply_probe(self.pool.probe(self.core.nodes), time.time())
            self._last_probe = time.time()
        af = addr_file(self.config.state)
        tmp = af.with_name(af.name + ".tmp")
        tmp.write_text(json.dumps({"address": self.address, "pid": os.getpid(), "jobs": self.job_address,
                                   "curve": self.curve_public, "local": self.gate.local_address}))
        tmp.replace(af)
        log.info("controller listening on %s (jobs use %s)", self.address, self.job_address)
        return self.address

    def close(self) -> None:
        """Close the socket and the database (running jobs are left alone)."""
        self.prober.join(12.0)
        self.fs.join(30.0)
        self.cgroups.close()
        if self.sock is not None:
            self.sock.close(0)
            self.sock = None
        self.gate.close_local(self.config.state)
        if self.ctx is not None:
            self.ctx.term()
            self.ctx = None
        for p in self.procs.values():
            if isinstance(p, subprocess.Popen):
                p.returncode = p.returncode if p.returncode is not None else 0  # not ours to wait for any more
        try:
            af = addr_file(self.config.state)
            if af.exists() and json.loads(af.read_text()).get("pid") == os.getpid():
                af.unlink()
        except (OSError, ValueError):
            pass
        self.store.close()
        self.lock.release()

    def serve(self, stop: threading.Event | None = None) -> None:
        """Run the loop until a ``shutdown`` message (or ``stop`` is set, or SIGTERM in the main thread)."""
        assert self.sock is not None, "start() first"
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        if self.gate.local is not None:
            poller.register(self.gate.local, zmq.POLLIN)
        tick = self.config.tick
        while True:
            if stop is not None and stop.is_set():
                break
            if self.shutdown and (not self.cancel_on_exit or not self.procs):
                break
            now = time.time()
            busy = self.core.draining() or self.fs.busy()
            wait = min(tick, max(0.0, self._last_tick + tick - now), CHECK_EVERY if busy else tick)
            if self.core.wakes:
                wait = min(wait, max(0.0, min(self.core.wakes) - now))
            if self.dirty:
                wait = 0.0
            if poller.poll(int(wait * 1000)):
                self._drain_socket()
                for frames, uid in self.gate.drain_local():
                    self._handle_frames(frames, self.gate.local, uid)
            self._housekeeping()

    # -- carrying out the core's actions ---------------------------------------------------------------------
    def handle(self, event: Any) -> Any:
        """Hand one event to the core and carry out its actions; returns the reply, if any."""
        return self._do(self.core.handle(event))

    def _do(self, actions: list[Any]) -> Any:
        self.backlog.run([a for a in actions if type(a) is not Reply])    # persisted first (:mod:`._backlog`)
        return next((a.msg for a in actions if type(a) is Reply), None)

    # -- the loop's steps ------------------------------------------------------------------------------------
    def _drain_socket(self, budget: int = 1000) -> None:
        assert self.sock is not None
        for _ in range(budget):
            try:
                frames = self.sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            self._handle_frames(frames)

    def _housekeeping(self) -> None:
        now = time.time()
        self._reap(now)
        for ev in self.fs.events():
            self.handle(ev)
            self.dirty = True
        if now - self._last_check >= CHECK_EVERY:
            self._last_check = now
            self._check_hosts(now)
        probed = self.prober.result()
        if probed is not None:
            self._apply_probe(probed[1], now)
        for ev in self.held_exits.due(probed[0] if probed else None, now):
            self.handle(ev)
            self.dirty = True
        if self.config.host_check and (now - self._last_probe >= self.config.host_check or self.held_exits.held):
            if self.prober.start(self.core.nodes, now):
                self._last_probe = now
        if now - self._last_tick >= self.config.tick or (self.core.wakes and min(self.core.wakes) <= now):
            self._last_tick = now
            if self.backlog.error and self.backlog.retry():
                self.dirty = True
            self.handle(Tick(now))
            self.dirty = True
            self.gate.keyring.prune()
            self.cgroups.sweep(self.core.jobs)
        if self.dirty and not self.shutdown and not self.backlog.held:     # no new starts while changes wait
            self.dirty = False
            self.handle(Schedule(time.time()))

    def _launch(self, a: Launch) -> None:
        j = a.job
        now = time.time()
        try:
            err = self.fs.mount_at_launch(j)
            if err:
                raise OSError(f"mounting its file system: {err}")
            argv = self.fs.job_argv(j, job_argv(j, self.pool, self.config.core.slots))
            env = job_env(j, self.pool, self.config.core.slots, self.job_address,
                          job_credential(self.token, self.cid, j.id), self.tag(j.id), self.curve_public)
            env.update(self.fs.job_env(j))
            p = start_job(j, argv, env, self.jobs_dir, self.cgroups.create(j.id))
        except (OSError, MalleableError) as e:
            log.error("job %d: launch failed: %s", j.id, e)  # noqa: TRY400 - the reason is the message
            self.handle(LaunchFailed(now, j.id, str(e)))
            self.dirty = True
            return
        self.procs[j.id] = p
        try:
            ctime = psutil.Process(p.pid).create_time()
        except psutil.Error:
            ctime = 0.0
        self.handle(JobLaunched(now, j.id, p.pid, ctime))
        log.info("job %d launched (pid %d): %s", j.id, p.pid, " ".join(argv))

    def _stop(self, a: Stop) -> None:
        """SIGTERM the job's own processes here (its cgroup's and tagged ones, but not mpiexec and its proxies, which
        forward their output and exit codes), or its process group when none are here (mpiexec forwards it to
        remote hosts): :func:`soft_stop`. A hard stop SIGKILLs the cgroup, the process group and the tagged."""
        p = self.procs.get(a.job_id)
        pid = p.pid if p is not None else a.pid
        tag = self.tag(a.job_id)
        tagged = scan_tagged(tag).get(tag, []) if self.pool.kind in ("local", "netns") else []
        if a.hard:
            stop_job(pid, hard=True)
            self.cgroups.signal(a.job_id, signal.SIGKILL)
            targets = [pr.pid for pr in tagged]
        else:
            mine = {pr.pid: pr for pr in tagged}
            for c in self.cgroups.pids(a.job_id):
                info = mine.get(c) or proc_info(c)
                if info is not None:
                    mine[c] = info
            since = self.term_since.setdefault(a.job_id, time.monotonic())
            visible = self.pool.kind in ("local", "netns") and time.monotonic() - since < START_GRACE
            targets, group = soft_stop(mine, pid, self.termed.setdefault(a.job_id, set()), visible)
            if group:
                stop_job(pid)
        for t in targets:
            try:
                os.kill(t, signal.SIGKILL if a.hard else signal.SIGTERM)
            except OSError:
                pass

    def _kill(self, a: Kill) -> None:
        """Kill what an ended job left on a host (its cgroup's processes there included)."""
        tag = self.tag(a.job_id)
        ended = a.job_id not in self.procs
        pids = self.pool.leftovers(tag, a.host, cgroup=self.cgroups.pids(a.job_id), ended=ended)
        if pids:
            log.warning("job %d: killing %d process(es) left on %s: %s", a.job_id, len(pids), a.host, pids)
            self.pool.kill(tag, a.host, pids)
            if ended and self.pool.kind == "local":
                self.cgroups.signal(a.job_id, signal.SIGKILL)

    def _reap(self, now: float) -> None:
        for jid, p in list(self.procs.items()):
            if isinstance(p, subprocess.Popen):
                if p.poll() is None:
                    continue
                sig = p.returncode
            else:
                try:
                    if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                        continue
                except psutil.Error:
                    pass
                sig = None
            del self.procs[jid]
            self.allowed.pop(jid, None)
            self.termed.pop(jid, None)
            self.term_since.pop(jid, None)
            code, _ = read_rc(self.jobs_dir, jid)
            if code is None and sig is not None:      # no file (a full disk): the shepherd exits with the job's code
                code = sig if sig >= 0 else 128 - sig
            j = self.core.jobs.get(jid)
            if code != 0 and self.config.host_check and self.pool.kind != "local" and j and not j.stop_at:
                self.held_exits.held.append(JobExited(now, jid, code))     # a lost host may explain it
                continue
            self.handle(JobExited(now, jid, code))
            self.dirty = True

    def _check_hosts(self, now: float) -> None:
        hosts = self.core.draining()
        if not hosts:
            return
        scan = scan_tagged(self.cid + ".") if self.pool.kind in ("local", "netns") else None
        for h in hosts:
            jid = h.drain
            assert jid is not None
            alive = jid in self.core.jobs and jid in self.procs
            allowed = self.allowed.get(jid, 0) if alive else 0
            left = self.pool.leftovers(self.tag(jid), h.name, allowed, scan, self.cgroups.pids(jid), not alive)
            if not left:
                self.handle(HostClean(now, h.name))
                self.dirty = True

    def _apply_probe(self, probed: dict[str, str], now: float) -> None:
        """Mark hosts that stop answering down (their job is interrupted and re-queued), and up again."""
        for name, why in probed.items():
            h = self.core.hosts.get(name)
            if h is None:
                continue
            if why and not h.down:
                log.error("host %s is down: %s", name, why)  # noqa: TRY400 - not an exception
                self.handle(HostDown(now, name, why))
                self.dirty = True
            elif not why and h.down:
                log.warning("host %s answers again", name)
                self.handle(HostUp(now, name))
                self.dirty = True

    # -- recovery --------------------------------------------------------------------------------------------
    def _recover(self) -> None:
        now = time.time()
        scan: dict[str, list] | None = None
        for j in list(self.core.jobs.values()):
            if j.state != "RUNNING":
                continue
            proc = None
            if j.pid:
                try:
                    cand = psutil.Process(j.pid)
                    if abs(cand.create_time() - j.pid_ctime) < 1.0 and cand.status() != psutil.STATUS_ZOMBIE:
                        proc = cand
                except psutil.Error:
                    proc = None
            if proc is None:
                if scan is None:
                    scan = scan_tagged(self.cid + ".")
                mine = scan.get(self.tag(j.id), [])
                pids = {p.pid for p in mine}
                top = [p for p in mine if p.ppid not in pids]
                if top:
                    try:
                        proc = psutil.Process(top[0].pid)
                        self.handle(JobLaunched(now, j.id, proc.pid, proc.create_time()))
                    except psutil.Error:
                        proc = None
            if proc is not None:
                self.procs[j.id] = proc
                with self.store.tx():
                    self.store.add_event(j.id, "reattach", f"re-attached to pid {proc.pid} after a restart", now)
                continue
            code, started = read_rc(self.jobs_dir, j.id)
            if code is not None:
                self.handle(JobExited(now, j.id, code))
            elif started:
                self.handle(JobExited(now, j.id, None, "ended while the controller was down; exit code lost"))
            else:
                self.handle(Relaunch(now, j.id))
        self.dirty = True

    # -- messages --------------------------------------------------------------------------------------------
    def _handle_frames(self, frames: list[bytes], sock: zmq.Socket[Any] | None = None,
                       peer: int | None = -1) -> None:
        """Authenticate, authorize and answer one message; nothing it contains can stop the loop. On the local
        socket (``sock``) the requester is the Unix user ``peer`` (None: its credentials were missing)."""
        local = sock is not None
        if len(frames) < 2:
            self.rejected += 1
            return  # nothing to answer to
        ident = frames[0]
        body = frames[1:]
        env: list[bytes] = []
        if body and body[0] == b"":
            env, body = [b""], body[1:]
        rid, wire = 0, None
        try:
            try:
                msg, rid, wire, kid = self.gate.open(body, local)
            except ReplayError:
                wire, rid = self.gate.replayed(body, local)   # authentic (the MAC passed): answer under its key
                raise
            except Rejected as e:                    # authentic, refused by a field check: the reason goes back
                wire, rid = self.gate.ring(local).wire(e.key_id), e.request_id
                raise
            who = self.gate.requester(msg, kid, local, peer)
            reply = self._dispatch(msg, who) if who is not None else P.Ok()   # None: a MUNGE session opened
            self.handled += 1
        except ReplayError as e:
            self.rejected += 1
            reply = P.Error("ReplayError", str(e))
        except AuthError as e:
            self.rejected += 1
            reply = P.Error("AuthError", str(e))
        except ProtocolError as e:
            self.rejected += 1
            reply = P.Error("ProtocolError", str(e)[:500])
        except UnknownJob as e:
            self.rejected += 1
            reply = P.Error("UnknownJob", str(e))
        except Refusal as e:
            self.rejected += 1
            reply = P.Error("Refused", str(e))
        except MalleableError as e:
            self.rejected += 1
            reply = P.Error(type(e).__name__, str(e))
        except Exception as e:  # a bug: answer it, log it, serve the next message
            self.rejected += 1
            log.exception("internal error handling a message")
            reply = P.Error("InternalError", f"{type(e).__name__}: {str(e)[:300]} (logged by the controller)")
        try:
            if wire is None:              # not authenticated: no request id either
                wire, rid = self.gate.ring(local).wire(""), 0
            to = sock if sock is not None else self.sock
            assert to is not None
            for out in encode_reply(reply, wire, rid):
                to.send_multipart([ident, *env, *out], zmq.NOBLOCK)
        except zmq.ZMQError as e:
            log.debug("reply dropped: %s", e)
        except Exception:
            log.exception("could not encode or send a reply")

    def _dispatch(self, m: P.Message, who: Any) -> P.Message:
        view = VIEWS.get(type(m))
        if view is not None:
            authorize(who, m)
            return view(self, m)
        if type(m) not in self.core.requests:
            raise ProtocolError(f"{m.TYPE} is a reply, not a request")
        if type(m) is P.Submit:      # the Unix user it runs as, from the proven requester (never the client's word)
            uid, gid = run_as(who.kind, who.name, m.user)  # type: ignore[attr-defined]
            return self._submit(dataclasses.replace(m, uid=uid, gid=gid), who)
        reply = self.handle(Request(time.time(), m, who))
        if type(m) is not P.Poll:
            self.dirty = True
        if type(m) is P.Committed and (m.idle or self.pool.kind == "local"):  # type: ignore[attr-defined]
            self.allowed[m.job_id] = m.new_size + m.idle  # type: ignore[attr-defined]
        return reply if reply is not None else P.Ok()


    def _submit(self, m: P.Submit, who: Any) -> P.Message:
        """A submit is queued only if its record was saved: when the store cannot write (a full disk), it is
        refused and the core forgets it."""
        why = "not queued: the controller {} ({}); no new work is accepted until there is space again"
        if self.backlog.error:
            raise Refusal(why.format("cannot write its state", self.backlog.error))
        reply = self.handle(Request(time.time(), m, who))
        self.dirty = True
        if self.backlog.held and isinstance(reply, P.Submitted):       # its own record is what waits
            self.backlog.held = []
            self.core.withdraw(reply.job_id)
            raise Refusal(why.format("could not save the job", self.backlog.error))
        return reply if reply is not None else P.Ok()


_ACTIONS: dict[type, Callable[[Daemon, Any], None]] = {
    Launch: Daemon._launch,
    Stop: Daemon._stop,
    Kill: Daemon._kill,
    **dict.fromkeys(FsShell.ACTIONS, lambda d, a: d.fs.carry_out(a)),     # the file systems' (and mounts')
}
"""How the daemon carries out each process action of the core."""


def run_foreground(config: DaemonConfig) -> int:
    """Run the daemon in this process until shutdown or SIGTERM/SIGINT; returns the exit code."""
    d = Daemon(config)
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:  # noqa: ARG001
        stop.set()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        d.start()
        d.serve(stop)
    finally:
        d.close()
        for s, h in old.items():
            signal.signal(s, h)
    return 0
