"""Helpers for daemon tests: a controller daemon in a thread (always stopped), waits with deadlines."""

from __future__ import annotations

import contextlib
import glob
import io
import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from malleable.controller.daemon import _protocol as P
from malleable.controller.daemon._client import Client
from malleable.controller.daemon._core import CoreConfig
from malleable.controller.daemon._daemon import Daemon, DaemonConfig
from malleable.controller.daemon._hostpool import HostPool, scan_tagged
from tests._procs import wait_for

TOKEN = "controller-test-token"  # noqa: S105 - a test secret
HEAT = str(Path(__file__).parent / "progs" / "heat_prog.py")
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")


def isolate(monkeypatch: Any, tmp_path: Path) -> Path:
    """A daemon test's environment: the test secret, no inherited controller address, key or encryption setting,
    a private config folder (no key file of the machine's user is read), ``tmp_path`` as working directory."""
    monkeypatch.setenv("MALLEABLE_TOKEN", TOKEN)
    for k in ("MALLEABLE_CONTROLLER", "MALLEABLE_KEY", "MALLEABLE_ENCRYPT", "MALLEABLE_KEY_FILE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def kill_tagged(controller_id: str) -> None:
    """SIGKILL every process of the jobs of one controller still on this machine (a test's cleanup)."""
    for procs in scan_tagged(controller_id + ".").values():
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGKILL)


@contextlib.contextmanager
def daemon_thread(state: Path, pool: HostPool, policy: str = "easy", tick: float = 0.2, host_check: float = 5.0,
                  params: dict[str, Any] | None = None, mount_root: str = "",
                  **core: Any) -> Iterator[tuple[Daemon, Client]]:
    """A daemon serving in a thread, and a client. On exit every job is cancelled and waited for (bounded)."""
    d = Daemon(DaemonConfig(str(state), pool, policy, params or {}, tick=tick, core=CoreConfig(**core),
                            host_check=host_check, mount_root=mount_root), token=TOKEN.encode())
    addr = d.start()
    stop = threading.Event()
    t = threading.Thread(target=d.serve, args=(stop,), daemon=True)
    t.start()
    c = Client(addr, token=TOKEN.encode(), timeout=10)
    try:
        yield d, c
    finally:
        try:
            for row in c.rows(P.Queue()):
                with contextlib.suppress(Exception):
                    c.call(P.Cancel(row["id"]))
            wait_for(lambda: not d.procs, 20, "jobs to stop at teardown")
        finally:
            c.close()
            stop.set()
            t.join(10)
            d.close()


def states(c: Client) -> dict[int, str]:
    return {r["id"]: r["state"] for r in c.rows(P.History(0))}


def wait_final(c: Client, ids: list[int], timeout: float) -> dict[int, str]:
    def done():
        st = states(c)
        return st if all(st.get(i) in FINAL for i in ids) else None
    return wait_for(done, timeout, f"jobs {ids} to end")


def cli(*argv: str) -> tuple[int, str, str]:
    """Run ``malleable ARGV`` in this process; returns (exit code, stdout, stderr)."""
    from malleable.cli import main

    out, err = io.StringIO(), io.StringIO()
    old = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        code = main(list(argv))
    except SystemExit as e:
        code = int(e.code or 0)
    finally:
        sys.stdout, sys.stderr = old
    return code, out.getvalue(), err.getvalue()


def kill_leftovers(pid: int, cid: str) -> None:
    """Test clean-up after a daemon run in its own process: kill the daemon ``pid`` (0: already stopped) and every
    process tagged with its controller id ``cid`` (jobs, file-system servers), and remove its file systems'
    temporary directories (a killed metadata server leaves its own)."""
    if pid:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if cid:
        kill_tagged(cid)
        for root in {tempfile.gettempdir(), os.environ.get("TMPDIR") or tempfile.gettempdir()}:
            for path in glob.glob(os.path.join(root, f"malleable-fs-{cid}.*")):   # its file systems' directories
                shutil.rmtree(path, ignore_errors=True)
