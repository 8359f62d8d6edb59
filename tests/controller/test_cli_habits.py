"""The command line as Slurm and mpiexec users type it, against a real daemon on a --local pool: each habit with
its exact output (sbatch's -n/--ntasks-per-node/--wrap/#SBATCH-style directives, squeue's host lists, scontrol's
job record, sinfo's columns, the --json documents)."""

from __future__ import annotations

import json
import os
import re
import sys

import pytest

from malleable.controller.daemon import _protocol as P
from malleable.controller.daemon._hostpool import HostPool
from tests.controller._cli_util import cli_env
from tests.controller._daemon_util import cli, daemon_thread, states, wait_final, wait_for

pytestmark = pytest.mark.timeout(120)
env = pytest.fixture(cli_env, name="env")

SIZE_PROG = "from mpi4py import MPI; c = MPI.COMM_WORLD\nif c.rank == 0: print('size', c.size, flush=True)"



def _hist(state: str) -> dict[int, dict]:
    code, out, err = cli("history", "--state", state, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["schema"] == 1
    return {j["id"]: j for j in doc["jobs"]}


def test_ntasks_as_sbatch_counts_them(env):
    """-n and --ntasks-per-node are counted in the controller's slots per host; tasks must fill whole hosts."""
    state = str(env / "ctl.sqlite")
    with daemon_thread(env / "ctl.sqlite", HostPool.local(2), slots=2) as (d, c):
        code, out, err = cli("submit", "--state", state, "-n", "4", "-o", "n4.out", "--", sys.executable, "-c",
                             SIZE_PROG)
        assert (code, out, err) == (0, "Submitted batch job 1\n", "")
        code, out, err = cli("submit", "--state", state, "-N", "1", "--ntasks-per-node", "2", "--parsable",
                             "-o", "n2.out", "--", sys.executable, "-c", SIZE_PROG)
        assert (code, out, err) == (0, "2\n", "")
        bad = {
            ("-n", "3"): "-n 3 does not fill whole hosts: this controller runs 2 processes per host; use -n 2 or -n 4",
            ("-n", "1"): "-n 1 does not fill whole hosts: this controller runs 2 processes per host; use -n 2",
            ("--ntasks-per-node", "1"): "--ntasks-per-node 1: this controller runs 2 process(es) on every host "
                                        "(its --slots)",
            ("-N", "2", "-n", "2"): "-N 2 and -n 2 disagree: 2 host(s) run 4 processes (2 per host)",
            ("-n", "0"): "-n must be >= 1, got 0",
            ("-n", "2", "--min", "1", "--max", "2"): "give either -N/-n (rigid) or --min/--max (malleable), not both",
        }
        for opts, msg in bad.items():
            assert cli("submit", "--state", state, *opts, "--", "true") == (1, "", f"malleable submit: error: {msg}\n")
        wait_final(c, [1, 2], 60)
        h = _hist(state)
        assert (h[1]["nodes"], h[1]["state"], h[2]["nodes"]) == (2, "COMPLETED", 1)
        assert (env / "n4.out").read_text() == "size 4\n"      # -n 4 = 4 processes on 2 hosts
        assert (env / "n2.out").read_text() == "size 2\n"
        assert sorted(states(c)) == [1, 2]                       # the refused ones queued nothing


def test_script_directives_and_wrap(env):
    state = str(env / "ctl.sqlite")
    script = env / "job.sh"
    script.write_text("#!/bin/sh\n"
                      "# a comment, then directives as sbatch reads #SBATCH\n"
                      "\n"
                      "#MALLEABLE -J scripted -t 5\n"
                      "#MALLEABLE   -o 'out %j.txt'\n"
                      "echo \"job $MALLEABLE_JOB args $*\"\n"
                      "#MALLEABLE -N 2\n")        # after the first command: not a directive
    script.chmod(0o755)
    with daemon_thread(env / "ctl.sqlite", HostPool.local(2)) as (d, c):
        assert cli("submit", "--state", state, "job.sh", "a", "b") == (0, "Submitted batch job 1\n", "")
        assert cli("submit", "--state", state, "-J", "mine", "-o", "o2.txt", "./job.sh") == (0, "Submitted batch job 2\n", "")
        assert cli("submit", "--state", state, "--wrap", "echo $((6 * 7))") == (0, "Submitted batch job 3\n", "")
        wait_final(c, [1, 2, 3], 60)
        h = _hist(state)
        assert [(h[i]["name"], h[i]["nodes"], h[i]["time_limit"]) for i in (1, 2, 3)] == [
            ("scripted", 1, 300.0), ("mine", 1, 300.0), ("wrap", 1, 3600.0)]
        assert h[1]["cmd"] == [str(script), "a", "b"]
        assert (env / "out 1.txt").read_text() == "job 1 args a b\n"
        assert (env / "o2.txt").read_text() == "job 2 args \n"           # the command line's -o won
        assert (env / "malleable-3.out").read_text() == "42\n"
        assert h[3]["cmd"] == ["sh", "-c", "echo $((6 * 7))"] and h[3]["out"] == str(env / "malleable-3.out")

        (env / "bad.sh").write_text("#!/bin/sh\n#MALLEABLE -N 1\n#MALLEABLE --nodes two\ntrue\n")
        (env / "bad.sh").chmod(0o755)
        (env / "noexec.sh").write_text("#!/bin/sh\ntrue\n")
        (env / "py.py").write_text("#MALLEABLE --bogus\nprint(1)\n")
        assert cli("submit", "--state", state, "bad.sh") == (
            1, "", "malleable submit: error: bad.sh:3: #MALLEABLE --nodes two: argument -N/--nodes: invalid int "
                   "value: 'two'\n")
        assert cli("submit", "--state", state, "noexec.sh") == (
            1, "", "malleable submit: error: noexec.sh is not executable: chmod +x noexec.sh, or name its "
                   "interpreter (malleable submit sh noexec.sh)\n")
        assert cli("submit", "--state", state, "--", sys.executable, "py.py") == (     # the second word is read too
            1, "", "malleable submit: error: py.py:1: #MALLEABLE --bogus: unrecognized arguments: --bogus\n")
        assert cli("submit", "--state", state, "--wrap", "true", "--", "true") == (
            1, "", "malleable submit: error: give either --wrap CMD or a command, not both\n")
        # a script that is not there is refused at once, as sbatch refuses it, not queued to fail later
        for cmd, msg in ((["missing.sh"], "missing.sh: no such file, and no such command on PATH"),
                         (["./missing.sh", "a"], "cannot open the script ./missing.sh: No such file or directory"),
                         (["sh", "-e", "missing.sh"], "cannot open the script missing.sh: No such file or directory"),
                         ([sys.executable, "missing.py"], "cannot open the script missing.py: No such file or "
                                                          "directory"),
                         ([str(env)], f"{env} is a directory, not a script")):
            assert cli("submit", "--state", state, "--", *cmd) == (1, "", f"malleable submit: error: {msg}\n")
        assert sorted(states(c)) == [1, 2, 3]


def test_speedup_and_constraint_reach_the_job_record(env):
    state = str(env / "ctl.sqlite")
    with daemon_thread(env / "ctl.sqlite", HostPool.local(4)) as (d, c):
        assert cli("submit", "--state", state, "--min", "1", "--max", "4", "--constraint", "pof2", "--speedup",
                   "amdahl:0.05", "--", "sleep", "0.2") == (0, "Submitted batch job 1\n", "")
        assert cli("submit", "--state", state, "--min", "1", "--max", "6", "--constraint", "even", "--speedup",
                   "rho:.25", "--", "true") == (0, "Submitted batch job 2\n", "")
        assert cli("submit", "--state", state, "-N", "1", "--speedup", "linear", "--", "true") == (
            0, "Submitted batch job 3\n", "")
        bad = {
            ("--speedup", "amdahl:2"): "bad speedup 'amdahl:2': amdahl takes a value between 0 and 1",
            ("--speedup", "cubic"): "bad speedup 'cubic': use linear, amdahl:F or rho:R (F and R between 0 and 1)",
            ("--min", "3", "--max", "3", "--constraint", "even"): "--constraint even: no node count between --min 3 "
                                                                  "and --max 3 is even",
            ("--min", "1", "--max", "4", "--pref", "3", "--constraint", "pof2"): "--pref 3 is not pof2 "
                                                                                 "(--constraint pof2)",
            ("-N", "2", "--constraint", "odd"): "--constraint is for malleable jobs (with --min/--max)",
        }
        for opts, msg in bad.items():
            assert cli("submit", "--state", state, *opts, "--", "true") == (1, "", f"malleable submit: error: {msg}\n")
        code, _, err = cli("submit", "--state", state, "--min", "1", "--max", "2", "--constraint", "prime", "--",
                           "true")
        assert code == 2 and "invalid choice: 'prime'" in err and "Traceback" not in err
        wait_final(c, [1, 2, 3], 60)
        h = _hist(state)
        assert [(h[i]["speedup"], h[i]["constraint"], h[i]["nodes"], h[i]["user"]) for i in (1, 2, 3)] == [
            ("amdahl:0.05", "pof2", 1, "ann"), ("rho:0.25", "even", 2, "ann"), ("linear", "", 1, "ann")]
        code, out, _ = cli("info", "--state", state, "1")
        assert "\n  Speedup=amdahl:0.05 Constraint=pof2\n" in out


def test_info_queue_nodes_as_slurm_prints_them(env):
    state = str(env / "ctl.sqlite")
    with daemon_thread(env / "ctl.sqlite", HostPool.local(3)) as (d, c):
        jid = c.submit(["sh", "-c", "sleep 30"], nodes=2, min_nodes=2, max_nodes=2, malleable=True, name="sleepy",
                       cwd=str(env))
        wait_for(lambda: states(c).get(jid) == "RUNNING", 20, "the job to run")
        code, out, _ = cli("queue", "--state", state)
        assert re.fullmatch(r" JOBID NAME           USER     KIND      ST       TIME     NODES  NODELIST\(REASON\)\n"
                            r"     1 sleepy         ann      malleable R     +0:0\d    2\[2-2\]  local\[1-2\]\n",
                            out), out
        nodes = "NODE   STATE       JOB\nlocal1 alloc       1\nlocal2 alloc       1\nlocal3 idle\n"
        assert cli("nodes", "--state", state) == (0, nodes, "")
        # the runtime link's progress reports (the protocol the runtime speaks), shown as a table
        c.call(P.Register(jid, os.getpid(), "local1", 2, ["local1", "local2"]))
        c.call(P.Progress(jid, "init", {"kind": "rigid", "procs": 2, "iterations": 1, "seconds": 0.5}))
        c.call(P.Progress(jid, "elastic", {"kind": "elastic", "procs": 2, "iterations": 100, "seconds": 5.2,
                                           "iter_seconds": 0.052, "mtct": 0.1234567}))
        code, out, _ = cli("info", "--state", state, str(jid), "--events", "2")
        lines = out.splitlines()
        head = "JobId=1 Name=sleepy User=ann State=RUNNING Kind=malleable 2..2 (pref 2)"
        assert lines[0] == head                                                  # no exit code while it runs
        assert re.fullmatch(r"  Submit=\S+ Start=\S+ End=- Elapsed=00:00:\d\d TimeLimit=1:00:00 Reason=-", lines[1])
        assert lines[2:13] == [
            "  Command=sh -c sleep 30",
            f"  WorkDir={env} StdOut={env}/malleable-1.out",
            "  progress (last report per phase):",
            "    PHASE    KIND     PROCS  ITERATIONS  ITER_SECONDS    MTCT  SECONDS",
            "    init     rigid        2           1             -       -      0.5",
            "    elastic  elastic      2         100         0.052  0.1235      5.2",
            "  size history:",
            lines[9], "  events (last 2 of 3):", lines[11], lines[12]]
        assert lines[9] == "    +    0.00 s  start     2 nodes  local[1-2]"            # compressed, as squeue's
        assert re.fullmatch(r"    \d\d:\d\d:\d\d  start    on local1,local2", lines[11])
        assert re.fullmatch(r"    \d\d:\d\d:\d\d  register \S.*", lines[12]), lines   # the wording is the core's
        assert len(lines) == 13
        assert cli("cancel", "--state", state, str(jid))[0] == 0
        wait_final(c, [jid], 30)
        code, out, _ = cli("info", "--state", state, str(jid), "--events", "0")
        assert out.splitlines()[0] == head.replace("RUNNING", "CANCELLED") + " ExitCode=0:15"
        assert "events" not in out
        assert cli("info", "--state", state, "1", "--events", "-1") == (
            1, "", "malleable info: error: --events must be >= 0, got -1\n")


def test_nodes_columns_hold_long_host_names(env):
    names = ("compute-node-0001.cluster.example.org", "cn2")
    pool = HostPool("local", names, None, "127.0.0.1")
    with daemon_thread(env / "ctl.sqlite", pool):
        code, out, _ = cli("nodes", "--state", str(env / "ctl.sqlite"))
        assert out == ("NODE                                  STATE       JOB\n"
                       "compute-node-0001.cluster.example.org idle\n"
                       "cn2                                   idle\n")


def test_json_documents_carry_a_schema(env):
    state = str(env / "ctl.sqlite")
    job_keys = {"id", "name", "user", "state", "malleable", "nodes", "min_nodes", "max_nodes", "size", "hosts",
                "submit", "start", "end", "elapsed", "time_limit", "exit_code", "exit", "reason", "cmd", "cwd", "out",
                "err", "speedup", "constraint", "progress", "resizing", "unresponsive", "expected_start", "bb",
                "fs_servers", "stage_in", "stage_out", "fs", "fs_min", "fs_max", "io_rate", "fs_replicas"}
    job_keys |= {"io_intensity", "io_measured"}
    with daemon_thread(env / "ctl.sqlite", HostPool.local(1)) as (d, c):
        a = c.submit(["sh", "-c", "exit 3"], nodes=1, cwd=str(env))
        b = c.submit(["sleep", "30"], nodes=1, cwd=str(env))
        wait_for(lambda: states(c).get(b) == "RUNNING", 30, "b to run")
        docs = {cmd: json.loads(cli(*cmd.split(), "--state", state, "--json")[1])
                for cmd in ("queue", "nodes", f"info {a}", "history", "controller status")}
        assert {k: v["schema"] for k, v in docs.items()} == dict.fromkeys(docs, 1)
        assert set(docs["queue"]) == {"schema", "jobs"} and [j["id"] for j in docs["queue"]["jobs"]] == [b]
        assert set(docs["queue"]["jobs"][0]) == job_keys
        assert docs["nodes"] == {"schema": 1, "nodes": [{"name": "local1", "state": "alloc", "job": b, "drain": None}]}
        info = docs[f"info {a}"]
        assert set(info) == {"schema", "job", "steps", "events"} and set(info["job"]) == job_keys
        assert (info["job"]["exit"], info["job"]["exit_code"]) == ("3:0", 3)
        assert info["job"]["out"] == info["job"]["err"] == f"{env}/malleable-1.out"
        assert [e["kind"] for e in info["events"]][:2] == ["submit", "start"]
        assert [(j["id"], j["exit"]) for j in docs["history"]["jobs"]] == [(b, None), (a, "3:0")]
        assert docs["controller status"]["pool"] == "local" and docs["controller status"]["slots"] == 1


def test_controller_start_state_paths(env):
    (env / "afile").write_text("x")
    (env / "notdb").write_text("not a database, but long enough to be read as one\n" * 3)
    for state, msg in (
        (str(env), f"--state {env} is a directory: give a file in it, e.g. {env}/controller.sqlite"),
        (str(env / "afile" / "ctl.sqlite"), f"--state {env}/afile/ctl.sqlite: {env}/afile is a file, not a folder"),
        (str(env / "notdb"), f"{env}/notdb is not a controller state file (file is not a database)"),
    ):
        assert cli("controller", "start", "--local", "1", "--state", state) == (
            1, "", f"malleable controller: error: {msg}\n")
    assert not (env / "notdb.log").exists()            # nothing was started
    nested = env / "new" / "deeper" / "ctl.sqlite"
    code, out, err = cli("controller", "start", "--local", "1", "--state", str(nested))
    try:
        assert code == 0 and out.startswith("controller started: tcp://"), err
        assert nested.exists()
    finally:
        assert cli("controller", "stop", "--state", str(nested))[0] == 0


def test_completion_script_completes_in_bash(env):
    import subprocess

    code, script, _ = cli("completion", "bash")
    assert code == 0
    (env / "c.bash").write_text(script)

    def complete(*words: str) -> list[str]:
        line = " ".join(words)
        sh = (f"source c.bash; COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; COMP_LINE='{line}'; "
              f"COMP_POINT={len(line)}; _shtab_malleable; printf '%s\\n' \"${{COMPREPLY[@]}}\"")
        return subprocess.run(["bash", "-c", sh], capture_output=True, text=True, timeout=20,
                              check=True).stdout.split()

    assert complete("malleable", "sub") == ["submit"]
    assert complete("malleable", "history", "--st") == ["--state", "--states", "--starttime"]
    assert sorted(complete("malleable", "controller", "st")) == ["start", "status", "stop"]
    assert "#compdef malleable" in cli("completion", "zsh")[1]
