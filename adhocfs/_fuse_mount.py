"""Mounting adhocfs on a directory: the life of a mount daemon.

:func:`mount` starts the daemon (this module run with ``-m``) in the background with its log in a file, waits
until the kernel has the mount ready (the daemon says so on a pipe) and records the mount; :func:`umount`
unmounts and waits for the daemon to exit. A daemon that dies leaves a mount that answers ENOTCONN (the
kernel's answer), which :func:`umount` removes as well.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import hashlib
import json
import logging
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from malleable.errors import ConfigError, FsError

__all__ = ["FSTYPE", "MountRecord", "fuse_unavailable", "mount", "mount_point", "umount"]

log = logging.getLogger(__name__)

FSTYPE = "fuse.adhocfs"


@dataclass(frozen=True)
class MountRecord:
    """A mount made by :func:`mount`: where, by which daemon, of which file system, and its log."""

    dir: str
    pid: int
    meta: str
    log: str
    started: float


def fuse_unavailable() -> str | None:
    """Why this host cannot mount with FUSE, or None."""
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse does not exist (load the fuse module, or give the container the device)"
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return "/dev/fuse is not readable and writable by this user"
    if os.geteuid() != 0 and not shutil.which("fusermount3"):
        return "fusermount3 is not installed (Debian: apt-get install fuse3)"
    try:
        import mfusepy  # noqa: F401 - loads libfuse 3
    except (ImportError, OSError, AttributeError) as e:
        return f"libfuse 3 cannot be loaded ({e}); Debian: apt-get install fuse3"
    return None


def mount_point(path: str) -> str | None:
    """The file-system type mounted exactly at ``path`` (``fuse.adhocfs`` for ours), or None."""
    real = os.path.realpath(path)
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        lines = f.read().splitlines()
    found = None
    for line in lines:
        left, _, right = line.partition(" - ")
        fields = left.split()
        if len(fields) > 4 and _unescape(fields[4]) == real:
            found = right.split()[0]  # the last mount on a path is the one seen
    return found


def _unescape(text: str) -> str:
    """A mountinfo path: spaces, tabs, newlines and backslashes are written as octal escapes."""
    for code in ("\\040", "\\011", "\\012", "\\134"):
        text = text.replace(code, chr(int(code[1:], 8)))
    return text


def _state_dir() -> Path:
    if os.geteuid() == 0:
        base = Path("/run/malleable/mounts")
    else:
        run = os.environ.get("XDG_RUNTIME_DIR")
        base = Path(run) / "malleable" / "mounts" if run else Path(f"/tmp/malleable-{os.getuid()}/mounts")  # noqa: S108
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    return base


def _record_file(real: str) -> Path:
    return _state_dir() / (hashlib.sha256(real.encode()).hexdigest()[:20] + ".json")


def _load(real: str) -> MountRecord | None:
    try:
        return MountRecord(**json.loads(_record_file(real).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def mount(meta: str, path: str, *, timeout: float = 5.0, log_file: str | None = None, allow_other: bool = False,
          uid: int | None = None, gid: int | None = None, pool: int = 4, wait: float = 30.0) -> MountRecord:
    """Mount the file system whose metadata server is ``meta`` on directory ``path``; return once it is ready.

    Args:
        meta: metadata address ``tcp://HOST:PORT``.
        path: an existing directory.
        timeout: seconds before a silent server makes an operation fail with EIO.
        log_file: the daemon's log (default: beside the mount record).
        allow_other: let other users in (the kernel then checks the modes shown: the owner's files).
        uid, gid: the owner shown for every file (default: the mounting user).
        pool: client connections shared by open files.
        wait: seconds to wait for the mount to be ready.

    Raises:
        ConfigError: ``path`` is not a directory, or is a mount of adhocfs already.
        FsError: FUSE is unavailable, the file system does not answer, or the mount failed (with the reason).
    """
    real = os.path.realpath(path)
    if not os.path.isdir(real):
        raise ConfigError(f"mount: {path} is not a directory")
    if mount_point(real) == FSTYPE:
        raise ConfigError(f"mount: {path} is an adhocfs mount already (malleable fs umount {path})")
    why = fuse_unavailable()
    if why:
        raise FsError(f"mount: FUSE is unavailable: {why}")
    rec_file = _record_file(real)
    log_path = os.path.abspath(log_file) if log_file else str(rec_file.with_suffix(".log"))
    argv = [sys.executable, "-m", __name__, "--meta", meta, "--timeout", str(timeout), "--pool", str(pool)]
    if allow_other:
        argv.append("--allow-other")
    if uid is not None:
        argv += ["--uid", str(uid)]
    if gid is not None:
        argv += ["--gid", str(gid)]
    r, w = os.pipe()
    with open(log_path, "ab") as out:
        proc = subprocess.Popen([*argv, "--ready-fd", str(w), real], stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, pass_fds=(w,), start_new_session=True)
    os.close(w)
    try:
        answer = _read_answer(r, wait)
    finally:
        os.close(r)
    if answer == "ok" and not _serving(real, proc):
        answer = ""
    if answer != "ok":
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait(10)
        if not answer:
            answer = f"no answer within {wait:g} s" if proc.returncode == -signal.SIGKILL else _last_line(log_path)
        raise FsError(f"mount: {path}: {answer} (log: {log_path})")
    _raise_read_ahead(real)
    rec = MountRecord(real, proc.pid, meta, log_path, time.time())
    rec_file.write_text(json.dumps(asdict(rec)))
    proc.returncode = 0  # the daemon outlives this call
    return rec


def _serving(real: str, proc: subprocess.Popen[bytes]) -> bool:
    """Whether the daemon is alive and the kernel answers through the mount (libfuse may still refuse the
    kernel's parameters after the file system's init has run)."""
    try:
        os.stat(real)
    except OSError:
        return False
    return proc.poll() is None and mount_point(real) == FSTYPE


def _read_answer(fd: int, wait: float) -> str:
    """What the daemon wrote on its ready pipe before closing it (empty if it died or did not answer)."""
    deadline, data = time.monotonic() + wait, b""
    while (left := deadline - time.monotonic()) > 0:
        if not select.select([fd], [], [], left)[0]:
            break
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    return data.decode(errors="replace").strip()


def _last_line(path: str) -> str:
    try:
        lines = [ln for ln in Path(path).read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "the mount daemon exited"
    return lines[-1] if lines else "the mount daemon exited"


def _raise_read_ahead(real: str, kb: int = 4096) -> None:
    """Let the kernel read ahead several blocks (its default for FUSE is 128 KiB); root only."""
    dev = os.stat(real).st_dev
    with contextlib.suppress(OSError):
        Path(f"/sys/class/bdi/{os.major(dev)}:{os.minor(dev)}/read_ahead_kb").write_text(str(kb))


def umount(path: str, lazy: bool = False, wait: float = 15.0) -> None:
    """Unmount ``path`` and wait for its daemon to exit.

    Args:
        lazy: detach the mount now even if programs still use it (they keep it until they let go).

    Raises:
        ConfigError: ``path`` is not an adhocfs mount.
        FsError: the kernel refused (busy: a program has a file open or its working directory there).
    """
    real = os.path.realpath(path)
    rec = _load(real)
    if mount_point(real) != FSTYPE:
        if rec is not None:
            _record_file(real).unlink(missing_ok=True)
        raise ConfigError(f"umount: {path} is not an adhocfs mount")
    if shutil.which("fusermount3"):
        cmd = ["fusermount3", "-u", *(["-z"] if lazy else []), real]
    else:
        cmd = ["umount", *(["-l"] if lazy else []), real]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if done.returncode:
        text = " ".join((done.stderr or done.stdout).split()) or f"{cmd[0]} exited {done.returncode}"
        hint = f" (a program uses it; 'malleable fs umount --lazy {path}' detaches it)" if "busy" in text else ""
        raise FsError(f"umount: {text}{hint}")
    if rec is not None:
        if not lazy:  # a lazily detached mount keeps its daemon until the last program lets go
            _wait_exit(rec.pid, wait)
        _record_file(real).unlink(missing_ok=True)


def _wait_exit(pid: int, wait: float) -> None:
    """Wait for the daemon ``pid`` to exit; end it if it does not within ``wait`` seconds."""
    import psutil

    try:
        p = psutil.Process(pid)
        try:
            cmd = " ".join(p.cmdline())
            if cmd and __name__ not in cmd:
                return  # the pid was reused (an exiting daemon shows an empty command line: wait for it)
        except psutil.ZombieProcess:
            pass  # exited already: reaped below if it is this process's child
        p.wait(wait)
    except psutil.TimeoutExpired:
        log.warning("mount daemon %d did not exit within %g s after the unmount: ending it (its threads' stacks "
                    "are in its log)", pid, wait)
        p.send_signal(signal.SIGUSR1)
        time.sleep(0.5)
        p.kill()
        with contextlib.suppress(psutil.Error):
            p.wait(5)
    except psutil.Error:
        return


# ---------------------------------------------------------------- the daemon
def _serve(argv: list[str] | None = None) -> int:
    """The mount daemon: connect, mount, serve until unmounted."""
    p = argparse.ArgumentParser(prog="python -m malleable.adhocfs._fuse_mount")
    p.add_argument("--meta", required=True)
    p.add_argument("--timeout", type=float, default=5.0)
    p.add_argument("--pool", type=int, default=4)
    p.add_argument("--allow-other", action="store_true")
    p.add_argument("--uid", type=int)
    p.add_argument("--gid", type=int)
    p.add_argument("--ready-fd", type=int)
    p.add_argument("dir")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # kill -USR1 PID: every thread's stack in the log
    ready = os.fdopen(args.ready_fd, "w") if args.ready_fd is not None else None

    def tell(text: str) -> None:
        nonlocal ready
        if ready is not None:
            ready.write(text + "\n")
            ready.close()
            ready = None

    from malleable.adhocfs._client import connect
    from malleable.adhocfs._fuse import MountOps, serve

    try:
        with connect(args.meta, timeout=args.timeout) as probe:
            probe.stat("/")  # the file system answers, with this secret
        ops = MountOps(lambda: connect(args.meta, timeout=args.timeout), args.pool, args.uid, args.gid,
                       ready=lambda: tell("ok"))
    except Exception as e:  # noqa: BLE001 - told to the mount command as one line
        tell(" ".join(f"{args.meta}: {e}".split()))
        return 1
    log.info("mounting %s on %s (pid %d)", args.meta, args.dir, os.getpid())
    try:
        serve(ops, args.dir, f"adhocfs:{args.meta}", allow_other=args.allow_other)
    except Exception as e:  # noqa: BLE001 - the mount failed: libfuse said why just before, in the log
        log.error("the mount failed (%s)", e)  # noqa: TRY400 - libfuse's reason is the line before
        tell("")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_serve())
