"""The runtime's own bytecode, written once so that joiners do not compile the runtime every time they start.

A process spawned by an expansion imports the runtime before it can answer its parents, so whatever that import
costs is paid inside every expansion. With ``PYTHONDONTWRITEBYTECODE`` set (common in containers and CI) Python
never caches the bytecode of modules imported from a source checkout, and each joiner compiles every module of the
runtime again: on this project's test machine that was a third of an expansion. Rank 0 of a job therefore writes
the missing or stale ``.pyc`` files of the ``malleable`` package and its runtime once, at ``init_adapt``, where
the directories are writable (an installed package has them from its installation); imports read them whatever the
flag says.
"""

from __future__ import annotations

import os
import sys

from malleable.runtime._record import get_logger

__all__ = ["cache_bytecode"]

log = get_logger(__name__)


def cache_bytecode() -> None:
    """Write the bytecode of ``malleable`` and ``malleable.runtime`` where it is missing or older than the source.

    Nothing to do when Python writes bytecode itself (the importing process did); unwritable directories are
    skipped (the import then compiles, as before).
    """
    if not sys.dont_write_bytecode:
        return
    import compileall

    import malleable
    import malleable.runtime

    for pkg in (malleable, malleable.runtime):
        d = os.path.dirname(pkg.__file__ or "")
        if d and os.access(d, os.W_OK):
            if not compileall.compile_dir(d, maxlevels=0, quiet=2):
                log.debug("could not write the bytecode of every module in %s", d)
