"""Starting and stopping adhocfs servers on hosts (locally or through the ssh-like launcher): the Python API
behind ``malleable fs start|stop|expand`` and what the controller calls.
"""

from __future__ import annotations

import logging
import os
import selectors
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import zmq

from malleable._secret import load_token
from malleable.adhocfs._protocol import AddServers, Change, Expand, FsStatus, ServerIds, Shutdown, Status
from malleable.adhocfs._rpc import Peer
from malleable.adhocfs._serve import READY
from malleable.errors import ConfigError, FsError
from malleable.launch import spawn_on

__all__ = [
    "Deployment",
    "MetaClient",
    "parse_hostport",
    "start_data_servers",
    "start_fs",
    "start_meta",
    "stop_fs",
]

log = logging.getLogger(__name__)

START_TIMEOUT = 30.0


def parse_hostport(spec: str) -> tuple[str, int]:
    """``HOST[:PORT]`` as ``(host, port)`` (port 0 when absent).

    Raises:
        ConfigError: a bad port.
    """
    host, _, port = spec.rpartition(":") if ":" in spec else (spec, "", "0")
    if not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ConfigError(f"expected HOST[:PORT], got {spec!r}")
    return host, int(port)


class MetaClient:
    """A short-lived connection to a metadata server for administrative requests (use as a context manager).

    Args:
        addr: metadata server address.
        token: shared secret (default: ``load_token()``).
        timeout: seconds per request.
    """

    def __init__(self, addr: str, token: bytes | None = None, timeout: float = 10.0) -> None:
        self.ctx: zmq.Context[Any] = zmq.Context()
        self.peer = Peer(
            self.ctx, addr, token if token is not None else load_token(), f"metadata server {addr}", timeout
        )

    def call(self, msg: Any, timeout: float | None = None) -> Any:
        """One request; error replies are raised."""
        return self.peer.call(msg, timeout)

    def status(self) -> FsStatus:
        """The file system's status."""
        reply = self.call(Status())
        assert isinstance(reply, FsStatus)
        return reply

    def close(self) -> None:
        """Close the connection."""
        self.peer.close()
        self.ctx.term()

    def __enter__(self) -> MetaClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class Deployment:
    """A running adhocfs instance started by this process.

    Attributes:
        address: metadata server address (``tcp://HOST:PORT``).
        state: directory of the metadata database and server logs.
        procs: local handles of the processes started (launcher processes for remote hosts).
        data: ``{sid: (host, address)}`` of the data servers.
    """

    address: str
    state: str
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    data: dict[int, tuple[str, str]] = field(default_factory=dict)
    dir: str | None = None

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every server and wait for the processes this object started."""
        stop_fs(self.address, timeout=timeout)
        self.wait(timeout)

    def wait(self, timeout: float = 10.0) -> None:
        """Wait for the started processes to exit; kill those that do not."""
        deadline = time.monotonic() + timeout
        for name, p in self.procs.items():
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("%s (pid %d) did not exit; killing it", name, p.pid)
                p.kill()
                p.wait()

    def __enter__(self) -> Deployment:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop()
        except (FsError, OSError) as e:
            log.warning("stopping %s: %s", self.address, e)
            for p in self.procs.values():
                if p.poll() is None:
                    p.kill()
            self.wait(2.0)


def _python_cmd(module: str, *args: str) -> list[str]:
    # -P: the working directory is not put first on sys.path, so a server started from inside another checkout
    # of malleable runs the installed code, not that checkout's
    return [sys.executable, "-P", "-m", module, *args]


def _spawn(host: str, cmd: list[str], launcher: str | None, errfile: str | None = None,
           env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start ``cmd`` on ``host`` (with ``env``, default this process's); the launcher's (and the early server's)
    stderr goes to ``errfile``."""
    err = open(errfile, "ab") if errfile else subprocess.DEVNULL  # noqa: SIM115 - closed below, kept by the child
    try:
        return spawn_on(
            host,
            cmd,
            launcher,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err,
            start_new_session=True,
            env=env,
        )
    finally:
        if errfile:
            err.close()  # type: ignore[union-attr]


