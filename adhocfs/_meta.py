"""The metadata server process: a zmq ROUTER loop around :class:`~._namespace.Namespace`, which carries out
the data-server actions the namespace returns, gathers server statistics for ``status``, and runs
elasticity jobs (expand, shrink, rebalance) step by step between requests; run as
``python -m malleable.adhocfs._meta``.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import time
from collections.abc import Callable, Sequence
from typing import Any

import zmq

from malleable._secret import load_token
from malleable.adhocfs._elastic import ElasticMixin
from malleable.adhocfs._namespace import DEFAULT_BLOCK_SIZE, Namespace
from malleable.adhocfs._protocol import (
    Check,
    Error,
    Expand,
    FsStatus,
    Lose,
    Message,
    Ok,
    Register,
    Shrink,
    Shutdown,
    Stats,
    StatsReply,
    Status,
    StopServers,
)
from malleable.adhocfs._rpc import Busy, Peer, StaleLayout
from malleable.adhocfs._serve import announce, bind_socket, serve_one, setup_logging
from malleable.errors import AuthError, FsError, PlacementError, ProtocolError, ServerUnavailable

__all__ = ["MetaServer", "main"]

log = logging.getLogger(__name__)

ACTION_TIMEOUT = 3.0
UNREACHABLE_FOR = 5.0  # seconds a server that timed out is not waited for again (until it registers)


class MetaServer(ElasticMixin):
    """The metadata server shell. Owns the namespace and one :class:`Peer` per data server; everything runs
    on the loop of :meth:`serve` (one thread).

    Args:
        ns: the namespace (SQLite).
        token: the shared secret.
        ctx: zmq context for the connections to data servers.
    """

    def __init__(self, ns: Namespace, token: bytes, ctx: zmq.Context[Any], state: str = "") -> None:
        self.ns, self.token, self.ctx = ns, token, ctx
        self.state = state             # the state directory, reported by status (later servers' logs go there)
        self.peers: dict[int, Peer] = {}
        self.unreachable: dict[int, float] = {}  # sid -> until when it is assumed down (no re-waiting)
        self.running = True
        self.remove_state = False      # a full shutdown asked to remove a state directory it owns
        self.init_elastic()

    # ------------------------------------------------------------ data-server connections
    def peer(self, sid: int) -> Peer:
        """The connection to data server ``sid`` (re-created when its address changed).

        Raises:
            PlacementError: the server is unknown or has no address yet.
        """
        addr = {r["sid"]: r["addr"] for r in self.ns.servers()}.get(sid)  # 'gone' ones too: told to exit
        if not addr:
            raise PlacementError(f"data server {sid} is not registered")
        p = self.peers.get(sid)
        if p is None or p.addr != addr:
            if p is not None:
                p.close()
            p = self.peers[sid] = Peer(
                self.ctx, addr, self.token, f"data server {sid} ({addr})", ACTION_TIMEOUT
            )
        return p

    def call_many(
        self, calls: Sequence[tuple[int, Message]], timeout: float = ACTION_TIMEOUT
    ) -> dict[int, Message | BaseException]:
        """Send each ``(sid, message)`` and wait for every reply; returns ``{index: reply or exception}``."""
        out: dict[int, Message | BaseException] = {}
        sent: dict[tuple[int, int], int] = {}
        now = time.monotonic()
        for i, (sid, msg) in enumerate(calls):
            if self.unreachable.get(sid, 0) > now:
                out[i] = ServerUnavailable(f"data server {sid} did not answer recently")
                continue
            try:
                sent[(sid, self.peer(sid).send(msg))] = i
            except (PlacementError, zmq.ZMQError) as e:
                out[i] = e
        deadline = time.monotonic() + timeout
        waiting = {sid for sid, _ in sent}
        for sid in sorted(waiting):
            p = self.peers[sid]
            while any(k[0] == sid for k in sent):
                try:
                    reply, rid = p.recv(max(0.05, deadline - time.monotonic()))
                except (ServerUnavailable, AuthError) as e:
                    if isinstance(e, ServerUnavailable):
                        self.unreachable[sid] = time.monotonic() + UNREACHABLE_FOR
                    for k in [k for k in sent if k[0] == sid]:
                        out[sent.pop(k)] = e
                    break
                i = sent.pop((sid, rid), None)
                if i is not None:
                    out[i] = reply
        return out

    def run_actions(self, actions: Sequence[tuple[int, Message]]) -> None:
        """Carry out best-effort actions; failures are logged (e.g. orphan blocks of a down server)."""
        if not actions:
            return
        for i, res in self.call_many(actions).items():
            if isinstance(res, BaseException) or isinstance(res, Error):
                log.warning("action %s on server %d failed: %s", actions[i][1].TYPE, actions[i][0], res)

    # ------------------------------------------------------------ requests
    def handle(self, msg: Message) -> Message:
        """Answer one validated request: the server's own (status, shutdown, changes) or the namespace's."""
        fn = _HANDLERS.get(type(msg))
        if fn is not None:
            return fn(self, msg)
        if isinstance(msg, Register):
            self.unreachable.pop(msg.sid, None)
        reply, actions = self.ns.handle(msg)
        self.run_actions(actions)
        return reply

    def _status(self, msg: Status) -> Message:
        return self.status()

    def _shutdown(self, msg: Shutdown) -> Message:
        self.remove_state = msg.everything and not msg.keep
        if msg.everything:
            sids = [r["sid"] for r in self.ns.servers() if r["state"] in ("up", "active", "leaving")]
            self.run_actions([(s, Shutdown()) for s in sids])
        self.running = False
        return Ok()

    def _stop_servers(self, msg: StopServers) -> Message:
        states = {r["sid"]: r["state"] for r in self.ns.servers()}
        bad = [s for s in msg.sids if states.get(s) not in ("up", "reserved")]
        if bad:
            raise FsError(f"servers {bad} are commissioned or unknown: shrink them instead")
        self.run_actions([(s, Shutdown()) for s in msg.sids if states[s] == "up"])
        for s in msg.sids:
            self.ns.db.execute("UPDATE servers SET state='gone' WHERE sid=?", (s,))
        return Ok()

    def status(self) -> FsStatus:
        """Servers with their live counters, epochs and the change in progress."""
        rows = [r for r in self.ns.servers() if r["state"] != "gone"]
        live = [r for r in rows if r["state"] not in ("reserved", "lost") and r["addr"]]
        replies = self.call_many([(r["sid"], Stats()) for r in live], timeout=1.5)
        stats: dict[int, Any] = {live[i]["sid"]: rep for i, rep in replies.items()}
        servers = []
        for r in rows:
            d = dict(r)
            rep = stats.get(r["sid"])
            if isinstance(rep, StatsReply):
                d.update(
                    blocks=rep.blocks,
                    bytes=rep.bytes,
                    reads=rep.reads,
                    writes=rep.writes,
                    read_bytes=rep.read_bytes,
                    write_bytes=rep.write_bytes,
                    aio=rep.aio,
                    req_rate=rep.req_rate,
                    samples=rep.samples[-10:],
                    capacity=rep.capacity,
                    reachable=True,
                )
            else:
                d.update(reachable=False)
            servers.append(d)
        epochs = {str(k): list(v) for k, v in self.ns.epochs().items()}
        cur = self.ns.current_epoch()
        return FsStatus(
            servers,
            -1 if cur is None else cur,
            epochs,
            len(self.ns.files()),
            self.change_info(),
            self.ns.rio(),
            self.ns.recent_history(),
            [r["path"] for r in self.ns.files() if r["damaged"] != "[]"],
            self.ns.replicas(),
            self.state,
        )

    # ------------------------------------------------------------ loop
    def serve(self, sock: zmq.Socket[Any]) -> None:
        """Answer requests on ``sock`` until shut down; steps a running elasticity job between requests."""
        while self.running:
            busy = self.job_active()
            if sock.poll(0 if busy else 100, zmq.POLLIN):
                for _ in range(32):
                    try:
                        frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
                    except zmq.Again:
                        break
                    self._serve_one(sock, frames)
            if busy:
                self.step_job()
        for p in self.peers.values():
            p.close()

    def _serve_one(self, sock: zmq.Socket[Any], frames: list[Any]) -> None:
        serve_one(sock, frames, self.token, self.handle,
                  (ProtocolError, StaleLayout, Busy, FsError, PlacementError, ValueError, OSError),
                  (Busy, FileNotFoundError, FileExistsError), "the metadata server")


_HANDLERS: dict[type, Callable[[MetaServer, Any], Message]] = {
    Status: MetaServer._status,
    Shutdown: MetaServer._shutdown,
    StopServers: MetaServer._stop_servers,
    Expand: MetaServer.expand,
    Shrink: MetaServer.shrink,
    Lose: MetaServer.lose,
    Check: MetaServer.check,
}
"""Requests the metadata server answers itself (the others go to its namespace)."""


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``python -m malleable.adhocfs._meta --host H [--port P] --state DIR``."""
    p = argparse.ArgumentParser(prog="malleable.adhocfs._meta", description="adhocfs metadata server")
    p.add_argument("--host", default="127.0.0.1", help="host name clients use to reach this server")
    p.add_argument("--port", type=int, default=0, help="port (0: a random free port)")
    p.add_argument("--state", required=True, help="directory for the SQLite database")
    p.add_argument(
        "--block-size", type=int, default=DEFAULT_BLOCK_SIZE, help="default block size of new files"
    )
    p.add_argument("--log", default=None, help="log file (default stderr)")
    p.add_argument("--owns-state", action="store_true",
                   help="the state directory was made for this file system: remove it when a full shutdown "
                        "does not ask to keep it")
    p.add_argument(
        "--replicas", type=int, default=None, help="copies of each block (fixed when the file system is created)"
    )
    args = p.parse_args(argv)
    setup_logging(args.log, "meta")
    token = load_token()
    os.makedirs(args.state, exist_ok=True)
    ns = Namespace(os.path.join(args.state, "meta.sqlite"), args.block_size)
    if ns.kv_get("replicas") is None:
        if args.replicas is not None and args.replicas < 1:
            p.error("--replicas must be at least 1")
        ns.kv_set("replicas", args.replicas or 1)
    elif args.replicas is not None and args.replicas != ns.replicas():
        log.warning("keeping the %d replicas of the existing file system", ns.replicas())
    ctx = zmq.Context()
    sock, addr = bind_socket(ctx, zmq.ROUTER, args.host, args.port, token, max_frame=2 << 20)
    server = MetaServer(ns, token, ctx, os.path.abspath(args.state))
    try:
        server.recover()
        announce(addr)
        log.info("metadata server on %s (state %s)", addr, args.state)
        server.serve(sock)
    finally:
        sock.close(linger=0)
        for peer in server.peers.values():
            peer.close()
        ctx.term()
        ns.close()
    log.info("metadata server stopped")
    if args.owns_state and server.remove_state:
        logging.shutdown()                    # the log file is in the state directory
        shutil.rmtree(args.state, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
