"""Controller users are Unix users: who a name is on this host, and writing a file for someone without ever
acting through a link.

``unix_user`` maps a controller user's name to its Unix account (uid, gid, groups, home); ``refuse_name`` says
why a name may not be a controller user (root, and the operator's own account: their key would speak for the
operator's jobs). ``write_private`` writes a key file for a user as Slurm's tools write for others: the file is
created new (``O_CREAT|O_EXCL|O_NOFOLLOW``, mode 0600) through a descriptor of its directory, checked with
``fstat`` to be a regular file with one link, given away with ``fchown`` on that descriptor and only then renamed
into place, so swapping any name for a symlink at any moment cannot make the owner change land on another file.
"""

from __future__ import annotations

import os
import pwd
import secrets
import stat
from dataclasses import dataclass
from typing import Any

from malleable.errors import ConfigError, Refusal

__all__ = ["UnixUser", "refuse_name", "run_as", "unix_user", "write_private"]


@dataclass(frozen=True, slots=True)
class UnixUser:
    """A Unix account: ``name``, ``uid``, ``gid`` (primary group), ``groups`` (every group it is in) and ``home``."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str


def unix_user(name: str) -> UnixUser | None:
    """The Unix account called ``name`` on this host, or None."""
    try:
        pw = pwd.getpwnam(name)
    except (KeyError, UnicodeError, ValueError):
        return None
    try:
        groups = tuple(os.getgrouplist(name, pw.pw_gid))
    except OSError:
        groups = (pw.pw_gid,)
    return UnixUser(pw.pw_name, pw.pw_uid, pw.pw_gid, groups, pw.pw_dir)


def _own_name() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return ""


def refuse_name(name: str) -> str:
    """Why ``name`` may not be a controller user ("" if it may): root (uid 0) and the account this process runs
    as (the operator's: that key would cancel the operator's jobs) are not users."""
    u = unix_user(name)
    if name == "root" or (u is not None and u.uid == 0):
        return f"{name} is root: root is the operator, not a user"
    if name == _own_name() or (u is not None and u.uid == os.geteuid()):
        return f"{name} is the operator's own account (the one this runs as): it needs no user key"
    return ""


def write_private(path: str, data: bytes, owner: UnixUser | None) -> None:
    """Write ``data`` to ``path`` readable by its owner only (``owner``, given away when we run as root), never
    through a link. The file is made new under a random name in ``path``'s directory and renamed over ``path``
    (a link there is replaced, not followed).

    Raises:
        ConfigError: the directory is missing, writable by everyone without the sticky bit, or a name was
            swapped while we wrote (one line, nothing left behind).
    """
    directory, base = os.path.split(os.path.abspath(path))
    try:
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        raise ConfigError(f"cannot use the folder {directory}: {e.strerror}") from None
    try:
        st = os.fstat(dfd)
        if st.st_mode & stat.S_IWOTH and not st.st_mode & stat.S_ISVTX:
            raise ConfigError(f"the folder {directory} is writable by everyone (no sticky bit): not writing a key "
                              "there")
        tmp = f".{base}.{secrets.token_hex(8)}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                         dir_fd=dfd)
        except OSError as e:
            raise ConfigError(f"cannot create a file in {directory}: {e.strerror}") from None
        try:
            mine = os.fstat(fd)
            if not stat.S_ISREG(mine.st_mode) or mine.st_nlink != 1:
                raise ConfigError(f"{path}: the new file is not a plain file of its own")
            os.fchmod(fd, 0o600)
            if owner is not None and os.geteuid() == 0:
                os.fchown(fd, owner.uid, owner.gid)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            _unlink_if(dfd, tmp, mine.st_ino if "mine" in locals() else -1)
            raise
        os.close(fd)
        try:
            os.rename(tmp, base, src_dir_fd=dfd, dst_dir_fd=dfd)
        except OSError:
            raise ConfigError(f"{path} was swapped for something else while the key was written: nothing "
                              "written") from None
        try:
            now = os.stat(base, dir_fd=dfd, follow_symlinks=False)
        except OSError:
            now = None
        if now is None or (now.st_ino, now.st_dev) != (mine.st_ino, mine.st_dev):
            _unlink_if(dfd, base, -1, only_links=True)
            raise ConfigError(f"{path} was swapped for something else while the key was written: nothing written")
    finally:
        os.close(dfd)


def _unlink_if(dfd: int, name: str, ino: int, only_links: bool = False) -> None:
    """Remove ``name`` in the directory ``dfd`` if it is still our file (inode ``ino``) or, with ``only_links``,
    a symlink someone planted (removing a link never touches its target)."""
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        if st.st_ino == ino or (only_links and stat.S_ISLNK(st.st_mode)):
            os.unlink(name, dir_fd=dfd)
    except OSError:
        pass


def run_as(kind: str, name: str, asked: str) -> tuple[int, int]:
    """The Unix ``(uid, gid)`` a job submitted by requester ``kind``/``name`` (``asked``: the user the message
    names) runs as.

    A daemon running as root runs each job as its submitter, as slurmd does: a user's key runs as that Unix user
    (refused if there is none, or it is root); the operator (trusted with everything) runs as the Unix user it
    names, or as the daemon when that name is no Unix user. A daemon running as an ordinary user cannot change
    user, so only the operator (that user) may submit.

    Raises:
        Refusal: the job could not run as its submitter.
    """
    if kind == "operator":
        pw = _passwd(asked) if os.geteuid() == 0 and asked else None
        return (pw.pw_uid, pw.pw_gid) if pw is not None else (os.geteuid(), os.getegid())
    if kind != "user":
        return os.geteuid(), os.getegid()   # a job's key: the access rules refuse its submit
    if os.geteuid() != 0:
        raise Refusal(f"submit: the controller runs as Unix user {_own_name() or os.geteuid()}, not root, so its "
                      f"jobs run as that user: only the operator may submit (user {name} may not)")
    pw = _passwd(name)
    if pw is None:
        raise Refusal(f"submit: user {name} is no Unix user on this host (jobs run as their submitter)")
    if pw.pw_uid == 0:
        raise Refusal(f"submit: user {name} is root: root is the operator")
    return pw.pw_uid, pw.pw_gid


def _passwd(name: str) -> Any:
    try:
        return pwd.getpwnam(name)
    except (KeyError, UnicodeError, ValueError):
        return None
