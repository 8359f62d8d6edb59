"""Real Unix users for the privilege tests: made with ``useradd`` for one test and removed after (with whatever
processes they left)."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator

import psutil
import pytest

from malleable.controller.daemon._identity import UnixUser, unix_user
from tests._reach import closed_to_others

__all__ = ["unix_users"]


@contextlib.contextmanager
def unix_users(n: int) -> Iterator[list[UnixUser]]:
    """``n`` new Unix users (``mlb`` and random letters, no home, shell sh), removed on exit; skips without root
    or useradd, or where those users cannot reach the checkout."""
    if os.geteuid() != 0 or not shutil.which("useradd"):
        pytest.skip("needs root and useradd (the privilege tests create Unix users)")
    if why := closed_to_others():
        pytest.skip(why)
    made: list[UnixUser] = []
    try:
        for _ in range(n):
            name = "mlb" + secrets.token_hex(4)
            subprocess.run(["useradd", "-M", "-s", "/bin/sh", name], check=True, capture_output=True, timeout=60)
            u = unix_user(name)
            assert u is not None
            made.append(u)
        yield made
    finally:
        for u in made:
            for p in psutil.process_iter(["uids"]):
                with contextlib.suppress(psutil.Error, TypeError):
                    if p.info["uids"] and p.info["uids"].real == u.uid:
                        p.kill()
            subprocess.run(["userdel", "-f", u.name], capture_output=True, timeout=60)
