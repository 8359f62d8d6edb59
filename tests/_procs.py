"""Process checks and waits shared by the tests: is a pid still a running process (a zombie is not)? Its command
line? Kill one and wait; wait for a condition, with a deadline."""

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from typing import Any

import psutil


def running(pid: int) -> bool:
    """True while ``pid`` names a process that has not ended; a process that ends between the checks is not running."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False



def cmdline(pid: int) -> list[str]:
    """The command line of ``pid``, or nothing when it ended meanwhile (a zombie has none)."""
    try:
        return psutil.Process(pid).cmdline()
    except psutil.Error:
        return []

def kill9(pid: int, timeout: float = 10.0) -> None:
    """SIGKILL ``pid`` and wait until it is gone (its handle is taken first: a parent may reap it at once)."""
    try:
        p = psutil.Process(pid)
        p.kill()
        p.wait(timeout)
    except psutil.NoSuchProcess:
        pass


def run_all_or_kill(argv: list[str], timeout: float, **kw: Any) -> subprocess.CompletedProcess:
    """``subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)``, except that on a timeout
    every process it started is killed too (its launcher's daemons, ranks, spawned joiners), not only ``argv``'s
    own process: a hung MPI job must not keep spinning through the tests after it."""
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True, **kw) as p:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            procs: list[psutil.Process] = []
            with contextlib.suppress(psutil.Error):
                procs = psutil.Process(p.pid).children(recursive=True)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            for q in procs:
                with contextlib.suppress(psutil.Error):
                    q.kill()
            out, err = p.communicate()
            raise subprocess.TimeoutExpired(argv, timeout, out, err) from None
    return subprocess.CompletedProcess(argv, p.returncode, out, err)


def wait_for(pred: Callable[[], Any], timeout: float, what: str, every: float = 0.1) -> Any:
    """Poll ``pred`` until it returns something truthy and return that; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)