def _wait_ready(procs: dict[str, subprocess.Popen], logs: dict[str, str], timeout: float) -> dict[str, str]:
    """Read each process's ``READY addr`` line; returns ``{name: addr}``.

    Raises:
        FsError: a process exited or stayed silent (with the tail of its log).
    """
    sel = selectors.DefaultSelector()
    for name, p in procs.items():
        assert p.stdout is not None
        sel.register(p.stdout, selectors.EVENT_READ, name)
    out: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(out) < len(procs):
            left = deadline - time.monotonic()
            events = sel.select(max(0.0, left)) if left > 0 else []
            if not events:
                missing = [n for n in procs if n not in out]
                raise FsError(
                    f"{', '.join(missing)} did not start within {timeout:g} s{_tail(logs, missing)}"
                )
            for key, _ in events:
                name = key.data
                line = key.fileobj.readline().decode(errors="replace")  # type: ignore[union-attr]
                if line.startswith(READY + " "):
                    out[name] = line.split()[1]
                    sel.unregister(key.fileobj)
                elif not line:
                    raise FsError(f"{name} exited before it was ready{_tail(logs, [name])}")
    finally:
        sel.close()
    for p in procs.values():
        assert p.stdout is not None
        p.stdout.close()
    return out


def _tail(logs: dict[str, str], names: Sequence[str]) -> str:
    """``": <last line of the launcher's stderr or of the log> (log PATH)"`` for the first of ``names`` that
    left one: one line, so the command's error stays one line."""
    for n in names:
        path = logs.get(n)
        if not path:
            continue
        for candidate in (path + ".launch", path):
            try:
                with open(candidate, errors="replace") as f:
                    lines = [ln.strip() for ln in f.read().splitlines() if ln.strip()]
            except OSError:
                continue
            if lines:
                return f": {lines[-1][:500]} (log {candidate})"
    return ""


def start_data_servers(
    meta: str,
    hosts: Sequence[str],
    state: str,
    dir: str | None = None,
    launcher: str | None = None,
    token: bytes | None = None,
    sids: Sequence[int] | None = None,
    capacity: int = 0,
    env: dict[str, str] | None = None,
) -> tuple[dict[int, tuple[str, str]], dict[str, subprocess.Popen]]:
    """Start data servers on ``hosts`` for the metadata server ``meta`` and wait until they registered.

    Args:
        meta: metadata server address.
        hosts: one host per server (a host may repeat).
        state: directory for the log files.
        dir: backing directory root; server ``sid`` uses ``dir/ds<sid>``.
        launcher: ssh stand-in for remote hosts (default ``MALLEABLE_LAUNCHER_EXEC``).
        token: shared secret.
        sids: restart these existing server ids instead of reserving new ones (same length as ``hosts``).
        capacity: most bytes each server holds (0: no limit); writes beyond it fail with ENOSPC.
        env: the servers' environment (default: this process's); the controller passes a job file system's own
            secret and tag this way.

    Returns:
        ``({sid: (host, address)}, {name: process})``; the servers are registered but not yet
        commissioned (see :class:`~._protocol.Expand`).
    """
    if not hosts:
        raise ConfigError("no data server hosts given")
    with MetaClient(meta, token) as mc:
        if sids is None:
            reply = mc.call(AddServers(list(hosts)))
            assert isinstance(reply, ServerIds)
            sids = reply.sids
    procs: dict[str, subprocess.Popen] = {}
    logs: dict[str, str] = {}
    try:
        for sid, host in zip(sids, hosts, strict=True):
            name = f"data server {sid}"
            logs[name] = os.path.join(state, f"data{sid}.log")
            args = ["--meta", meta, "--sid", str(sid), "--host", host, "--log", logs[name]]
            if dir:
                args += ["--dir", os.path.join(dir, f"ds{sid}")]
            if capacity:
                args += ["--capacity", str(int(capacity))]
            procs[name] = _spawn(host, _python_cmd("malleable.adhocfs._data", *args), launcher,
                                 logs[name] + ".launch", env)
        addrs = _wait_ready(procs, logs, START_TIMEOUT)
    except BaseException:
        for p in procs.values():
            p.kill()
            p.wait()
        raise
    return {sid: (host, addrs[f"data server {sid}"]) for sid, host in zip(sids, hosts, strict=True)}, procs


