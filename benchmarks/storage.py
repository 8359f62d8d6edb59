"""Job file systems of the controller on namespace hosts, each against a baseline measured in the same run.

1. **Submit to running**: a job submitted with ``--bb`` until it runs with a ready file system, split into its
   parts (queue to ``fs-start``, server start, stage-in, ``fs-ready`` to launch) for 1 and 3 data servers;
   baseline: the same servers started by hand with ``malleable fs start`` (same hosts) and the same file put
   with ``malleable fs put``, then ``malleable fs stop``.
2. **Stage-in / stage-out throughput** of one file (64 and 256 MiB) into a job's file system and back (the
   bytes are compared); baseline: ``shutil.copyfile`` of the same file on the local disk.
3. **Growth and shrink** of a running job's file system with adhocfs's ``expand_fs``/``shrink_fs`` (what
   ``malleable fs expand/shrink --job`` call): time from the request to the new data server serving (registered,
   commissioned, and holding blocks of a file written after), and from the shrink request to the server's process
   gone; baselines: one expand/shrink of a hand-started file system on the same hosts in the same run, and the
   earlier numbers in ``results/adhocfs_elastic.json`` (loopback, no launcher).
4. **Live mixed workload**: short sleep jobs (half with burst buffers that do not all fit at once) under
   ``fcfs-easy``, ``fcfs-bb`` and ``plan-2``; mean wait and makespan live next to the simulator's prediction for
   the same jobs (``malleable simulate --workload``), whose buffered jobs run longer by the file-system start and
   stop cost measured in section 1.

A job's part times come from its events (``fs-start``, ``stage-in``, ``fs-ready``, ``start``, ``fs-stop``,
``stage-out``, ``fs-stopped``): a 1-byte marker file is staged in first, so its ``stage-in`` event closes the
server start and the next one the copy of the real file. Rounds alternate with their baselines; tables give
min / median / max over the rounds.

Run: ``.venv/bin/python benchmarks/storage.py [--quick]`` (needs root and the namespace hosts node1..node4:
``malleable testbed up 4``). Writes ``benchmarks/results/storage.json`` and ``storage.png``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from malleable.launch._testbed import launcher as testbed_launcher  # the test cluster's ssh stand-in

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
TOKEN = "bench-storage-token"  # noqa: S105 - a benchmark secret
LAUNCHER = str(testbed_launcher())
M = 1 << 20
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")
PY = sys.executable


def stats(xs: list[float]) -> dict[str, float]:
    xs = [x for x in xs if x is not None]
    if not xs:
        return {"n": 0}
    return {"n": len(xs), "min": round(min(xs), 4), "median": round(statistics.median(xs), 4),
            "max": round(max(xs), 4)}


def fmt(s: dict[str, float], unit: str = "s", digits: int = 2) -> str:
    if not s.get("n"):
        return "-"
    return f"{s['median']:.{digits}f} ({s['min']:.{digits}f}-{s['max']:.{digits}f}){unit}"


def _wait(pred, timeout: float, what: str, every: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)


def _env(**extra: str) -> dict[str, str]:
    return dict(os.environ, MALLEABLE_TOKEN=TOKEN, MALLEABLE_LAUNCHER_EXEC=LAUNCHER, **extra)


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    out = subprocess.run([PY, "-m", "malleable", *args], env=_env(), capture_output=True, text=True,
                         timeout=timeout, check=False)
    if out.returncode:
        raise RuntimeError(f"malleable {' '.join(args)}: {out.stderr.strip()[-800:]}")
    return out


# ------------------------------------------------------------------------------------------------ the controller
@contextlib.contextmanager
def controller(tmp: str, hosts: list[str], storage: list[str], cap: str, policy: str = "fcfs-bb"):
    """A controller daemon (``malleable controller start``) and a client; stopped (jobs cancelled) on exit."""
    from malleable.controller.daemon._client import Client

    state = os.path.join(tmp, f"ctl-{policy}-{time.monotonic_ns()}.sqlite")
    _cli("controller", "start", "--hosts", ",".join(hosts), "--launcher-exec", LAUNCHER, "--policy", policy,
         "--bb-capacity", cap, "--storage-hosts", ",".join(storage), "--state", state, "--tick", "0.2", timeout=60)
    c = Client(state=state, token=TOKEN.encode(), timeout=30)
    try:
        yield c
    finally:
        c.close()
        subprocess.run([PY, "-m", "malleable", "controller", "stop", "--cancel-jobs", "--state", state],
                       env=_env(), capture_output=True, timeout=90, check=False)


def job_done(c, jid: int, timeout: float) -> Any:
    """The job's info once it ended and (for a buffered job) its file system is stopped or failed."""
    def done():
        info = c.info(jid)
        if info.job["state"] not in FINAL:
            return None
        fs = info.job.get("fs") or {}
        if info.job.get("bb") and fs.get("phase") not in ("stopped", "failed"):
            return None
        return info
    return _wait(done, timeout, f"job {jid} and its file system to end")


