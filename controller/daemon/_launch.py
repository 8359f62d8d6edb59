"""Starting and stopping jobs: the mpiexec command of a rigid or malleable job, run under a small shepherd.

A job runs as ``sh -c SHEPHERD`` in its own session (and its own cgroup where the machine has cgroup v2: the shell
moves itself there before starting anything, see :mod:`._cgroup`): the shell runs mpiexec, then writes mpiexec's
exit code to ``<state dir>/jobs/<id>.rc``. The shepherd outlives the daemon (``kill -9`` of the daemon leaves jobs
alone), so a restarted daemon re-attaches to it by pid and learns the exit code from the file. The shell also touches
``<id>.rc.started`` first, which tells a restarted daemon that the job did start.

The command line is in the dialect of the MPI beside the daemon (MPICH, Open MPI or Intel MPI): the runtime's
backend for it writes it (:mod:`malleable.runtime._mpi`), from the hosts and how the pool reaches them.

* Rigid job: ``S`` processes on each of its hosts (``mpiexec -hosts h1,h1,h2,h2 -n 4 cmd`` with MPICH and
  ``S=2``; no code change in the program).
* Malleable job: ``mpiexec -hosts h1 -n 1 cmd``: one anchor process, which spawns the rest per host
  (``MALLEABLE_INITIAL_PROCS``, ``MALLEABLE_HOSTS``), like ``malleable run``; ``MALLEABLE_CONTROLLER`` and
  ``MALLEABLE_JOB`` make its rank 0 open the runtime link.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from malleable._secret import KEY_ENV, Credential
from malleable.launch import find_mpiexec
from malleable.runtime._mpi import REACH_ENV, Backend, LaunchSpec, for_mpiexec

from ._access import secret_looking
from ._hostpool import TAG_VAR, HostPool
from ._protocol import SERVER_KEY_ENV
from ._records import JobRec

__all__ = ["AS_USER", "SHEPHERD", "as_user_argv", "job_argv", "job_env", "launcher", "rc_path", "read_rc",
           "runs_as_other", "start_job", "stop_job"]

SHEPHERD = ('r=$1; g=$2; shift 2; [ -z "$g" ] || { echo $$ > "$g"; } 2>/dev/null; : > "$r.started"; trap : TERM; '
            'trap "" PIPE; "$@"; c=$?; echo "$c" > "$r.tmp" && mv "$r.tmp" "$r"; exit $c')
"""The shepherd: joins the job's cgroup, marks the start, runs the job and records its exit code. It survives the
SIGTERM that stops a job (a trap, reset for the job itself, which gets the default action) to record how the job
ended; only the SIGKILL after the kill wait ends it before the job does. mpiexec runs with SIGPIPE ignored: hydra
writes to the proxy of a host whose processes already ended, and with the default action it died of that (exit
141) in place of reporting the job's own exit code; hydra gives the job's processes the default action back."""


def launcher() -> tuple[str, Backend]:
    """The MPI launcher jobs run under (the one beside the daemon's Python, else ``MALLEABLE_MPIEXEC`` or PATH's)
    and the runtime's backend for its implementation (from its ``--version``, once; MPI is not loaded here).

    Raises:
        ConfigError: no launcher, or one of an unsupported MPI.
    """
    exe = find_mpiexec()
    return exe, for_mpiexec(exe)


def job_argv(job: JobRec, pool: HostPool, slots: int) -> list[str]:
    """The launcher's command line of ``job`` on its hosts, in the dialect of the daemon's MPI (its backend)."""
    exe, backend = launcher()
    if job.malleable:
        spec = LaunchSpec(1, tuple(job.cmd), tuple(job.hosts[:1]), launcher_exec=pool.launcher_exec, reach=pool.reach,
                          pool=pool.nodes)   # it may grow onto any host of the pool
    else:
        hosts = tuple(h for h in job.hosts for _ in range(slots))
        spec = LaunchSpec(len(hosts), tuple(job.cmd), hosts, launcher_exec=pool.launcher_exec, reach=pool.reach)
    return backend.launch_argv(exe, spec)


def job_env(job: JobRec, pool: HostPool, slots: int, controller: str, key: Credential, tag: str,
            server_key: str = "") -> dict[str, str]:
    """The job's environment: the submitter's (without anything secret-looking), plus the controller link, the
    job id, tag and the job's own key (never the operator's secret); ``server_key`` is the daemon's CURVE public
    key when encryption is on."""
    env = {k: v for k, v in job.env.items() if not secret_looking(k, v)}
    env.update({
        "MALLEABLE_JOB": str(job.id),
        "MALLEABLE_CONTROLLER": controller,
        KEY_ENV: key.text,
        TAG_VAR: tag,
        "MALLEABLE_JOB_NODELIST": ",".join(job.hosts),
    })
    if server_key:
        env[SERVER_KEY_ENV] = server_key
    if job.malleable:
        # rank i of the initial job runs on MALLEABLE_HOSTS[i]: hosts in order, `slots` processes each, so the
        # runtime's spawn groups follow the host order and a shrink frees the last hosts first
        env["MALLEABLE_INITIAL_PROCS"] = str(len(job.hosts) * slots)
        env["MALLEABLE_HOSTS"] = ",".join(h for h in job.hosts for _ in range(slots))
        for k, v in launcher()[1].job_env(job.hosts).items():     # e.g. MPICH's OFI netmod; the user's setting wins
            env.setdefault(k, v)
        if pool.launcher_exec:
            env["MALLEABLE_LAUNCHER_EXEC"] = pool.launcher_exec
        if pool.reach == "fork":        # every host is a slot of this machine: spawns under any MPI stay here
            env[REACH_ENV] = "fork"
    return env


def rc_path(state_dir: Path, job_id: int) -> Path:
    """Where the shepherd writes the job's exit code."""
    return state_dir / "jobs" / f"{job_id}.rc"


