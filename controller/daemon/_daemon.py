"""The controller daemon: a zmq ROUTER loop around the core (:mod:`._core`), carrying out its actions.

One loop, one thread: receive and answer messages (command line and runtime links), notice jobs that ended,
check draining hosts for leftover processes, enforce time limits, and run a scheduling pass after every event
and on a tick. All waits are bounded (the socket poll by the tick).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import logging
import os
import secrets
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import zmq

from malleable._secret import load_token
from malleable.controller.sched import get_policy
from malleable.errors import AuthError, ConfigError, MalleableError, ProtocolError, Refusal, UnknownJob

from . import _protocol as P
from ._core import Core, CoreConfig
from ._events import (
    PERSIST,
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
from ._hostpool import HostPool, scan_tagged
from ._launch import job_argv, job_env, read_rc, start_job, stop_job
from ._paths import addr_file, jobs_dir
from ._store import Store

__all__ = ["Daemon", "DaemonConfig", "make_policy", "run_foreground"]

log = logging.getLogger(__name__)

STOP_GRACE = 5.0      # seconds between SIGTERM and SIGKILL of a stopped job
CHECK_EVERY = 0.2     # seconds between checks of draining hosts


@dataclass
class DaemonConfig:
    """What ``malleable controller start`` was asked for.

    Attributes:
        state: the SQLite state file.
        pool: the hosts.
        policy: a registered policy name.
        params: keyword parameters for the policy (only those its signature accepts).
        bind: address to listen on (default: the pool's advertised address for namespace pools, else 127.0.0.1).
        port: TCP port (0: a free one; default: the port of the previous run of this state, else 0).
        tick: seconds between periodic scheduling passes.
        core: settings of the core.
        host_check: seconds between checks that every host answers (0: never).
    """

    state: str
    pool: HostPool
    policy: str = "easy"
    params: dict[str, Any] = field(default_factory=dict)
    bind: str | None = None
    port: int | None = None
    tick: float = 1.0
    core: CoreConfig = field(default_factory=CoreConfig)
    host_check: float = 5.0


def make_policy(name: str, params: dict[str, Any]) -> Callable:
    """The registered policy ``name`` with ``params`` bound (refused if it does not take them).

    Raises:
        PolicyError: unknown policy.
        ConfigError: a parameter the policy does not accept.
    """
    pol = get_policy(name)
    if not params:
        return pol
    cfg = getattr(pol, "cfg", None)
    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):  # a policy object built from a config
        names = {f.name for f in dataclasses.fields(cfg)}
        bad = [k for k in params if k not in names]
        if bad:
            raise ConfigError(f"policy {name} has no parameter(s) {', '.join(bad)}; it has {', '.join(sorted(names))}")
        return type(pol)(dataclasses.replace(cfg, **params))
    sig = inspect.signature(pol)
    bad = [k for k in params if k not in sig.parameters]
    if bad:
        raise ConfigError(f"policy {name} takes no parameter(s) {', '.join(bad)}")
    return functools.partial(pol, **params)


class Daemon:
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
        self.store = Store(config.state)
        cid = self.store.get_meta("controller_id")
        if cid is None:
            cid = secrets.token_hex(4)
            self.store.set_meta("controller_id", cid)
        self.cid = cid
        self.core = Core(self.pool.nodes, make_policy(config.policy, config.params), config.core,
                         hosts=self.store.load_hosts(), jobs=self.store.load_jobs(),
                         ended=self.store.ended_jobs(), policy_name=config.policy)
        self.store.apply(self.core.take_actions())
        self.jobs_dir = jobs_dir(config.state)
        self.ctx: zmq.Context[Any] | None = None
        self.sock: zmq.Socket[Any] | None = None
        self.address = ""
        self.job_address = ""
        self.procs: dict[int, Any] = {}          # job id -> Popen (ours) or psutil.Process (re-attached)
        self.stopping: dict[int, float] = {}     # job id -> when to SIGKILL
        self.allowed: dict[int, int] = {}        # local pools: rank processes a shrunk job keeps
        self.started = time.time()
        self.shutdown = False
        self.cancel_on_exit = False
        self.dirty = True
        self._last_tick = 0.0
        self._last_check = 0.0
        self._last_probe = 0.0
        self.handled = 0
        self.rejected = 0

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
        s.setsockopt(zmq.MAXMSGSIZE, 4 << 20)
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
        advertise = bind if bind not in ("0.0.0.0", "*") else self.pool.advertise  # noqa: S104 - a comparison
        self.job_address = f"tcp://{advertise}:{port}"
        with self.store.tx():
            self.store.set_meta("port", str(port))
            self.store.add_event(None, "start", f"controller {self.cid} on {self.address}, pool {self.pool.kind} "
                                 f"{len(self.pool.nodes)} hosts, policy {self.config.policy}")
        self._recover()
        af = addr_file(self.config.state)
        tmp = af.with_name(af.name + ".tmp")
        tmp.write_text(json.dumps({"address": self.address, "pid": os.getpid(), "jobs": self.job_address}))
        tmp.replace(af)
        log.info("controller listening on %s (jobs use %s)", self.address, self.job_address)
        return self.address

    def close(self) -> None:
        """Close the socket and the database (running jobs are left alone)."""
        if self.sock is not None:
            self.sock.close(0)
            self.sock = None
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

    def serve(self, stop: threading.Event | None = None) -> None:
        """Run the loop until a ``shutdown`` message (or ``stop`` is set, or SIGTERM in the main thread)."""
        assert self.sock is not None, "start() first"
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        tick = self.config.tick
        while True:
            if stop is not None and stop.is_set():
                break
            if self.shutdown and (not self.cancel_on_exit or not self.procs):
                break
            now = time.time()
            wait = min(tick, max(0.0, self._last_tick + tick - now), CHECK_EVERY if self.core.draining() else tick)
            if self.core.wakes:
                wait = min(wait, max(0.0, min(self.core.wakes) - now))
            if self.dirty:
                wait = 0.0
            if poller.poll(int(wait * 1000)):
                self._drain_socket()
            self._housekeeping()

    # -- carrying out the core's actions ---------------------------------------------------------------------
    def _handle(self, event: Any) -> Any:
        """Hand one event to the core and carry out its actions; returns the reply, if any."""
        return self._do(self.core.handle(event))

    def _do(self, actions: list[Any]) -> Any:
        persist = [a for a in actions if type(a) in PERSIST]
        if persist:
            self.store.apply(persist)
        reply = None
        for a in actions:
            t = type(a)
            if t is Reply:
                reply = a.msg
            elif t not in PERSIST:
                _ACTIONS[t](self, a)
        return reply

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
        if now - self._last_check >= CHECK_EVERY:
            self._last_check = now
            self._check_hosts(now)
            self._escalate(now)
        if self.config.host_check and now - self._last_probe >= self.config.host_check:
            self._last_probe = now
            self._probe_hosts(now)
        if now - self._last_tick >= self.config.tick or (self.core.wakes and min(self.core.wakes) <= now):
            self._last_tick = now
            self._handle(Tick(now))
            self.dirty = True
        if self.dirty and not self.shutdown:
            self.dirty = False
            self._handle(Schedule(time.time()))

    def _launch(self, a: Launch) -> None:
        j = a.job
        now = time.time()
        try:
            argv = job_argv(j, self.pool, self.config.core.slots)
            env = job_env(j, self.pool, self.config.core.slots, self.job_address, self.token, self.tag(j.id))
            p = start_job(j, argv, env, self.jobs_dir)
        except (OSError, MalleableError) as e:
            log.error("job %d: launch failed: %s", j.id, e)  # noqa: TRY400 - the reason is the message
            self._handle(LaunchFailed(now, j.id, str(e)))
            self.dirty = True
            return
        self.procs[j.id] = p
        try:
            ctime = psutil.Process(p.pid).create_time()
        except psutil.Error:
            ctime = 0.0
        self._handle(JobLaunched(now, j.id, p.pid, ctime))
        log.info("job %d launched (pid %d): %s", j.id, p.pid, " ".join(argv))

    def _stop(self, a: Stop) -> None:
        p = self.procs.get(a.job_id)
        stop_job(p.pid if p is not None else a.pid)
        self.stopping[a.job_id] = time.time() + STOP_GRACE

    def _escalate(self, now: float) -> None:
        for jid, when in list(self.stopping.items()):
            if jid not in self.procs:
                del self.stopping[jid]
            elif now >= when:
                p = self.procs[jid]
                stop_job(p.pid, hard=True)
                self._kill_everywhere(jid)
                self.stopping[jid] = now + STOP_GRACE

    def _kill_everywhere(self, job_id: int) -> None:
        if self.pool.kind in ("local", "netns"):
            for pr in scan_tagged(self.tag(job_id)).get(self.tag(job_id), []):
                try:
                    os.kill(pr.pid, signal.SIGKILL)
                except OSError:
                    pass

    def _kill(self, a: Kill) -> None:
        tag = self.tag(a.job_id)
        pids = self.pool.leftovers(tag, a.host)
        if pids:
            log.warning("job %d: killing %d process(es) left on %s: %s", a.job_id, len(pids), a.host, pids)
            self.pool.kill(tag, a.host, pids)

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
            self.stopping.pop(jid, None)
            self.allowed.pop(jid, None)
            code, _ = read_rc(self.jobs_dir, jid)
            if code is None and sig is not None and sig < 0:
                code = 128 - sig
            self._handle(JobExited(now, jid, code))
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
            if self.pool.kind == "local" and not alive:
                left = [p.pid for p in (scan or {}).get(self.tag(jid), [])]
            else:
                left = self.pool.leftovers(self.tag(jid), h.name, allowed, scan)
            if not left:
                self._handle(HostClean(now, h.name))
                self.dirty = True

    def _probe_hosts(self, now: float) -> None:
        """Mark hosts that stop answering down (their job is interrupted and re-queued), and up again."""
        for name, why in self.pool.probe(self.core.nodes).items():
            h = self.core.hosts.get(name)
            if h is None:
                continue
            if why and not h.down:
                log.error("host %s is down: %s", name, why)  # noqa: TRY400 - not an exception
                self._handle(HostDown(now, name, why))
                self.dirty = True
            elif not why and h.down:
                log.warning("host %s answers again", name)
                self._handle(HostUp(now, name))
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
                        self._handle(JobLaunched(now, j.id, proc.pid, proc.create_time()))
                    except psutil.Error:
                        proc = None
            if proc is not None:
                self.procs[j.id] = proc
                with self.store.tx():
                    self.store.add_event(j.id, "reattach", f"re-attached to pid {proc.pid} after a restart", now)
                continue
            code, started = read_rc(self.jobs_dir, j.id)
            if code is not None:
                self._handle(JobExited(now, j.id, code))
            elif started:
                self._handle(JobExited(now, j.id, None, "ended while the controller was down; exit code lost"))
            else:
                self._handle(Relaunch(now, j.id))
        self.dirty = True

    # -- messages --------------------------------------------------------------------------------------------
    def _handle_frames(self, frames: list[bytes]) -> None:
        if len(frames) < 2:
            self.rejected += 1
            return  # nothing to answer to
        ident = frames[0]
        body = frames[1:]
        env: list[bytes] = []
        if body and body[0] == b"":
            env, body = [b""], body[1:]
        rid = 0
        try:
            msg, rid = P.decode(body, self.token)
            reply = self._dispatch(msg)
            self.handled += 1
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
        try:
            assert self.sock is not None
            self.sock.send_multipart([ident, *env, *P.encode(reply, self.token, rid)], zmq.NOBLOCK)
        except zmq.ZMQError as e:
            log.debug("reply dropped: %s", e)

    def _dispatch(self, m: P.Message) -> P.Message:
        view = _VIEWS.get(type(m))
        if view is not None:
            return view(self, m)
        if type(m) not in _CORE_REQUESTS:
            raise ProtocolError(f"{m.TYPE} is a reply, not a request")
        reply = self._handle(Request(time.time(), m))
        if type(m) is not P.Poll:
            self.dirty = True
        if type(m) is P.Committed and (m.idle or self.pool.kind == "local"):  # type: ignore[attr-defined]
            self.allowed[m.job_id] = m.new_size + m.idle  # type: ignore[attr-defined]
        return reply if reply is not None else P.Ok()

    # -- read-only requests and shutdown ---------------------------------------------------------------------
    def _queue(self, m: P.Queue) -> P.Message:
        running = sorted((j for j in self.core.jobs.values() if j.state != "PENDING"), key=lambda j: j.id)
        return P.Table([self._row(j) for j in running + self.core.queue()])

    def _nodes(self, m: P.Nodes) -> P.Message:
        rows = []
        for name in self.core.nodes:
            h = self.core.hosts[name]
            if h.down:
                state = "down"
            elif h.owner is not None and h.drain is not None:
                state = "alloc+drain"
            elif h.owner is not None:
                state = "alloc"
            elif h.drain is not None:
                state = "draining"
            else:
                state = "idle"
            rows.append({"name": name, "state": state, "job": h.owner, "drain": h.drain, "reason": h.down})
        return P.Table(rows)

    def _history(self, m: P.History) -> P.Message:
        return P.Table([self._row(j) for j in self.store.finished_jobs(m.limit)])

    def _info(self, m: P.Info) -> P.Message:
        j = self.core.jobs.get(m.job_id) or self.store.load_job(m.job_id)
        if j is None:
            raise UnknownJob(f"no job {m.job_id}")
        return P.JobInfo(self._row(j), self.store.steps(m.job_id), self.store.events(m.job_id))

    def _status_reply(self, m: P.Status) -> P.Message:
        return P.StatusReply({
            "address": self.address, "jobs_address": self.job_address, "pid": os.getpid(),
            "controller_id": self.cid, "state": self.config.state, "pool": self.pool.kind,
            "nodes": list(self.pool.nodes), "policy": self.config.policy, "slots": self.config.core.slots,
            "uptime": time.time() - self.started, "handled": self.handled, "rejected": self.rejected,
            **self.core.status()})

    def _shutdown(self, m: P.Shutdown) -> P.Message:
        self.shutdown = True
        if m.cancel_jobs:
            self.cancel_on_exit = True
            now = time.time()
            for jid in list(self.core.jobs):
                self._handle(Request(now, P.Cancel(jid)))
        return P.Ok()

    def _row(self, j: Any) -> dict[str, Any]:
        row = j.public()
        row["expected_start"] = self.core.reservation(j.id)
        return row


_ACTIONS: dict[type, Callable[[Daemon, Any], None]] = {
    Launch: Daemon._launch,
    Stop: Daemon._stop,
    Kill: Daemon._kill,
}
"""How the daemon carries out each process action of the core."""

_VIEWS: dict[type, Callable[[Daemon, Any], P.Message]] = {
    P.Queue: Daemon._queue,
    P.Nodes: Daemon._nodes,
    P.History: Daemon._history,
    P.Info: Daemon._info,
    P.Status: Daemon._status_reply,
    P.Shutdown: Daemon._shutdown,
}
"""Requests the daemon answers itself (read-only views, and shutdown)."""

_CORE_REQUESTS = (P.Submit, P.Cancel, P.Register, P.Poll, P.Committed, P.Refused, P.Progress)
"""Requests handed to the core."""

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
