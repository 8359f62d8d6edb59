"""One daemon per state: the exclusive lock a daemon holds on its state for its whole life, and the checks a
state file passes before a daemon opens it for writing.

The lock is ``flock`` on a file beside the state (``STATE.lock``, :func:`~._paths.lock_file`), opened with
``O_NOFOLLOW`` and checked to be a regular file; it holds the pid of its holder, so a second ``controller start``
can say which process owns the state. The kernel drops the lock when the daemon's process ends, however it ends
(``kill -9`` included), so a stale lock file never blocks a restart. A separate file rather than the database
itself: SQLite's own POSIX locks on the database are dropped when any descriptor of that file is closed.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat

from malleable.errors import ConfigError

from ._paths import lock_file

__all__ = ["StateBusy", "StateLock", "check_state", "lock_holder"]


class StateBusy(ConfigError):
    """Another living process holds the lock on the state.

    Attributes:
        pid: that process (0 if it did not write its pid yet).
    """

    def __init__(self, state: str, pid: int) -> None:
        who = f"the controller pid {pid}" if pid else "another controller"
        super().__init__(f"the state {state} is in use: {who} holds its lock {lock_file(state)}")
        self.pid = pid


def _open_lock(state: str) -> int:
    path = lock_file(state)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o600)
    except OSError as e:
        if e.errno == 40:     # ELOOP: a symbolic link planted there
            raise ConfigError(f"the lock file {path} is a symbolic link: refused (remove it)") from None
        raise ConfigError(f"cannot open the lock file {path}: {e.strerror}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ConfigError(f"the lock file {path} is not a regular file: refused (remove it)")
    return fd


def _read_pid(fd: int) -> int:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return 0
    return int(text) if text.isdigit() else 0


class StateLock:
    """The exclusive lock on a state, held from :meth:`acquire` to :meth:`release` (or the process's end).

    Args:
        state: the state file.
    """

    def __init__(self, state: str) -> None:
        self.state = state
        self.fd: int | None = None

    def acquire(self) -> None:
        """Take the lock and write this process's pid in it.

        Raises:
            StateBusy: a living process holds it.
            ConfigError: the lock file is a link or not a regular file, or cannot be opened.
        """
        fd = _open_lock(self.state)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _read_pid(fd)
            os.close(fd)
            raise StateBusy(self.state, pid) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd = fd

    def release(self) -> None:
        """Give the lock up (the file stays: removing it would race with the next holder)."""
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, 0)
            os.close(self.fd)
            self.fd = None


def lock_holder(state: str) -> int | None:
    """The pid of the process holding the state's lock (0 if unknown), or None when nobody holds it."""
    if not os.path.lexists(lock_file(state)):
        return None
    fd = _open_lock(state)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _read_pid(fd)
    finally:
        os.close(fd)
    return None


def check_state(state: str) -> None:
    """Refuse, in one line, a state path a daemon must not open for writing: a symbolic link, something that is
    not a regular file (``/dev/null``), an empty file (a fresh state is created by the daemon itself, with its
    tables, never found empty), or a file that is not a controller state (truncated, or another database). A
    missing file is fine: the daemon creates it. Nothing is changed.

    Raises:
        ConfigError: the path is refused.
    """
    from ._store import Store

    try:
        st = os.lstat(state)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise ConfigError(f"--state {state} is a symbolic link: give the file itself")
    if not stat.S_ISREG(st.st_mode):
        what = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise ConfigError(f"--state {state} is {what}: refused")
    if st.st_size == 0:
        raise ConfigError(f"--state {state} is empty (0 bytes), not a controller state: its jobs would be "
                          "forgotten; restore it, or remove it to start a fresh controller")
    with open(state, "rb") as f:
        head = f.read(100)
    if head.startswith(b"SQLite format 3\0") and len(head) == 100:
        size = int.from_bytes(head[16:18], "big")
        pages = int.from_bytes(head[28:32], "big")
        want = (65536 if size == 1 else size) * pages
        if st.st_size < want:
            raise ConfigError(f"--state {state} is truncated ({st.st_size} of {want} bytes): refused; restore it "
                              "from a copy")
    Store.reader(state).close()       # raises if it is not a controller state file
