"""Knowing that processes really exited: every spawned process holds a TCP connection to rank 0.

MPI cannot tell a process that its peers' processes are gone, only that they disconnected. So each
spawned process connects to a listener of the job's rank 0 (a base process, which never leaves)
and keeps the socket open for its whole life; the kernel closes it when the process exits, so an
EOF on it means the process is gone. Rank 0 uses this to return from a shrink only once the
processes of the released groups have exited, and to say which hosts are really free.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable

from malleable.errors import AdaptTimeout
from malleable.runtime._record import get_logger

TYPE_CHECKING = False   # typing stays unloaded: a joiner imports this on every expansion's path
if TYPE_CHECKING:
    from typing import Any

__all__ = ["Listener", "connect_back", "hostname", "local_addresses", "own_start_ticks"]

log = get_logger(__name__)


def hostname() -> str:
    """This host's name (``socket.gethostname()``, without loading the socket module: a joiner needs it before it
    can merge)."""
    return os.uname().nodename


def local_addresses() -> list[str]:
    """IPv4 addresses of this host (network namespace), non-loopback first."""
    import socket

    import psutil  # rank 0 only: a joiner reports in without loading it

    addrs: list[str] = []
    for entries in psutil.net_if_addrs().values():
        for a in entries:
            if a.family == socket.AF_INET and a.address not in addrs:
                addrs.append(a.address)
    return sorted(addrs, key=lambda a: a.startswith("127."))


class Listener:
    """Rank 0's end: accepts one connection per spawned process and watches for their EOFs."""

    def __init__(self) -> None:
        import socket

        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("0.0.0.0", 0))  # noqa: S104 - spawned processes on other hosts connect here
        self._sock.listen(256)
        self._sock.setblocking(False)
        self.port = self._sock.getsockname()[1]
        self.addresses = local_addresses()
        self._conns: dict[tuple[int, int], Any] = {}  # (gid, member) -> socket
        self._pending: list[Any] = []   # accepted, report not read yet
        self._rest: dict[tuple[int, int], bytes] = {}   # what came after a report
        self._pids: dict[tuple[int, int], tuple[str, int]] = {}
        self._ctimes: dict[tuple[int, int], int] = {}   # start, in clock ticks since boot

    def endpoint(self) -> dict:
        """What joiners need to connect (JSON)."""
        return {"addresses": self.addresses, "port": self.port}

    def accept(self, expected: Iterable[tuple[int, int]], timeout: float) -> None:
        """Take the reports of every process that connected so far, and wait (up to ``timeout`` s) until the given
        (gid, member) processes have; with nothing expected, it does not wait.

        Joiners report in after their merge, so an expansion never waits for this: rank 0 takes the reports when
        it needs them (a shrink, the job's end).

        Raises:
            AdaptTimeout: not all reported within ``timeout`` seconds.
        """
        import selectors  # rank 0 only: a joiner reports in without it

        want = set(expected)
        deadline = time.monotonic() + timeout
        sel = selectors.DefaultSelector()
        sel.register(self._sock, selectors.EVENT_READ)
        for c in self._pending:
            sel.register(c, selectors.EVENT_READ)
        try:
            while True:
                missing = want - set(self._conns)
                left = deadline - time.monotonic()
                if missing and left <= 0:
                    raise AdaptTimeout(f"{len(missing)} spawned process(es) did not report in time")
                events = sel.select(min(left, 0.5) if missing else 0)
                if not events and not missing:
                    return
                for key, _ in events:
                    if key.fileobj is self._sock:
                        try:
                            conn, _ = self._sock.accept()
                        except BlockingIOError:
                            continue
                        conn.setblocking(True)
                        conn.settimeout(max(0.1, left))
                        self._pending.append(conn)
                        sel.register(conn, selectors.EVENT_READ)
                    else:
                        conn = key.fileobj  # type: ignore[assignment]
                        sel.unregister(conn)
                        self._pending.remove(conn)  # type: ignore[arg-type]
                        self._register(conn)  # type: ignore[arg-type]
        finally:
            sel.close()

    def _register(self, conn: Any) -> None:
        data = b""
        while b"\n" not in data and len(data) < 256:
            chunk = conn.recv(256)
            if not chunk:
                break
            data += chunk
        line, _, rest = data.partition(b"\n")   # a process that ended at once may have sent its exit line too
        try:
            gid, member, pid, host, ticks = line.decode().split()
            key = (int(gid), int(member))
            started = int(ticks)
        except ValueError:
            log.warning("ignoring a malformed liveness hello %r", line[:80])
            conn.close()
            return
        conn.settimeout(None)
        self._conns[key] = conn
        self._rest[key] = rest
        self._pids[key] = (host, int(pid))
        self._ctimes[key] = started

    def hosts(self, gids: Iterable[int], counts: Iterable[int]) -> list[list[str]]:
        """The host each member of the groups ``gids`` (of ``counts`` members) reported from, in member order."""
        return [[self._pids[(g, m)][0] for m in range(c)] for g, c in zip(gids, counts, strict=True)]

    def gids(self) -> list[int]:
        """Groups with at least one connected process."""
        return sorted({k[0] for k in self._conns})

    def pids(self, gid: int) -> list[tuple[str, int]]:
        """(host, pid) of the live processes of group ``gid``."""
        return [v for k, v in self._pids.items() if k[0] == gid]

    def wait_gone(self, gids: Iterable[int], timeout: float, progress: Callable[[], Any] | None = None) -> None:
        """Return once every process of the groups ``gids`` has exited: seen through a pidfd where this host sees
        the process (it is a zombie then), else as the EOF of its connection.

        ``progress`` is called at least every millisecond meanwhile: leaving processes finalize only as fast as
        their peers' MPI library makes progress (Intel MPI's not at all without it).

        Raises:
            AdaptTimeout: some are still alive after ``timeout`` seconds.
        """
        import selectors

        gids = set(gids)
        keys = {k for k in self._conns if k[0] in gids}
        sel = selectors.DefaultSelector()
        exits: dict[tuple[int, int], int] = {}   # pidfds of the processes this host sees
        for k in keys:
            sel.register(self._conns[k], selectors.EVENT_READ, k)
            fd = _pidfd(self._pids[k][1], self._ctimes[k])
            if fd is not None:
                exits[k] = fd
                sel.register(fd, selectors.EVENT_READ, k)
        deadline = time.monotonic() + timeout
        try:
            while keys:
                left = deadline - time.monotonic()
                if left <= 0:
                    names = ", ".join(f"pid {self._pids[k][1]}@{self._pids[k][0]}" for k in keys)
                    raise AdaptTimeout(f"leaving processes still alive after {timeout:.0f} s: {names}")
                if progress is not None:
                    progress()
                for key, _ in sel.select(min(left, 0.001) if progress is not None else left):
                    k = key.data
                    if k not in keys:   # its exit and its EOF came together
                        continue
                    if key.fd == exits.get(k):   # exited (a zombie now): its host is free
                        sel.unregister(key.fd)
                        self._drop(k, sel)
                        keys.discard(k)
                        continue
                    try:
                        data = self._conns[k].recv(64)
                    except OSError:
                        data = b""
                    if not data:
                        sel.unregister(self._conns[k])
                        if k not in exits:   # another host's: the EOF is all there is to see
                            self._drop(k, sel)
                            keys.discard(k)
        finally:
            for fd in exits.values():
                os.close(fd)
            sel.close()

    def _drop(self, k: tuple[int, int], sel: Any) -> None:
        """Forget process ``k``, which has exited."""
        conn = self._conns.pop(k)
        if sel.get_map().get(conn.fileno()) is not None:
            sel.unregister(conn)
        conn.close()
        self._rest.pop(k, None)
        self._pids.pop(k)
        self._ctimes.pop(k)

    def collect_exits(self, timeout: float, progress: Callable[[], Any] | None = None) -> list[int]:
        """At the job's end: the status each connected process reports (``exit N``) before it finalizes.

        Waits up to ``timeout`` s in all; a process that closes without a report (or never reports) adds nothing.
        """
        import selectors

        sel = selectors.DefaultSelector()
        bufs: dict[tuple[int, int], bytes] = {}
        for k, conn in self._conns.items():
            sel.register(conn, selectors.EVENT_READ, k)
            bufs[k] = self._rest.pop(k, b"")
        codes: list[int] = []
        deadline = time.monotonic() + timeout
        try:
            while bufs and time.monotonic() < deadline:
                if progress is not None:
                    progress()
                ready = [(k, b"") for k in bufs if b"\n" in bufs[k]]   # exit lines that came with the report
                ready += [(key.data, None) for key, _ in sel.select(0 if ready else 0.01)]
                for k, got in ready:
                    if k not in bufs:
                        continue
                    data = got
                    if data is None:
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
            self._rest.pop(k, None)

    def close(self) -> None:
        """Close the listener and every connection."""
        for c in [*self._conns.values(), *self._pending]:
            c.close()
        self._conns.clear()
        self._pending.clear()
        self._sock.close()


