"""The --slurm host pool: hosts from the allocation's node list, hydra's Slurm launcher; a real Slurm if present."""

from __future__ import annotations

import shutil

import pytest
from malleable.controller._hostpool import HostPool

from malleable.errors import ConfigError


def test_pool_from_the_allocation():
    pool = HostPool.from_slurm({"SLURM_JOB_NODELIST": "node[1-3,7]"})
    assert pool.kind == "slurm" and pool.nodes == ("node1", "node2", "node3", "node7")
    assert pool.launch_args() == ["-launcher", "slurm"]
    assert HostPool.from_slurm({"SLURM_NODELIST": "a,b"}).nodes == ("a", "b")


def test_outside_an_allocation():
    with pytest.raises(ConfigError, match="SLURM_JOB_NODELIST"):
        HostPool.from_slurm({})


def test_real_slurm():
    missing = [x for x in ("slurmctld", "slurmd", "munged", "srun") if shutil.which(x) is None]
    if missing:
        pytest.skip(f"no Slurm on this machine ({', '.join(missing)} not installed; Debian: apt-get install "
                    "slurmctld slurmd munge): the real-Slurm test was not written")
    pytest.skip("a real-Slurm fixture (one slurmd per namespace host) is not implemented yet")
