"""A Unix user for the benchmarks that submit under a user's key: controller users are Unix users, so one is made
with ``useradd`` for the run (root only) and removed after."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator

__all__ = ["bench_user"]


@contextlib.contextmanager
def bench_user() -> Iterator[str]:
    """The name of a Unix user made for this run, removed on exit.

    Raises:
        SystemExit: not root, or no useradd (one line).
    """
    if os.geteuid() != 0 or not shutil.which("useradd"):
        raise SystemExit("this benchmark submits under a user's key, which needs a Unix user: run it as root")
    name = "mlbbench" + secrets.token_hex(3)
    subprocess.run(["useradd", "-M", "-s", "/bin/sh", name], check=True, capture_output=True, timeout=60)
    try:
        yield name
    finally:
        subprocess.run(["userdel", "-f", name], capture_output=True, timeout=60)