def _pidfd(pid: int, started: int) -> int | None:
    """A pidfd of ``pid`` (readable once it has exited) where this host sees the process (same host, or hosts
    sharing a PID namespace), else None: the EOF of its connection is then all there is.

    The process is recognised by its pid *and* its start in clock ticks since boot, read after the pidfd pins the
    pid, so an unrelated local pid never matches. Ticks, not wall-clock times: the boot time a wall-clock start is
    derived from is a whole second that shifts when the clock is adjusted, and a process taken for another would
    not be waited for.
    """
    try:
        fd = os.pidfd_open(pid)
    except OSError:   # gone already, or not of this PID namespace
        return None
    stat = _proc_stat(pid)
    if stat is None or stat[1] != started:
        os.close(fd)
        return None
    return fd


def _proc_stat(pid: int | str) -> tuple[str, int] | None:
    """(state letter, start in clock ticks since boot) of ``pid`` from /proc; None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0].decode(), int(fields[19])


def connect_back(endpoint: dict, gid: int, member: int, timeout: float) -> int:
    """Spawned side: connect to rank 0's listener, say who we are, and leave the socket to the kernel.

    Returns the raw file descriptor, detached from Python so that interpreter shutdown does not
    close it: only the end of the process does, which is what rank 0 waits for.

    Raises:
        AdaptTimeout: no address of the endpoint could be reached.
    """
    import socket

    errors = []
    deadline = time.monotonic() + timeout
    for addr in endpoint["addresses"]:
        left = max(0.2, min(5.0, deadline - time.monotonic()))
        try:
            # bytes: a str address goes through the idna codec, which loads stringprep and unicodedata
            s = socket.create_connection((addr.encode(), endpoint["port"]), timeout=left)
        except OSError as e:
            errors.append(f"{addr}: {e}")
            continue
        s.settimeout(None)
        s.sendall(f"{gid} {member} {os.getpid()} {socket.gethostname()} {own_start_ticks()}\n".encode())
        return s.detach()
    raise AdaptTimeout(f"cannot reach rank 0 of the job to report in: {'; '.join(errors)}")


def own_start_ticks() -> int:
    """When this process started, in clock ticks since boot (/proc/self/stat's ``starttime``): exact, and the same
    number rank 0 reads for this pid (0 without /proc: rank 0 then relies on the EOF alone)."""
    stat = _proc_stat("self")
    return 0 if stat is None else stat[1]