def read_rc(state_dir: Path, job_id: int) -> tuple[int | None, bool]:
    """``(exit code or None, started)`` as the shepherd left them."""
    p = rc_path(state_dir, job_id)
    started = p.with_name(p.name + ".started").exists()
    try:
        return int(p.read_text().split()[0]), True
    except (OSError, ValueError, IndexError):
        return None, started


AS_USER = ('cd "$1" || exit 126; o=$2; e=$3; shift 3; true >>"$o" || exit 126; exec >>"$o"; '
           'if [ -n "$e" ]; then true >>"$e" || exit 126; exec 2>>"$e"; else exec 2>&1; fi; exec "$@"')
"""What runs as the job's user (after ``setpriv`` dropped root): enter the working folder and open the output
files with that user's rights (a path the user may not write is refused as it would be to them), then run the
job. A folder or output file it cannot use ends the job with exit code 126."""


def runs_as_other(job: JobRec) -> bool:
    """Whether ``job`` runs as another Unix user than the daemon (the daemon is root, the job's is not)."""
    return job.uid >= 0 and os.geteuid() == 0 and job.uid != 0


def as_user_argv(job: JobRec, argv: list[str]) -> list[str]:
    """``argv`` run as the job's user and groups (``setpriv``: real and effective ids, the user's supplementary
    groups, no capabilities left), with its working folder and output files opened as that user."""
    out = job.out or f"malleable-{job.id}.out"
    err = job.err if job.err and job.err != job.out else ""
    return ["setpriv", f"--reuid={job.uid}", f"--regid={job.gid}", "--init-groups", "--inh-caps=-all", "--",
            "sh", "-c", AS_USER, "job", job.cwd, out, err, *argv]


def _open_out(path: str, cwd: str) -> int:
    p = Path(cwd, path) if not os.path.isabs(path) else Path(path)
    return os.open(p, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)


def start_job(job: JobRec, argv: list[str], env: dict[str, str], state_dir: Path, cgroup: str = "") -> subprocess.Popen:
    """Start the shepherd running ``argv`` with the job's output files and working directory, in the cgroup whose
    ``cgroup.procs`` file is ``cgroup`` ("": none). A job of another Unix user (the daemon is root) runs as that
    user, who opens its folder and files (:func:`as_user_argv`); the daemon opens them only for its own jobs.

    Raises:
        OSError: the working directory or an output file cannot be used, or sh is missing.
    """
    rc = rc_path(state_dir, job.id)
    rc.parent.mkdir(parents=True, exist_ok=True)
    for p in (rc, rc.with_name(rc.name + ".started")):
        p.unlink(missing_ok=True)
    if runs_as_other(job):       # the shepherd stays root (it writes the exit code); the job drops to its user
        return subprocess.Popen(["sh", "-c", SHEPHERD, "shepherd", str(rc), cgroup, *as_user_argv(job, argv)],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                cwd="/", env=env, start_new_session=True, close_fds=True)
    out_fd = _open_out(job.out or f"malleable-{job.id}.out", job.cwd)
    err_fd = _open_out(job.err, job.cwd) if job.err and job.err != job.out else None
    try:
        return subprocess.Popen(["sh", "-c", SHEPHERD, "shepherd", str(rc), cgroup, *argv], stdin=subprocess.DEVNULL,
                                stdout=out_fd, stderr=err_fd if err_fd is not None else subprocess.STDOUT,
                                cwd=job.cwd, env=env, start_new_session=True, close_fds=True)
    finally:
        os.close(out_fd)
        if err_fd is not None:
            os.close(err_fd)


def stop_job(pid: int, hard: bool = False) -> None:
    """Signal the job's process group (SIGTERM, or SIGKILL when ``hard``); a gone group is not an error."""
    if pid <= 0:
        return
    try:
        os.killpg(pid, signal.SIGKILL if hard else signal.SIGTERM)
    except OSError:
        pass