def start_meta(
    meta: str, state: str, block_size: int = 0, launcher: str | None = None, replicas: int = 1,
    owns_state: bool = False, env: dict[str, str] | None = None,
) -> tuple[str, subprocess.Popen]:
    """Start (or restart, on the same ``state`` directory) a metadata server on ``HOST[:PORT]``; with
    ``owns_state`` it removes the directory when it is stopped without ``keep``; ``env`` is its environment
    (default: this process's).

    Returns:
        ``(address, process)`` once it answers; a restarted server finishes or rolls back any change
        that was interrupted.
    """
    host, port = parse_hostport(meta)
    os.makedirs(state, exist_ok=True)
    log_path = os.path.join(state, "meta.log")
    args = ["--host", host, "--port", str(port), "--state", state, "--log", log_path]
    if block_size:
        args += ["--block-size", str(block_size)]
    if replicas != 1:
        args += ["--replicas", str(replicas)]
    if owns_state:
        args.append("--owns-state")
    proc = _spawn(host, _python_cmd("malleable.adhocfs._meta", *args), launcher, log_path + ".launch", env)
    try:
        addr = _wait_ready({"metadata server": proc}, {"metadata server": log_path}, START_TIMEOUT)[
            "metadata server"
        ]
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return addr, proc


def start_fs(
    meta: str,
    data: Sequence[str],
    dir: str | None = None,
    state: str | None = None,
    block_size: int = 0,
    launcher: str | None = None,
    token: bytes | None = None,
    replicas: int = 1,
    capacity: int = 0,
    env: dict[str, str] | None = None,
    prefix: str = "malleable-fs-",
) -> Deployment:
    """Start a metadata server on ``meta`` (``HOST[:PORT]``) and one data server per entry of ``data``.

    Returns once every server answers.

    Args:
        meta: ``HOST[:PORT]`` of the metadata server.
        data: data server hosts (a host may repeat).
        dir: backing directory root for the data servers (blocks survive restarts).
        state: directory for the metadata database and logs (default: a new temporary directory).
        block_size: default block size of new files (0: 512 KiB).
        launcher: ssh stand-in for remote hosts.
        token: shared secret (servers read it themselves from the environment or the key file).
        replicas: copies kept of each block, on the next servers in rendezvous order (default 1).
        capacity: most bytes each data server holds (0: no limit).
        env: the servers' environment (default: this process's).
        prefix: name prefix of the temporary state directory made when ``state`` is not given (a caller that
            may have to clean up after a killed metadata server names its directories so it can find them).

    Raises:
        FsError: a server failed to start (its log tail is in the message).
        ConfigError: bad arguments.
    """
    if not data:
        raise ConfigError("at least one data server host is needed")
    if replicas < 1 or capacity < 0:
        raise ConfigError(f"replicas must be >= 1 and capacity >= 0, got {replicas} and {capacity}")
    owned = state is None
    state = state or tempfile.mkdtemp(prefix=prefix)
    procs: dict[str, subprocess.Popen] = {}
    try:
        addr, procs["metadata server"] = start_meta(meta, state, block_size, launcher, replicas, owns_state=owned,
                                                    env=env)
        dep = Deployment(addr, state, procs, dir=dir)
        servers, dprocs = start_data_servers(addr, list(data), state, dir, launcher, token, capacity=capacity,
                                             env=env)
        dep.procs.update(dprocs)
        dep.data.update(servers)
        with MetaClient(addr, token) as mc:
            reply = mc.call(Expand(sorted(servers)))
            assert isinstance(reply, Change)
    except BaseException:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
        if owned:                             # made here: nothing of a file system that never started is kept
            shutil.rmtree(state, ignore_errors=True)
        raise
    log.info("adhocfs up: metadata %s, %d data servers", addr, len(servers))
    return dep


def stop_fs(addr: str, timeout: float = 10.0, token: bytes | None = None, keep: bool = False) -> None:
    """Stop the metadata server at ``addr`` and all its data servers; the state directory ``start_fs`` made for
    it (database and logs) is removed unless ``keep`` (one given with ``state=`` is always kept).

    Raises:
        ServerUnavailable: the metadata server does not answer.
    """
    with MetaClient(addr, token, timeout) as mc:
        mc.call(Shutdown(everything=True, keep=keep))
    log.info("adhocfs at %s stopped", addr)