def ev(info: Any, kind: str) -> list[float]:
    return [e["t"] for e in info.events if e["kind"] == kind]


def parts(info: Any, t_submit: float) -> dict[str, float]:
    """A buffered job's part times from its events (the first stage-in is the 1-byte marker)."""
    fs_start, ins, ready = ev(info, "fs-start")[0], ev(info, "stage-in"), ev(info, "fs-ready")[0]
    start = ev(info, "start")[0]
    out = {"queue_s": fs_start - t_submit, "server_start_s": ins[0] - fs_start,
           "stage_in_s": (ins[-1] - ins[0]) if len(ins) > 1 else 0.0, "ready_to_launch_s": start - ready,
           "submit_to_running_s": start - t_submit, "fs_start_to_running_s": start - fs_start}
    stop, outs, stopped = ev(info, "fs-stop"), ev(info, "stage-out"), ev(info, "fs-stopped")
    if stop and stopped:
        out["stage_out_s"] = (outs[-1] - stop[0]) if outs else 0.0
        out["stop_s"] = stopped[0] - (outs[-1] if outs else stop[0])
        out["end_to_stopped_s"] = stopped[0] - stop[0]
    return out


def files(tmp: str, size: int) -> tuple[str, str]:
    marker = os.path.join(tmp, "marker.bin")
    Path(marker).write_bytes(b"m")
    path = os.path.join(tmp, f"data-{size}.bin")
    if not os.path.exists(path) or os.path.getsize(path) != size:
        with open(path, "wb") as f:
            left = size
            while left:
                n = min(left, 8 * M)
                f.write(os.urandom(n))
                left -= n
    return marker, path


