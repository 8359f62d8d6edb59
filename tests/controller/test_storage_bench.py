"""The storage benchmark's smallest case on namespace hosts: one round of each section (one data server, a 2 MiB
file, an expand/shrink, four jobs under fcfs-bb) ends with its files back intact, every job ended, the expanded
server serving and then gone, and the JSON and PNG written."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from tests.controller._daemon_util import isolate

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "storage.py"
M = 1 << 20


def load_bench():
    spec = importlib.util.spec_from_file_location("storage_bench", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.netns
@pytest.mark.timeout(150)
def test_storage_benchmark_smallest_case(monkeypatch, tmp_path, netns_cluster):
    isolate(monkeypatch, tmp_path)
    bench = load_bench()
    monkeypatch.setattr(bench, "LAUNCHER", netns_cluster.launcher)
    monkeypatch.setenv("MALLEABLE_TOKEN", bench.TOKEN)              # run() sets both; restored after the test
    monkeypatch.setenv("MALLEABLE_LAUNCHER_EXEC", netns_cluster.launcher)
    hosts = netns_cluster.hosts[:4]
    if len(hosts) < 4:
        pytest.skip("needs 4 namespace hosts")
    out = tmp_path / "res" / "storage.json"
    res = bench.run(out, quick=True, hosts=hosts, rounds=1, servers=(1,), sizes=(2 * M,), policies=("fcfs-bb",),
                    jobs=bench.MIXED_QUICK)
    assert json.loads(out.read_text())["benchmark"] == "storage"
    assert out.with_suffix(".png").stat().st_size > 0
    (start,) = res["start"]
    row = start["rounds"]["controller"][0]
    assert start["meta"] == hosts[0] and len(start["data"]) == 1 and start["data"][0] in hosts[1:]
    assert row["server_start_s"] > 0 and row["submit_to_running_s"] >= row["server_start_s"]
    assert start["rounds"]["by_hand"][0]["fs_start_cli_s"] > 0
    (staging,) = res["staging"]
    assert staging["file_bytes"] == 2 * M and staging["stage_out_bytes_equal"] is True
    assert staging["stage_in_MBps"]["n"] == staging["local_copy_MBps"]["n"] == 1
    el = res["elastic"]
    assert el["new_server_served"] and el["server_gone_after_shrink"]
    assert el["job_fs"]["moved_MiB"]["median"] > 0 and el["hand_fs"]["moved_MiB"]["median"] > 0
    mixed = res["mixed"]["policies"]["fcfs-bb"]
    (live,) = mixed["rounds"]["live"]
    assert mixed["all_completed"] and live["states"] == ["COMPLETED"] * len(bench.MIXED_QUICK)
    assert mixed["sim_makespan_s"]["median"] > 0 and live["makespan_s"] > max(s for *_, s, _ in bench.MIXED_QUICK)
