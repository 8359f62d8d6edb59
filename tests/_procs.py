"""Process checks shared by the tests: is a pid still a running process (a zombie is not)?"""

import psutil


def running(pid: int) -> bool:
    """True while ``pid`` names a process that has not ended; a process that ends between the checks is not running."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
