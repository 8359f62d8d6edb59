"""Process checks shared by the tests: is a pid still a running process (a zombie is not)? Kill one and wait."""

import psutil


def running(pid: int) -> bool:
    """True while ``pid`` names a process that has not ended; a process that ends between the checks is not running."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def kill9(pid: int, timeout: float = 10.0) -> None:
    """SIGKILL ``pid`` and wait until it is gone (its handle is taken first: a parent may reap it at once)."""
    try:
        p = psutil.Process(pid)
        p.kill()
        p.wait(timeout)
    except psutil.NoSuchProcess:
        pass
