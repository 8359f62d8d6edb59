"""The pure modules (policies, the decision path, the live core's state machine, the wire and the file system's
placement and scaling rule) type-check with mypy."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PURE = ["malleable.controller.sched", "malleable.controller.daemon._core", "malleable.controller.daemon._state",
        "malleable.controller.daemon._jobs", "malleable.controller.daemon._pass", "malleable.controller.daemon._link",
        "malleable.controller.daemon._hosts", "malleable.controller.daemon._storage",
        "malleable.controller.daemon._fsscale", "malleable.controller.daemon._fsrecord",
        "malleable.controller.daemon._mountplan",
        "malleable.controller.daemon._records", "malleable.controller.daemon._reports",
        "malleable.controller.daemon._events", "malleable.controller.daemon._protocol", "malleable._wire",
        "malleable.adhocfs._placement", "malleable.adhocfs._rule", "malleable.adhocfs._messages",
        "malleable.adhocfs._bulk_messages",
        "malleable.controller.experiments._stats", "malleable.controller.experiments._verdict",
        "malleable.controller.experiments._spec", "malleable.controller.experiments._results",
        "malleable.controller.report._format", "malleable.controller.report._markdown"]


@pytest.mark.timeout(600)
def test_pure_modules_type_check(tmp_path):
    # the folders map to malleable.* subpackages (setuptools package-dir): mirror that layout for mypy
    root = tmp_path / "malleable"
    root.mkdir()
    for f in (REPO / "malleable").iterdir():
        (root / f.name).symlink_to(f)
    for part in ("runtime", "controller", "adhocfs", "apps", "launch"):
        (root / part).symlink_to(REPO / part)
    args = [a for m in PURE for a in ("-p", m)]
    out = subprocess.run([sys.executable, "-m", "mypy", "--ignore-missing-imports", "--follow-imports=silent",
                          "--python-version", "3.11", "--cache-dir", str(tmp_path / "cache"), *args],
                         cwd=tmp_path, capture_output=True, text=True, timeout=540)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
