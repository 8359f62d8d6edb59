"""Knowing that processes really exited: every spawned process holds a TCP connection to rank 0.

MPI cannot tell a process that its peers' processes are gone, only that they disconnected. So each
spawned process connects to a listener of the job's rank 0 (a base process, which never leaves)
and keeps the socket open for its whole life; the kernel closes it when the process exits, so an
EOF on it means the process is gone. Rank 0 uses this to return from a shrink only once the
processes of the released groups have exited, and to say which hosts are really free.
"""

from __future__ import annotations

import logging
import os
import selectors
import socket
import time
from collections.abc import Callable, Iterable
from typing import Any

import psutil

from malleable.errors import AdaptTimeout

__all__ = ["Listener", "connect_back", "local_addresses"]

log = logging.getLogger(__name__)


def local_addresses() -> list[str]:
    """IPv4 addresses of this host (network namespace), non-loopback first."""
    addrs: list[str] = []
    for entries in psutil.net_if_addrs().values():
        for a in entries:
            if a.family == socket.AF_INET and a.address not in addrs:
                addrs.append(a.address)
    return sorted(addrs, key=lambda a: a.startswith("127."))


class Listener:
    """Rank 0's end: accepts one connection per spawned process and watches for their EOFs."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("0.0.0.0", 0))  # noqa: S104 - spawned processes on other hosts connect here
        self._sock.listen(256)
        self._sock.setblocking(False)
        self.port = self._sock.getsockname()[1]
        self.addresses = local_addresses()
        self._conns: dict[tuple[int, int], socket.socket] = {}  # (gid, member) -> socket
        self._pids: dict[tuple[int, int], tuple[str, int]] = {}
        self._ctimes: dict[tuple[int, int], float] = {}

    def endpoint(self) -> dict:
        """What joiners need to connect (JSON)."""
        return {"addresses": self.addresses, "port": self.port}

    def accept(self, expected: Iterable[tuple[int, int]], timeout: float) -> None:
        """Accept the connections of the given (gid, member) processes.

        Raises:
            AdaptTimeout: not all connected within ``timeout`` seconds.
        """
        want = set(expected)
        deadline = time.monotonic() + timeout
        sel = selectors.DefaultSelector()
        sel.register(self._sock, selectors.EVENT_READ)
        pending: list[socket.socket] = []
        try:
            while want - set(self._conns):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AdaptTimeout(f"{len(want - set(self._conns))} spawned process(es) did not report in time")
                for key, _ in sel.select(min(left, 0.5)):
                    if key.fileobj is self._sock:
                        conn, _ = self._sock.accept()
                        conn.setblocking(True)
                        conn.settimeout(max(0.1, left))
                        pending.append(conn)
                        sel.register(conn, selectors.EVENT_READ)
                    else:
                        conn = key.fileobj  # type: ignore[assignment]
                        sel.unregister(conn)
                        pending.remove(conn)  # type: ignore[arg-type]
                        self._register(conn)  # type: ignore[arg-type]
        finally:
            sel.close()
            for c in pending:
                c.close()

    def _register(self, conn: socket.socket) -> None:
        line = b""
        while not line.endswith(b"\n") and len(line) < 256:
            chunk = conn.recv(256)
            if not chunk:
                break
            line += chunk
        try:
            gid, member, pid, host, ctime = line.decode().split()
            key = (int(gid), int(member))
            started = float(ctime)
        except ValueError:
            log.warning("ignoring a malformed liveness hello %r", line[:80])
            conn.close()
            return
        conn.settimeout(None)
        self._conns[key] = conn
        self._pids[key] = (host, int(pid))
        self._ctimes[key] = started

    def gids(self) -> list[int]:
        """Groups with at least one connected process."""
        return sorted({k[0] for k in self._conns})

    def pids(self, gid: int) -> list[tuple[str, int]]:
        """(host, pid) of the live processes of group ``gid``."""
        return [v for k, v in self._pids.items() if k[0] == gid]

    def wait_gone(self, gids: Iterable[int], timeout: float, progress: Callable[[], Any] | None = None) -> None:
        """Return once every process of the groups ``gids`` has exited (its socket hit EOF).

        ``progress`` is called at least every 10 ms meanwhile: leaving processes of some MPIs (Intel MPI) can
        finalize only while their peers' MPI library makes progress.

        Raises:
            AdaptTimeout: some are still alive after ``timeout`` seconds.
        """
        gids = set(gids)
        keys = [k for k in self._conns if k[0] in gids]
        sel = selectors.DefaultSelector()
        for k in keys:
            sel.register(self._conns[k], selectors.EVENT_READ, k)
        deadline = time.monotonic() + timeout
        try:
            while keys:
                left = deadline - time.monotonic()
                if left <= 0:
                    names = ", ".join(f"pid {self._pids[k][1]}@{self._pids[k][0]}" for k in keys)
                    raise AdaptTimeout(f"leaving processes still alive after {timeout:.0f} s: {names}")
                if progress is not None:
                    progress()
                for key, _ in sel.select(min(left, 0.01) if progress is not None else left):
                    k = key.data
                    try:
                        data = self._conns[k].recv(64)
                    except OSError:
                        data = b""
                    if not data:
                        sel.unregister(self._conns[k])
                        self._conns.pop(k).close()
                        _, pid = self._pids.pop(k)
                        keys.remove(k)
                        _reap_wait(pid, self._ctimes.pop(k), deadline)
        finally:
            sel.close()

    def collect_exits(self, timeout: float, progress: Callable[[], Any] | None = None) -> list[int]:
        """At the job's end: the status each connected process reports (``exit N``) before it finalizes.

        Waits up to ``timeout`` s in all; a process that closes without a report (or never reports) adds nothing.
        """
        sel = selectors.DefaultSelector()
        bufs: dict[tuple[int, int], bytes] = {}
        for k, conn in self._conns.items():
            sel.register(conn, selectors.EVENT_READ, k)
            bufs[k] = b""
        codes: list[int] = []
        deadline = time.monotonic() + timeout
        try:
            while bufs and time.monotonic() < deadline:
                if progress is not None:
                    progress()
                for key, _ in sel.select(0.01):
                    k = key.data
                    try:
                        data = self._conns[k].recv(64)
                    except OSError:
                        data = b""
                    bufs[k] += data
                    line, sep, _ = bufs[k].partition(b"\n")
                    if sep or not data:
                        sel.unregister(self._conns[k])
                        del bufs[k]
                        parts = line.split()
                        if len(parts) == 2 and parts[0] == b"exit" and parts[1].isdigit():
                            codes.append(int(parts[1]))
        finally:
            sel.close()
        return codes

    def forget(self, gids: Iterable[int]) -> None:
        """Drop (and close) the connections of groups that failed to join."""
        for k in [k for k in self._conns if k[0] in set(gids)]:
            self._conns.pop(k).close()
            self._pids.pop(k)
            self._ctimes.pop(k, None)

    def close(self) -> None:
        """Close the listener and every connection."""
        for c in self._conns.values():
            c.close()
        self._conns.clear()
        self._sock.close()


def _reap_wait(pid: int, started: float, deadline: float) -> None:
    """After the EOF a process may still be tearing down for a moment: wait until it is a zombie or gone.

    Only possible where rank 0 sees the process (same host, or hosts sharing a PID namespace); the
    process is recognised by its pid *and* start time, so an unrelated local pid never matches.
    """
    while time.monotonic() < deadline:
        try:
            p = psutil.Process(pid)
            if abs(p.create_time() - started) > 0.05 or p.status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.001)


def connect_back(endpoint: dict, gid: int, member: int, timeout: float) -> int:
    """Spawned side: connect to rank 0's listener, say who we are, and leave the socket to the kernel.

    Returns the raw file descriptor, detached from Python so that interpreter shutdown does not
    close it: only the end of the process does, which is what rank 0 waits for.

    Raises:
        AdaptTimeout: no address of the endpoint could be reached.
    """
    errors = []
    deadline = time.monotonic() + timeout
    for addr in endpoint["addresses"]:
        left = max(0.2, min(5.0, deadline - time.monotonic()))
        try:
            s = socket.create_connection((addr, endpoint["port"]), timeout=left)
        except OSError as e:
            errors.append(f"{addr}: {e}")
            continue
        s.settimeout(None)
        started = psutil.Process().create_time()
        s.sendall(f"{gid} {member} {os.getpid()} {socket.gethostname()} {started:.3f}\n".encode())
        return s.detach()
    raise AdaptTimeout(f"cannot reach rank 0 of the job to report in: {'; '.join(errors)}")
