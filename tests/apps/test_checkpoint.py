"""Jacobi checkpoints: a restart from the newest complete checkpoint (local directory or a real adhocfs, any
process count, after a kill) equals the uninterrupted run bit for bit; incomplete ones are ignored; bad options
are one-line errors; ``malleable demo --io`` grows and shrinks its file system and passes."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from malleable.apps import _checkpoint, _cli, jacobi
from malleable.errors import ConfigError
from tests.apps._helpers import MPI_ENV, app_cmd, load_stats, malleable_run

N = 37


def ckpts(path) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.name.startswith("jacobi-"))


def test_size_option_and_names():
    from malleable.apps._args import size_arg

    assert [size_arg(x) for x in ("0", "4096", "512K", "64M", "1G")] == [0, 4096, 1 << 19, 1 << 26, 1 << 30]
    assert _checkpoint.checkpoint_name(40) == "jacobi-00000040.h5"


def test_checkpoint_then_restart_equals_uninterrupted_run(mpi, tmp_path):
    d, full = tmp_path / "ck", tmp_path / "full.npy"
    cmd = app_cmd("jacobi", "--n", str(N), "--iters", "40", "--check-every", "7", "--checkpoint-every", "10",
                  "--checkpoint-dir", str(d), "--checkpoint-keep", "0", "--out", str(full), python=mpi.python)
    proc = mpi.run(2, *cmd, env=MPI_ENV, timeout=120)
    assert "checkpoints=4" in proc.stdout
    assert ckpts(d) == [f"jacobi-000000{k}.h5" for k in (10, 20, 30, 40)]
    assert np.array_equal(np.load(full), jacobi.reference(N, 40))
    for k in (30, 40):
        (d / f"jacobi-000000{k}.h5").unlink()
    # restart from iteration 20 on 3 processes, then grow to 4 and shrink to 1 while going on to 55
    out, stats = tmp_path / "u.npy", tmp_path / "s.json"
    plan = [{"at_probe": 6, "procs": 4}, {"at_probe": 20, "procs": 1}]
    run = malleable_run(3, app_cmd("jacobi", "--n", str(N), "--iters", "55", "--check-every", "7",
                                   "--checkpoint-every", "10", "--checkpoint-dir", str(d), "--restart",
                                   "--out", str(out), "--stats", str(stats), python=mpi.python), plan, mpi=mpi)
    assert "restarted_from=20" in run.stdout and "iterations=55" in run.stdout
    assert np.array_equal(np.load(out), jacobi.reference(N, 55))
    s = load_stats(stats)
    assert s["start"] == 20 and [c["iteration"] for c in s["checkpoints"]] == [30, 40, 50]
    assert ckpts(d) == ["jacobi-00000040.h5", "jacobi-00000050.h5"]  # --checkpoint-keep 2 (the default)
    ck = _checkpoint.latest(_checkpoint.LocalStore(str(d)), N)
    assert ck is not None and ck.iteration == 50 and np.array_equal(ck.grid, jacobi.reference(N, 50))


def test_tolerance_run_restarts_to_the_same_stop(mpi, tmp_path):
    d, out = tmp_path / "ck", tmp_path / "u.npy"
    common = ["--n", "20", "--iters", "5000", "--tol", "1e-3", "--check-every", "10", "--checkpoint-dir", str(d)]
    mpi.run(2, *app_cmd("jacobi", *common[:3], "100", *common[4:], "--checkpoint-every", "50", python=mpi.python),
            env=MPI_ENV, timeout=120)
    proc = mpi.run(2, *app_cmd("jacobi", *common, "--restart", "--out", str(out), python=mpi.python),
                   env=MPI_ENV, timeout=120)
    assert "restarted_from=100" in proc.stdout and "iterations=130" in proc.stdout
    assert np.array_equal(np.load(out), jacobi.reference(20, 5000, tol=1e-3, check_every=10))


def test_incomplete_or_damaged_checkpoints_are_ignored(mpi, tmp_path, caplog):
    d = tmp_path / "ck"
    mpi.run(1, *app_cmd("jacobi", "--n", str(N), "--iters", "30", "--checkpoint-every", "10",
                        "--checkpoint-dir", str(d), "--checkpoint-keep", "0", python=mpi.python),
            env=MPI_ENV, timeout=120)
    # a crash while writing iteration 30's: only a temporary half-file; and iteration 40's final file is damaged
    whole = (d / "jacobi-00000030.h5").read_bytes()
    (d / "jacobi-00000030.h5").unlink()
    (d / ".jacobi-00000030.h5.tmp").write_bytes(whole[: len(whole) // 2])
    (d / "jacobi-00000040.h5").write_bytes(whole[: len(whole) // 3])
    ck = _checkpoint.latest(_checkpoint.LocalStore(str(d)), N)
    assert ck is not None and ck.iteration == 20
    assert "jacobi-00000040.h5 is damaged" in caplog.text
    out = tmp_path / "u.npy"
    proc = mpi.run(2, *app_cmd("jacobi", "--n", str(N), "--iters", "45", "--checkpoint-dir", str(d), "--restart",
                               "--checkpoint-every", "10", "--out", str(out), python=mpi.python),
                   env=MPI_ENV, timeout=120)
    assert "restarted_from=20" in proc.stdout
    assert np.array_equal(np.load(out), jacobi.reference(N, 45))
    assert not (d / ".jacobi-00000030.h5.tmp").exists()  # stale temporaries go with the old checkpoints


def kill_ranks(marker: str) -> None:
    """Kill this test's ranks by pid (some launchers run them outside the launcher's process group)."""
    import psutil

    ranks = []
    for p in psutil.process_iter(["cmdline"]):
        if marker in " ".join(p.info["cmdline"] or []):
            ranks.append(p)
            p.kill()
    psutil.wait_procs(ranks, timeout=30)


def test_killed_job_restarts_from_its_last_checkpoint(mpi, tmp_path):
    d, out = tmp_path / "ck", tmp_path / "u.npy"
    n = 48
    argv = mpi.argv(2, *app_cmd("jacobi", "--n", str(n), "--iters", "10000000", "--checkpoint-every", "25",
                                "--checkpoint-dir", str(d), python=mpi.python), env=MPI_ENV)
    job = subprocess.Popen(argv, env=dict(os.environ, **MPI_ENV), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not (d.is_dir() and len(ckpts(d)) >= 2) and time.monotonic() < deadline:
            assert job.poll() is None, job.communicate()
            time.sleep(0.1)
        assert len(ckpts(d)) >= 2, "no checkpoint written in time"
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.communicate(timeout=60)
        kill_ranks(str(d))
    last = _checkpoint.latest(_checkpoint.LocalStore(str(d)), n)
    assert last is not None and last.iteration % 25 == 0
    end = last.iteration + 30
    proc = mpi.run(3, *app_cmd("jacobi", "--n", str(n), "--iters", str(end), "--checkpoint-dir", str(d),
                               "--restart", "--out", str(out), python=mpi.python), env=MPI_ENV, timeout=120)
    assert f"restarted_from={last.iteration}" in proc.stdout
    assert np.array_equal(np.load(out), jacobi.reference(n, end))


@pytest.fixture
def adhocfs(monkeypatch):
    """A local adhocfs with one data server; the app reaches it through MALLEABLE_FS, as a job does."""
    from malleable.adhocfs import start_fs

    monkeypatch.setenv("MALLEABLE_TOKEN", "jacobi-checkpoint-test")
    with start_fs("127.0.0.1", ["127.0.0.1"]) as dep:
        monkeypatch.setenv("MALLEABLE_FS", dep.address)
        yield dep


def test_checkpoints_on_adhocfs_restart_exactly(mpi, tmp_path, adhocfs):
    full, out = tmp_path / "full.npy", tmp_path / "u.npy"
    malleable_run(1, app_cmd("jacobi", "--n", str(N), "--iters", "40", "--checkpoint-every", "10",
                             "--checkpoint-dir", "/ck/jacobi", "--checkpoint-pad", "1M", "--out", str(full),
                             python=mpi.python), [{"at_probe": 15, "procs": 2}], mpi=mpi)
    assert np.array_equal(np.load(full), jacobi.reference(N, 40))
    store = _checkpoint.open_store("/ck/jacobi")
    try:
        assert [name for _, name in _checkpoint.list_checkpoints(store)] == ["jacobi-00000030.h5",
                                                                              "jacobi-00000040.h5"]
        assert store.size("jacobi-00000040.h5") > 1 << 20
        store.remove("jacobi-00000040.h5")
    finally:
        store.close()
    proc = mpi.run(3, *app_cmd("jacobi", "--n", str(N), "--iters", "50", "--checkpoint-dir", "/ck/jacobi",
                               "--restart", "--out", str(out), python=mpi.python), env=MPI_ENV, timeout=120)
    assert "restarted_from=30" in proc.stdout
    assert np.array_equal(np.load(out), jacobi.reference(N, 50))
    assert not os.path.exists("/ck")  # nothing went to the local disk


@pytest.mark.parametrize("argv, message", [
    (["--checkpoint-every", "10"], "--checkpoint-every needs --checkpoint-dir DIR"),
    (["--restart"], "--restart needs --checkpoint-dir DIR"),
    (["--checkpoint-dir", "x"], "--checkpoint-dir needs --checkpoint-every K or --restart"),
    (["--checkpoint-every", "0", "--checkpoint-dir", "x"], "argument --checkpoint-every: must be >= 1"),
    (["--checkpoint-dir", "x", "--restart", "--checkpoint-pad", "1M"], "--checkpoint-pad needs --checkpoint-every"),
    (["--checkpoint-every", "5", "--checkpoint-dir", "x", "--checkpoint-pad", "lots"], "not a size"),
])
def test_bad_checkpoint_options_are_one_line_errors(capsys, monkeypatch, argv, message):
    monkeypatch.delenv("MALLEABLE_FS", raising=False)
    with pytest.raises(SystemExit) as e:
        jacobi.parse_args(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and message in err[-1] and err[-1].startswith("python -m malleable.apps.jacobi: error")


def test_relative_dir_in_a_job_file_system_is_refused(capsys, monkeypatch):
    monkeypatch.setenv("MALLEABLE_FS", "tcp://127.0.0.1:1")
    with pytest.raises(SystemExit):
        jacobi.parse_args(["--restart", "--checkpoint-dir", "ck"])
    assert "must be absolute" in capsys.readouterr().err


def test_restart_past_the_last_iteration_is_an_error(mpi, tmp_path):
    d = tmp_path / "ck"
    mpi.run(1, *app_cmd("jacobi", "--n", "12", "--iters", "20", "--checkpoint-every", "20",
                        "--checkpoint-dir", str(d), python=mpi.python), env=MPI_ENV, timeout=120)
    for n, iters, message in [("12", "10", "is at iteration 20, past --iters 10"), ("13", "30", "not 13x13 (--n)")]:
        proc = mpi.run(2, *app_cmd("jacobi", "--n", n, "--iters", iters, "--checkpoint-dir", str(d), "--restart",
                                   python=mpi.python), env=MPI_ENV, timeout=120, check=False)
        assert proc.returncode != 0
        errors = [line for line in proc.stderr.splitlines() if line.startswith("jacobi: error:")]
        assert len(errors) == 1 and message in errors[0], proc.stderr


def demo_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="malleable")
    _cli.register(parser.add_subparsers())
    return parser.parse_args(["demo", *argv])


def test_demo_io_grows_and_shrinks_the_file_system_of_one_running_job(tmp_path):
    # through the command line: one job run, the watcher's rule takes the file system 1 -> 2 -> 1 data servers
    env = dict(os.environ, MALLEABLE_TOKEN="jacobi-demo-io-test")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "malleable", "demo", "--io", "--iters", "3000", "--keep",
                           str(tmp_path)], capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path)
    seconds = time.monotonic() - t0
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "PASS" in out and "FAIL" not in out
    report = json.loads((tmp_path / "io.json").read_text())
    assert report["pass"] and report["every"] == 601 and report["last_checkpoint"] == 2404
    # servers over time, from the watcher's every step: grown under the checkpoints, shrunk after them
    assert report["servers_over_time"] == [1, 2, 1]
    changes = [(d["action"], d["t"], d["servers"]) for d in report["decisions"] if d["action"] != "keep"]
    assert [(a, n) for a, _, n in changes] == [("expand", 1), ("shrink", 2)], changes
    assert changes[0][1] < report["compute"] <= changes[1][1]  # expand in the checkpoint phase, shrink after
    assert all(d["rio"] == 400 for d in report["decisions"] if d["t"] <= changes[0][1])
    assert [d for d in report["decisions"] if d["action"] == "shrink"][0]["rio"] == 1
    names = [(p["name"], p["servers"]) for p in report["phases"]]
    assert names[:3] == [("checkpoint", "1"), ("expand", "1->2"), ("checkpoint", "2")], names
    # the shrink comes after the last checkpoint: during the compute phase, or after the job when the watcher's
    # step falls behind the job's end on a loaded machine
    shrink_at = names.index(("shrink", "2->1"))
    assert all(n != "checkpoint" for n, _ in names[shrink_at:]), names
    assert names[-1] == ("shrink", "2->1") or (names[-1][1] == "1" and names[-1][0] in ("compute", "after job"))
    # one job: four padded checkpoints of it, all kept and read back after the shrink, the table printed
    job = json.loads((tmp_path / "job.json").read_text())
    assert job["start"] == 0 and [c["iteration"] for c in job["checkpoints"]] == [601, 1202, 1803, 2404]
    assert all(c["bytes"] > 16 << 20 for c in job["checkpoints"])
    assert report["checks"]["checkpoints_read"] and "all 4 read back whole" in out
    written = sum(p["written"] for p in report["phases"] if p["name"] != "shrink")
    assert written >= sum(c["bytes"] for c in job["checkpoints"])
    assert any(line.split()[:2] == ["shrink", "2->1"] for line in out.splitlines())
    # the exact grid, and a restart from the last checkpoint gives it bit for bit
    grid = np.load(tmp_path / "u.npy")
    assert np.array_equal(grid, jacobi.reference(512, 3000))
    assert json.loads((tmp_path / "restart.json").read_text())["start"] == 2404
    assert np.array_equal(np.load(tmp_path / "u-restart.npy"), grid)
    # no server process is left (none names the file system's state directory)
    assert report["checks"]["leftovers"] == []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        assert report["state"].encode() not in cmdline, cmdline
    assert seconds < 60


def test_demo_io_bad_options(capsys):
    with pytest.raises(ConfigError, match="--iters must be >= 50 with --io"):
        args = demo_args("--io", "--iters", "8")
        args.func(args)
    with pytest.raises(ConfigError, match="--hosts and --launcher-exec do not apply"):
        args = demo_args("--io", "--hosts", "a,b")
        args.func(args)
    with pytest.raises(ConfigError, match="--checkpoint-pad must be at least 1M"):
        args = demo_args("--io", "--checkpoint-pad", "1000")
        args.func(args)
    assert capsys.readouterr().out == ""  # refused before anything started
