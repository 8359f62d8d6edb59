"""Whether other Unix users can reach this checkout: the privilege tests run the product as users they create,
and those users need to enter every folder above the checkout and the venv."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

__all__ = ["closed_to_others"]

CHECKOUT = Path(__file__).resolve().parents[1]


def closed_to_others() -> str | None:
    """Why another user cannot run this checkout's Python and code (a folder on the way without the others'
    execute bit), or None when they can."""
    for start in (CHECKOUT, Path(sys.executable).parent):
        for d in (start, *start.parents):
            mode = os.stat(d).st_mode
            if not mode & stat.S_IXOTH:
                return (f"other users cannot enter {d} (mode {stat.S_IMODE(mode):04o}), so the users this test "
                        "makes cannot run the checkout: clone it into a folder others can enter")
    return None
