"""Runs the pytest-mpi suites under mpiexec and checks that every rank passed them all."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import REPO

SUITE = Path(__file__).parent / "mpi"


@pytest.mark.parametrize("n", [2, 5])
def test_redistribution_suite_under_mpiexec(mpi, n):
    proc = mpi.run(n, mpi.python, "-m", "pytest", "--with-mpi", "-q", "-p", "no:cacheprovider", str(SUITE),
                   timeout=240, cwd=str(REPO), check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    passed = [int(m) for m in re.findall(r"(\d+) passed", proc.stdout)]
    assert passed == [3] * n, out  # every rank ran and passed all three tests