# ------------------------------------------------------------------------------------------------ 1. submit
def bench_start(c, tmp: str, servers: int, rounds: int, size: int) -> dict:
    """Submit -> running with a ready file system, against ``fs start`` + ``fs put`` + ``fs stop`` by hand."""
    from malleable.adhocfs._deploy import start_fs

    marker, data = files(tmp, size)
    ctl, hand = [], []
    for _ in range(rounds):
        t0 = time.time()
        jid = c.submit(["true"], 1, out=os.devnull, time_limit=120, bb=64 * M, fs_servers=servers,
                       stage_in=[f"{marker}:/m", f"{data}:/data.bin"])
        info = job_done(c, jid, 120)
        assert info.job["state"] == "COMPLETED", info.job
        fs = info.job["fs"]
        row = parts(info, t0)
        row.update(meta=fs["meta"], data=fs["data"])
        ctl.append(row)
        # the same servers by hand: fs start (returns once every server answers), fs put, fs stop
        t = time.monotonic()
        out = _cli("fs", "start", "--meta", fs["meta"], "--data", ",".join(fs["data"]), "--capacity",
                   str(64 * M // servers))
        t_start = time.monotonic() - t
        addr = out.stdout.strip().splitlines()[-1]
        t = time.monotonic()
        _cli("fs", "put", data, "/data.bin", "--meta", addr)
        t_put = time.monotonic() - t
        t = time.monotonic()
        _cli("fs", "stop", "--meta", addr)
        t_stop = time.monotonic() - t
        t = time.monotonic()                   # the library call alone (no command's Python start-up)
        dep = start_fs(fs["meta"], fs["data"], launcher=LAUNCHER, token=TOKEN.encode(), capacity=64 * M // servers)
        t_lib = time.monotonic() - t
        dep.stop()
        hand.append({"fs_start_cli_s": t_start, "fs_put_cli_s": t_put, "fs_stop_cli_s": t_stop,
                     "total_s": t_start + t_put, "start_fs_call_s": t_lib})
    keys = ("queue_s", "server_start_s", "stage_in_s", "ready_to_launch_s", "submit_to_running_s", "end_to_stopped_s")
    return {"servers": servers, "file_bytes": size, "meta": ctl[0]["meta"], "data": ctl[0]["data"],
            "controller": {k: stats([r.get(k) for r in ctl]) for k in keys},
            "by_hand": {k: stats([r[k] for r in hand]) for k in hand[0]},
            "rounds": {"controller": ctl, "by_hand": hand}}


# ------------------------------------------------------------------------------------------------ 2. staging
def bench_staging(c, tmp: str, size: int, rounds: int) -> dict:
    """Stage-in and stage-out MB/s of one file, against shutil.copyfile of the same file."""
    marker, data = files(tmp, size)
    digest = _sha(data)
    fs_in, fs_out, local, same = [], [], [], []
    for r in range(rounds):
        back = os.path.join(tmp, f"back-{size}-{r}.bin")
        jid = c.submit(["true"], 1, out=os.devnull, time_limit=300, bb=2 * size + 16 * M, fs_servers=1,
                       stage_in=[f"{marker}:/m", f"{data}:/data.bin"], stage_out=[f"/data.bin:{back}"])
        info = job_done(c, jid, 300)
        p = parts(info, info.job["submit"])
        fs_in.append(size / p["stage_in_s"] / 1e6)
        fs_out.append(size / p["stage_out_s"] / 1e6)
        got = info.job["fs"]["stage_out"]
        same.append(os.path.getsize(back) == size and got[0][2] == size and _sha(back) == digest)
        os.unlink(back)
        dst = os.path.join(tmp, f"copy-{size}.bin")
        t = time.perf_counter()
        shutil.copyfile(data, dst)
        local.append(size / (time.perf_counter() - t) / 1e6)
        os.unlink(dst)
    return {"file_bytes": size, "stage_in_MBps": stats(fs_in), "stage_out_MBps": stats(fs_out),
            "local_copy_MBps": stats(local), "stage_out_bytes_equal": all(same),
            "rounds": {"stage_in_MBps": fs_in, "stage_out_MBps": fs_out, "local_copy_MBps": local}}


def _sha(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(8 * M):
            h.update(chunk)
    return h.hexdigest()


# ------------------------------------------------------------------------------------------------ 3. elastic
def _elastic_once(addr: str, secret: bytes, new_host: str, fill: int) -> dict:
    """Expand ``addr`` by one data server on ``new_host``, write, shrink it away; the times of each step."""
    from malleable.adhocfs import connect
    from malleable.adhocfs._admin import expand_fs, shrink_fs
    from malleable.adhocfs._deploy import MetaClient

    chunk = os.urandom(M)
    with connect(addr, token=secret) as fs, fs.open("/before.bin", "wb") as f:
        for _ in range(fill // M):
            f.write(chunk)
    old = os.environ.get("MALLEABLE_TOKEN")
    os.environ["MALLEABLE_TOKEN"] = secret.decode()       # the new server reads the file system's secret here
    try:
        t = time.monotonic()
        servers, procs, _ = expand_fs(addr, [new_host], launcher=LAUNCHER, token=secret, capacity=fill * 4)
        t_expand = time.monotonic() - t
    finally:
        if old is None:
            os.environ.pop("MALLEABLE_TOKEN", None)
        else:
            os.environ["MALLEABLE_TOKEN"] = old
    sid = next(iter(servers))
    with connect(addr, token=secret) as fs, fs.open("/after.bin", "wb") as f:   # new blocks go to the new server
        for _ in range(fill // M):
            f.write(chunk)
    t_serving = time.monotonic() - t
    with MetaClient(addr, secret) as mc:
        row = next(s for s in mc.status().servers if s["sid"] == sid)
    holds = row.get("blocks", 0)
    seen = bool(_server_pids(addr, sid))        # the process the shrink must end is found before it
    t = time.monotonic()
    info = shrink_fs(addr, [sid], "partial", token=secret, timeout=120)
    t_shrink = time.monotonic() - t
    _wait(lambda: not _server_pids(addr, sid), 30, f"data server {sid} to exit", every=0.01)
    t_gone = time.monotonic() - t
    for p in procs.values():
        p.wait(30)
    with MetaClient(addr, secret) as mc:
        state = next((s["state"] for s in mc.status().servers if s["sid"] == sid), "gone")   # gone: not listed
    return {"expand_s": t_expand, "expand_write_s": t_serving, "new_server_blocks": holds,
            "shrink_s": t_shrink, "shrink_to_gone_s": t_gone, "moved_MiB": round(info.get("bytes_moved", 0) / M, 2),
            "moved_blocks": info.get("moved", 0), "state_after": state,
            "process_seen_before": seen}


def _server_pids(addr: str, sid: int) -> list[int]:
    """Processes of data server ``sid`` of ``addr`` on any host (the namespaces share /proc)."""
    want = ["malleable.adhocfs._data", "--meta", addr, "--sid", str(sid)]
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                args = Path(f"/proc/{d}/cmdline").read_bytes().decode(errors="replace").split("\0")
            except OSError:
                continue
            if all(w in args for w in want):
                out.append(int(d))
    return out


def bench_elastic(c, tmp: str, rounds: int, fill: int) -> dict:
    from malleable.adhocfs._deploy import start_fs
    from malleable.controller.daemon._fsshell import fs_secret

    cid = c.status()["controller_id"]
    job_rows, hand_rows, where = [], [], {}
    for _ in range(rounds):
        jid = c.submit(["sleep", "300"], 1, out=os.devnull, time_limit=600, bb=64 * M, fs_servers=1)
        info = _wait(lambda jid=jid: (i := c.info(jid)) and (i.job.get("fs") or {}).get("phase") == "ready"
                     and i.job["state"] == "RUNNING" and i, 60, "the job's file system to be ready")
        fs = info.job["fs"]
        new_host = next(h for h in ("node4", "node3", "node2") if h not in fs["data"])
        where = {"meta": fs["meta"], "data": fs["data"], "new": new_host}
        try:
            job_rows.append(_elastic_once(fs["address"], fs_secret(TOKEN.encode(), cid, jid).encode(), new_host,
                                          fill))
        finally:
            from malleable.controller.daemon import _protocol as P
            c.call(P.Cancel(jid))
            job_done(c, jid, 60)
        with start_fs(fs["meta"], fs["data"], launcher=LAUNCHER, token=TOKEN.encode(), capacity=64 * M) as dep:
            hand_rows.append(_elastic_once(dep.address, TOKEN.encode(), new_host, fill))
    keys = ("expand_s", "expand_write_s", "shrink_s", "shrink_to_gone_s", "moved_MiB")
    earlier = {}
    with contextlib.suppress(OSError, ValueError, KeyError):
        old = json.loads((HERE / "results" / "adhocfs_elastic.json").read_text())
        earlier = {"when": old.get("when"),
                   "shrink_4_to_3_partial_s": old["redistribution"]["shrink_4_to_3_partial"]["seconds"],
                   "shrink_4_to_3_partial_moved_MiB": old["redistribution"]["shrink_4_to_3_partial"]["moved_MiB"],
                   "shrink_4_to_3_total_s": old["redistribution"]["shrink_4_to_3_total"]["seconds"],
                   "shrink_stall_shrink_s": old["shrink_stall"]["shrink_seconds"],
                   "shrink_stall_moved_MiB": old["shrink_stall"]["moved_MiB"]}
    return {"fill_bytes": fill, "hosts": where,
            "job_fs": {k: stats([r[k] for r in job_rows]) for k in keys},
            "hand_fs": {k: stats([r[k] for r in hand_rows]) for k in keys},
            "new_server_served": all(r["new_server_blocks"] > 0 for r in job_rows + hand_rows),
            "server_gone_after_shrink": all(r["state_after"] == "gone" and r["process_seen_before"]
                                            for r in job_rows + hand_rows),
            "earlier_adhocfs_elastic": earlier, "rounds": {"job_fs": job_rows, "hand_fs": hand_rows}}


# ------------------------------------------------------------------------------------------------ 4. mixed
# (submit offset s, nodes, sleep seconds, burst buffer MiB or 0)
MIXED = [(0.0, 2, 5.0, 40), (0.3, 1, 3.0, 0), (0.6, 2, 4.0, 48), (0.9, 1, 6.0, 0),
         (1.2, 1, 3.0, 32), (1.5, 3, 3.0, 0), (1.8, 1, 4.0, 24), (2.1, 2, 2.0, 0)]
MIXED_QUICK = [(0.0, 2, 3.0, 40), (0.3, 1, 2.0, 0), (0.6, 1, 3.0, 48), (0.9, 2, 2.0, 0)]
MIXED_CAP = 32          # MiB per storage host, on 2 storage hosts: 64 MiB, so the buffered jobs do not all fit
LIMIT = 60.0            # every job's time limit (the policies' estimate, live and simulated)


def run_mixed_live(tmp: str, policy: str, jobs: list, hosts: list[str]) -> dict:
    with controller(tmp, hosts, hosts[-2:], f"{MIXED_CAP}M", policy) as c:
        ids, t0 = [], time.time()
        for off, n, secs, bb in jobs:
            time.sleep(max(0.0, t0 + off - time.time()))
            kw = {"bb": bb * M, "fs_servers": 1} if bb else {}
            ids.append(c.submit(["sleep", str(secs)], n, out=os.devnull, time_limit=LIMIT, **kw))
        infos = [job_done(c, i, 180) for i in ids]
    recs = [i.job for i in infos]
    sub0 = min(r["submit"] for r in recs)
    starts = [(ev(i, "fs-start") or ev(i, "start"))[0] for i in infos]      # when the policy started the job
    released = [(ev(i, "fs-stopped") or [i.job["end"]])[0] for i in infos]  # when its last resource came free
    return {"policy": policy, "states": [r["state"] for r in recs],
            "submit": [r["submit"] - sub0 for r in recs],
            "wait": [s - r["submit"] for s, r in zip(starts, recs, strict=True)],
            "mean_wait_s": statistics.mean(s - r["submit"] for s, r in zip(starts, recs, strict=True)),
            "makespan_s": max(released) - sub0}


def run_mixed_sim(tmp: str, policy: str, jobs: list, submits: list[float], fs_cost: float, machine: int) -> dict:
    from malleable.controller.sim._jobfile import write_jobs

    path = os.path.join(tmp, f"mixed-{policy}.jsonl")
    write_jobs(path, [{"id": k + 1, "submit": round(s, 3), "run": secs + (fs_cost if bb else 0.0),
                       "estimate": LIMIT, "procs": n, **({"bb": bb * M} if bb else {})}
                      for k, ((_, n, secs, bb), s) in enumerate(zip(jobs, submits, strict=True))],
               machine, bb_total=2 * MIXED_CAP * M)
    out = os.path.join(tmp, f"mixed-{policy}.json")
    _cli("simulate", "--workload", path, "--policy", policy, "--json", out, "--no-progress", timeout=300)
    res = json.loads(Path(out).read_text())
    return {"mean_wait_s": res["mean_wait"], "makespan_s": res["makespan"]}


def bench_mixed(tmp: str, policies: list[str], jobs: list, rounds: int, fs_cost: float, hosts: list[str]) -> dict:
    out = {}
    for policy in policies:
        live, sim = [], []
        for _ in range(rounds):
            lv = run_mixed_live(tmp, policy, jobs, hosts)
            live.append(lv)
            sim.append(run_mixed_sim(tmp, policy, jobs, lv["submit"], fs_cost, len(hosts)))
        out[policy] = {"live_mean_wait_s": stats([x["mean_wait_s"] for x in live]),
                       "live_makespan_s": stats([x["makespan_s"] for x in live]),
                       "sim_mean_wait_s": stats([x["mean_wait_s"] for x in sim]),
                       "sim_makespan_s": stats([x["makespan_s"] for x in sim]),
                       "all_completed": all(s == "COMPLETED" for x in live for s in x["states"]),
                       "rounds": {"live": live, "sim": sim}}
    return {"jobs": [{"offset": o, "nodes": n, "seconds": s, "bb_MiB": b} for o, n, s, b in jobs],
            "hosts": hosts, "bb_total_MiB": 2 * MIXED_CAP, "fs_cost_added_s": round(fs_cost, 3),
            "policies": out}


# ------------------------------------------------------------------------------------------------ output
def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(18, 4))
    ax = axes[0]
    labels, ctl, hand = [], [], []
    for s in result.get("start", []):
        labels.append(f"{s['servers']} server(s)")
        ctl.append([s["controller"][k].get("median", 0) for k in ("queue_s", "server_start_s", "stage_in_s",
                                                                   "ready_to_launch_s")])
        hand.append([s["by_hand"][k].get("median", 0) for k in ("fs_start_cli_s", "fs_put_cli_s")])
    for i, (c, h) in enumerate(zip(ctl, hand, strict=True)):
        bottom = 0.0
        for v, name, col in zip(c, ("queue", "server start", "stage-in", "launch"),
                                ("tab:grey", "tab:blue", "tab:orange", "tab:green"), strict=True):
            ax.bar(i - 0.2, v, 0.4, bottom=bottom, color=col, label=name if i == 0 else None)
            bottom += v
        ax.bar(i + 0.2, h[0], 0.4, color="tab:purple", label="fs start by hand" if i == 0 else None)
        ax.bar(i + 0.2, h[1], 0.4, bottom=h[0], color="tab:pink", label="fs put by hand" if i == 0 else None)
    ax.set_xticks(range(len(labels)), labels)
    ax.set_ylabel("seconds (median)")
    ax.set_title("submit -> running (left) vs by hand (right)")
    ax.legend(fontsize=6, loc="lower center")
    ax = axes[1]
    st = result.get("staging", [])
    x = range(len(st))
    for off, key, name in ((-0.27, "stage_in_MBps", "stage-in"), (0.0, "stage_out_MBps", "stage-out"),
                           (0.27, "local_copy_MBps", "local copyfile")):
        ax.bar([i + off for i in x], [s[key]["median"] for s in st], 0.27, label=name)
    ax.set_xticks(list(x), [f"{s['file_bytes'] // M} MiB" for s in st])
    ax.set_yscale("log")
    ax.set_ylabel("MB/s (median)")
    ax.legend(fontsize=7)
    ax = axes[2]
    el = result.get("elastic")
    if el:
        keys = ("expand_s", "shrink_s", "shrink_to_gone_s")
        ax.bar([i - 0.2 for i in range(3)], [el["job_fs"][k]["median"] for k in keys], 0.4, label="job's fs")
        ax.bar([i + 0.2 for i in range(3)], [el["hand_fs"][k]["median"] for k in keys], 0.4, label="hand-started")
        e = el.get("earlier_adhocfs_elastic", {})
        if e.get("shrink_4_to_3_partial_s"):
            ax.axhline(e["shrink_4_to_3_partial_s"], color="r", ls="--", lw=1, label="earlier shrink (loopback)")
        ax.set_xticks(range(3), ["expand", "shrink", "shrink->gone"])
        ax.set_ylabel("seconds (median)")
        ax.legend(fontsize=7)
    ax = axes[3]
    mx = result.get("mixed")
    if mx:
        pols = list(mx["policies"])
        for off, key, name in ((-0.3, "live_mean_wait_s", "wait live"), (-0.1, "sim_mean_wait_s", "wait sim"),
                               (0.1, "live_makespan_s", "makespan live"), (0.3, "sim_makespan_s", "makespan sim")):
            ax.bar([i + off for i in range(len(pols))], [mx["policies"][p][key]["median"] for p in pols], 0.2,
                   label=name)
        ax.set_xticks(range(len(pols)), pols)
        ax.set_ylabel("seconds (median)")
        ax.set_ylim(0, 1.3 * max(mx["policies"][p]["live_makespan_s"]["max"] for p in pols))
        ax.legend(fontsize=7, ncol=2, loc="upper center")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def print_tables(result: dict) -> None:
    print(f"1. submit -> running with a ready file system (median (min-max) over {result['rounds']} rounds)")
    print(f"{'servers':>7} {'queue':>17} {'server start':>17} {'stage-in':>17} {'to launch':>17} "
          f"{'submit->running':>17} | {'fs start by hand':>17} {'fs put by hand':>17} {'start_fs call':>17}")
    for s in result.get("start", []):
        c, h = s["controller"], s["by_hand"]
        print(f"{s['servers']:>7} {fmt(c['queue_s']):>17} {fmt(c['server_start_s']):>17} "
              f"{fmt(c['stage_in_s']):>17} {fmt(c['ready_to_launch_s']):>17} {fmt(c['submit_to_running_s']):>17} | "
              f"{fmt(h['fs_start_cli_s']):>17} {fmt(h['fs_put_cli_s']):>17} {fmt(h['start_fs_call_s']):>17}")
    print("2. staging throughput (MB/s)")
    print(f"{'file':>8} {'stage-in':>20} {'stage-out':>20} {'local copyfile':>24} bytes equal")
    for s in result.get("staging", []):
        print(f"{s['file_bytes'] // M:>5}MiB {fmt(s['stage_in_MBps'], '', 0):>20} "
              f"{fmt(s['stage_out_MBps'], '', 0):>20} {fmt(s['local_copy_MBps'], '', 0):>24} "
              f"{s['stage_out_bytes_equal']}")
    el = result.get("elastic")
    if el:
        print(f"3. expand / shrink by one data server ({el['hosts']}, {el['fill_bytes'] // M} MiB written before and "
              "after the expansion)")
        print(f"{'':>12} {'expand':>17} {'expand+write':>17} {'shrink':>17} {'shrink->gone':>17} {'moved MiB':>12}")
        for k in ("job_fs", "hand_fs"):
            r = el[k]
            print(f"{k:>12} {fmt(r['expand_s']):>17} {fmt(r['expand_write_s']):>17} {fmt(r['shrink_s']):>17} "
                  f"{fmt(r['shrink_to_gone_s']):>17} {r['moved_MiB'].get('median', 0):>12}")
        e = el["earlier_adhocfs_elastic"]
        if e:
            print(f"   earlier (adhocfs_elastic.json, {e['when']}, loopback): shrink 4->3 partial "
                  f"{e['shrink_4_to_3_partial_s']} s ({e['shrink_4_to_3_partial_moved_MiB']} MiB), total "
                  f"{e['shrink_4_to_3_total_s']} s; shrink under writes {e['shrink_stall_shrink_s']} s "
                  f"({e['shrink_stall_moved_MiB']} MiB)")
    mx = result.get("mixed")
    if mx:
        print(f"4. mixed workload: {len(mx['jobs'])} jobs on {len(mx['hosts'])} hosts, buffer "
              f"{mx['bb_total_MiB']} MiB; simulated buffered jobs +{mx['fs_cost_added_s']:.2f} s")
        print(f"{'policy':>10} {'wait live':>17} {'wait sim':>17} {'makespan live':>17} {'makespan sim':>17}")
        for p, r in mx["policies"].items():
            print(f"{p:>10} {fmt(r['live_mean_wait_s']):>17} {fmt(r['sim_mean_wait_s']):>17} "
                  f"{fmt(r['live_makespan_s']):>17} {fmt(r['sim_makespan_s']):>17}")


def netns_missing(hosts: list[str]) -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    missing = [h for h in hosts if not os.path.exists(f"/run/netns/{h}")]
    return f"namespace hosts {missing} are not up (malleable testbed up 4)" if missing else None


def run(out: Path, quick: bool = False, hosts: list[str] | None = None, rounds: int | None = None,
        servers: tuple[int, ...] = (1, 3), sizes: tuple[int, ...] | None = None, elastic: bool = True,
        policies: tuple[str, ...] = ("fcfs-easy", "fcfs-bb", "plan-2"), jobs: list | None = None) -> dict:
    """Run the sections and write ``out`` (.json) and its .png; returns the result."""
    hosts = hosts or ["node1", "node2", "node3", "node4"]
    rounds = rounds or (1 if quick else 3)
    sizes = sizes or ((8 * M, 32 * M) if quick else (64 * M, 256 * M))
    jobs = jobs if jobs is not None else (MIXED_QUICK if quick else MIXED)
    os.environ["MALLEABLE_TOKEN"] = TOKEN
    os.environ["MALLEABLE_LAUNCHER_EXEC"] = LAUNCHER
    result: dict[str, Any] = {"benchmark": "storage", "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
                              "quick": quick, "rounds": rounds, "cpus": os.cpu_count(), "hosts": hosts}
    t_all = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="storbench-") as tmp:
        with controller(tmp, hosts, hosts[1:], "1G") as c:
            result["start"] = [bench_start(c, tmp, n, rounds, 4 * M) for n in servers]
            result["staging"] = [bench_staging(c, tmp, s, rounds) for s in sizes]
            if elastic:
                result["elastic"] = bench_elastic(c, tmp, rounds, 8 * M)
        # what a buffered job holds its resources for beyond its run: start (fs-start -> launch) and stop
        r = result["start"][0]["rounds"]["controller"]
        fs_cost = statistics.median(x["fs_start_to_running_s"] + x.get("end_to_stopped_s", 0.0) for x in r)
        if policies and jobs:
            result["mixed"] = bench_mixed(tmp, list(policies), jobs, rounds, fs_cost, hosts)
    result["seconds"] = round(time.monotonic() - t_all, 1)
    result["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    plot(result, out.with_suffix(".png"))
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 round, small files, 4 jobs (about 2 minutes)")
    ap.add_argument("--rounds", type=int, default=None, help="rounds per measurement (default 3, --quick 1)")
    ap.add_argument("--out", default=str(HERE / "results" / "storage.json"))
    args = ap.parse_args()
    why = netns_missing(["node1", "node2", "node3", "node4"])
    if why:
        print(f"storage benchmark needs the namespace hosts: {why}", file=sys.stderr)
        return 2
    result = run(Path(args.out), args.quick, rounds=args.rounds)
    print_tables(result)
    print(f"wrote {Path(args.out).with_suffix('.json')} and .png in {result['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
