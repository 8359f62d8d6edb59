"""The soft-stop rule of a cancelled job, tick by tick: who gets a SIGTERM, whether the process group does, and
that nothing is signalled twice; the process trees are those of hydra and PRRTE jobs."""

from __future__ import annotations

import pytest

from malleable.controller.daemon._hostpool import ProcInfo, application, ranks_up, soft_stop

SHEPHERD = 100


def tree(*rows: tuple[int, int, str]) -> dict[int, ProcInfo]:
    return {pid: ProcInfo(pid, ppid, name, 0) for pid, ppid, name in rows}


HYDRA_STARTING = tree((101, SHEPHERD, "mpiexec"))
HYDRA_UP = tree((101, SHEPHERD, "mpiexec"), (102, 101, "ssh"), (103, 102, "hydra_pmi_proxy"),
                (104, 103, "python3"), (105, 103, "python3"))
PRRTE_UP = tree((101, SHEPHERD, "prterun"), (102, 101, "python3"), (103, 101, "ssh"), (104, 103, "prted"),
                (105, 104, "python3"))
PLAIN = tree((101, SHEPHERD, "python3"))   # a rigid job without a launcher: its program is the shepherd's child


@pytest.mark.parametrize(("procs", "visible", "first", "group"), [
    (HYDRA_STARTING, True, [], False),        # ranks will appear: wait for them (hydra signalled now can hang)
    (HYDRA_STARTING, False, [101], False),    # they cannot be seen (ssh, Slurm): mpiexec passes it on
    ({}, False, [], True),                    # nothing but the shepherd yet: its process group gets it
    (HYDRA_UP, True, [104, 105], False),      # the ranks, not mpiexec or its proxy (they report the exit)
    (HYDRA_UP, False, [104, 105], False),
    (PRRTE_UP, True, [102, 105], False),      # prterun starts its own host's ranks itself
    (PLAIN, False, [101], False),
])
def test_one_signal_each(procs, visible, first, group):
    sent: set[tuple[int, str]] = set()
    assert soft_stop(procs, SHEPHERD, sent, visible) == (first, group)
    if first or group:                        # a second tick sends nothing more
        assert soft_stop(procs, SHEPHERD, sent, visible) == ([], False)


def test_an_execd_process_is_signalled_again():
    sent: set[tuple[int, str]] = set()
    assert soft_stop(HYDRA_UP, SHEPHERD, sent, True) == ([104, 105], False)
    execd = {**HYDRA_UP, 104: ProcInfo(104, 103, "a.out", 0)}   # the same pid, a new program
    assert soft_stop(execd, SHEPHERD, sent, True) == ([104], False)


def test_the_launch_chain_is_not_the_application():
    assert ranks_up(list(HYDRA_UP.values())) and not ranks_up(list(HYDRA_STARTING.values()))
    assert application(list(HYDRA_STARTING.values()), SHEPHERD) == [101]   # mpiexec alone looks like the program
    assert application(list(PRRTE_UP.values()), SHEPHERD) == [102, 105]
