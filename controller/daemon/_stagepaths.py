"""The local side of staging, reached as the job's own user: sources opened once without following a link at their
last step, destination folders opened (or made) the same way, new files made under a temporary name and checked by
descriptor, and the temporary files of stage-outs whose process died removed (:mod:`._stager` copies the bytes)."""

from __future__ import annotations

import errno
import os
import re
import secrets
import stat

__all__ = ["StageFailure", "clear_stale", "kind", "make_dir_at", "new_file", "open_folder", "open_source"]

_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_DIR = os.O_RDONLY | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_TMP = ".stage-out."


class StageFailure(Exception):
    """A pair cannot be staged; the message is the one line reported."""


def kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def open_source(path: str, dir_fd: int | None = None, shown: str = "") -> int:
    """``path`` opened once for reading without following a link (relative to ``dir_fd`` when given; ``shown``
    is its name in messages)."""
    shown = shown or path
    try:
        return os.open(path, _READ, dir_fd=dir_fd)
    except OSError as e:
        if e.errno == errno.ELOOP:                          # the last step is a symbolic link
            raise StageFailure(f"{shown} is a symbolic link: not staged") from None
        raise StageFailure(f"{shown}: {e.strerror}") from None


def open_folder(path: str, make_last: bool) -> int:
    """The destination folder ``path`` opened as a directory (its last level made first when ``make_last``)."""
    path = path.rstrip("/") or "/"
    if make_last:
        head, _, last = path.rpartition("/")
        pfd = open_folder(head or "/", make_last=False)
        try:
            return make_dir_at(last, pfd, path)
        finally:
            os.close(pfd)
    return _open_dir_at(path, None, path)


def make_dir_at(name: str, dir_fd: int, shown: str) -> int:
    """Folder ``name`` in ``dir_fd`` (made if missing) opened as a directory, not through a link."""
    try:
        os.mkdir(name, 0o777, dir_fd=dir_fd)
    except FileExistsError:
        pass
    except OSError as e:
        raise StageFailure(f"{shown}: {e.strerror}") from None
    return _open_dir_at(name, dir_fd, shown)


def _open_dir_at(name: str, dir_fd: int | None, shown: str) -> int:
    try:
        return os.open(name, _DIR, dir_fd=dir_fd)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise StageFailure(f"{shown}: not a folder (a link or a file): not staged there") from None
        raise StageFailure(f"destination folder {shown}: {e.strerror}") from None


_STALE = re.compile(r"\..+\.stage-out\.(\d+)\.[0-9a-f]{8}")


def _stager_alive(pid: int) -> bool:
    """Whether ``pid`` may still be a stager writing its file: it exists, is not a zombie (a stager killed with its
    controller stays one until reaped) and runs this module; another user's process counts as alive (not ours to
    judge)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read()
    except (OSError, IndexError):
        return False
    return state != b"Z" and b"malleable.controller.daemon._stager" in cmd


def clear_stale(dfd: int) -> None:
    """Remove from folder ``dfd`` the temporary files of stage-outs whose process died mid-copy (a controller
    killed): this user's regular files named as :func:`_write_file` names them, of a process that is gone."""
    for entry in os.listdir(dfd):
        m = _STALE.fullmatch(entry)
        if m is None or int(m.group(1)) == os.getpid() or _stager_alive(int(m.group(1))):
            continue
        try:
            st = os.stat(entry, dir_fd=dfd, follow_symlinks=False)
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
                os.unlink(entry, dir_fd=dfd)
        except OSError:
            pass


def new_file(dfd: int, name: str, shown: str) -> tuple[str, int]:
    """A new file under a temporary name for ``name`` in folder ``dfd``, opened and checked regular."""
    tmp = f".{name}{_TMP}{os.getpid()}.{secrets.token_hex(4)}"
    try:
        fd = os.open(tmp, _NEW, 0o666, dir_fd=dfd)
    except OSError as e:
        raise StageFailure(f"{shown}: {e.strerror}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise StageFailure(f"{shown}: the new file is not a regular file")
    return tmp, fd
