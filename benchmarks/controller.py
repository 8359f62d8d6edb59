"""Controller daemon benchmarks, each against a baseline measured in the same run.

1. **Pass time**: one scheduling pass of the core (snapshot + policy + decisions stored in SQLite) with 1,000
   queued jobs on 512 simulated hosts, for EASY, malleable-fill and mebf-handoff (target < 100 ms for EASY);
   baseline: the policy call alone on the same snapshot (what the simulator pays per pass).
2. **Submit throughput**: sequential ``submit`` requests to a daemon process (each committed to SQLite
   before the reply); baselines: the same request/reply over a bare zmq ROUTER echo with the same authenticated
   envelope, and the command line ``malleable submit`` (a Python process per command).
   **With keys** (2b): submits per second through a daemon with the envelope before key ids and payload MACs
   (baseline, ``benchmarks/wire.py``'s), and the current one spoken with the operator's key and with a user's
   key (the daemon derives the user's key for each message and checks the rules), taking turns in batches within
   one daemon; ratios are medians of the per-round ratios. Target: a user key at most 10% slower than the old
   envelope. ``--only-keys`` runs this section alone.
   **Long queue** (2c): ``queue`` with 100,000 pending jobs (answered in parts) through the client and the
   command line, against a JSON round trip of the same rows; the daemon's memory per pending job against a daemon
   on an empty state. ``--only-queue`` runs this section alone; ``--against PYTHON`` also times another build
   (the previous commit's, in a worktree with its own venv) on the same state, the two builds taking turns.
3. **Decision to new size** on namespace hosts: a malleable job repeatedly grown and shrunk by the policy (rigid
   jobs arrive); time from the policy's decision to the runtime's acknowledgement, and to the shrunk hosts being
   checked empty, against the runtime's own reconfiguration time reported in the same acknowledgement.
4. **Live vs simulated**: a small mixed workload (rigid sleeps + malleable linear-speedup jobs) run live on the
   namespace hosts, then replayed in the simulator with the same policy (malleable-fill), speedup model and the
   measured reconfiguration cost: makespan and mean wait side by side.

Run: ``.venv/bin/python benchmarks/controller.py [--skip-live]`` (sections 3-4 need root and the namespace test
cluster). Writes ``benchmarks/results/controller.json`` and ``controller.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _controller_live import _netns_ok, bench_mixed, bench_resize
from _daemon_proc import TOKEN, _daemon, _stop, scratch

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


# ------------------------------------------------------------------------------------------------ 1. pass time
def bench_pass(policy_name: str, hosts: int = 512, queued: int = 1000, passes: int = 30, seed: int = 1) -> dict:
    """Pass time of the live core: ``handle(Schedule)`` plus carrying out its persistence in SQLite, as the
    daemon does; baseline: the policy alone on the same snapshot."""
    from malleable.controller.daemon import _protocol as P
    from malleable.controller.daemon._core import Core
    from malleable.controller.daemon._daemon import make_policy
    from malleable.controller.daemon._events import (
        PERSIST,
        HostClean,
        JobExited,
        JobLaunched,
        Launch,
        Reply,
        Request,
        Schedule,
    )
    from malleable.controller.daemon._store import Store
    from malleable.controller.sched import StartJob

    rng = random.Random(seed)  # noqa: S311 - seeded benchmark data
    tmp = scratch()
    names = [f"h{i:04d}" for i in range(hosts)]
    policy = make_policy(policy_name, {})
    store = Store(os.path.join(tmp, "s.sqlite"))
    core = Core(names, policy)
    store.apply(core.take_actions())

    def do(event) -> list:
        acts = core.handle(event)
        store.apply([a for a in acts if type(a) in PERSIST])
        return acts

    def submit(n: int, malleable: bool, t: float) -> int:
        lo, hi = (max(1, n // 2), min(hosts, n * 2)) if malleable else (n, n)
        m = P.Submit("b", ["true"], n, lo, hi, malleable, float(rng.randint(60, 7200)), "", "", "/", {})
        return next(a.msg.job_id for a in do(Request(t, m)) if type(a) is Reply)

    def launches(acts: list) -> list:
        return [a for a in acts if type(a) is Launch]

    # fill the machine with running jobs (mixed rigid / malleable), leaving a few hosts free
    now = 1000.0
    used = 0
    while used < hosts - 8:
        n = min(rng.choice([1, 2, 4, 8, 16]), hosts - 8 - used)
        jid = submit(n, rng.random() < 0.3, now)
        core.policy = lambda s, t, jid=jid, n=n: [StartJob(jid, s.free[:n])]
        for a in launches(do(Schedule(now))):
            do(JobLaunched(now, a.job.id, 1, 1.0))
            if a.job.malleable:
                do(Request(now, P.Register(a.job.id, 1, a.job.hosts[0], len(a.job.hosts), a.job.hosts)))
        used += n
    core.policy = policy
    for _ in range(queued):
        submit(rng.choice([1, 2, 4, 8, 16, 32, 64]), rng.random() < 0.3, now)
    times, policy_only, started = [], [], 0
    for k in range(passes):
        t = now + k
        snap = core.snapshot(t)
        t0 = time.perf_counter()
        policy(snap, t)
        policy_only.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        acts = do(Schedule(t))
        times.append(time.perf_counter() - t0)
        acts = launches(acts)
        started += len(acts)
        # the started jobs end at once and new ones arrive: every pass sees ~8 free hosts and 1,000 queued jobs
        for a in acts:
            do(JobLaunched(t, a.job.id, 1, 1.0))
            do(JobExited(t, a.job.id, 0))
            for h in a.job.hosts:
                do(HostClean(t, h))
            submit(rng.choice([1, 2, 4, 8, 16, 32, 64]), rng.random() < 0.3, t)
    store.close()
    return {"policy": policy_name, "hosts": hosts, "queued": queued, "running": sum(
        1 for j in core.jobs.values() if j.state != "PENDING"), "passes": passes,
            "pass_ms_median": 1e3 * statistics.median(times), "pass_ms_p95": 1e3 * pct(times, 0.95),
            "policy_only_ms_median": 1e3 * statistics.median(policy_only),
            "jobs_started_during_passes": started}


# ------------------------------------------------------------------------------------------------ 2. submits
def bench_submit(n: int = 1000, n_cli: int = 10) -> dict:
    import zmq

    from malleable.controller.daemon import _protocol as P
    from malleable.controller.daemon._client import Client

    tmp = scratch()
    state = os.path.join(tmp, "s.sqlite")
    _daemon(state, "--local", "1")
    try:
        with Client(state=state, token=TOKEN.encode()) as c:
            c.submit(["sleep", "600"], 1, out=os.devnull)   # holds the only host: the rest stays queued
            env = {"PATH": os.environ.get("PATH", "")}
            t0 = time.perf_counter()
            for _ in range(n):
                c.submit(["true"], 1, out=os.devnull, env=env)
            daemon_s = time.perf_counter() - t0
            assert len(c.rows(P.Queue())) == n + 1
        e = dict(os.environ, MALLEABLE_TOKEN=TOKEN)
        t0 = time.perf_counter()
        for _ in range(n_cli):
            subprocess.run([sys.executable, "-m", "malleable", "submit", "--state", state, "-o", os.devnull, "--",
                            "true"], env=e, capture_output=True, check=True, timeout=60)
        cli_s = time.perf_counter() - t0
    finally:
        _stop(state)
    # baseline: a bare ROUTER that decodes and answers with the same envelope, in another thread
    ctx = zmq.Context()
    srv = ctx.socket(zmq.ROUTER)
    srv.setsockopt(zmq.LINGER, 0)
    port = srv.bind_to_random_port("tcp://127.0.0.1")
    stop = threading.Event()

    def echo() -> None:
        while not stop.is_set():
            if srv.poll(100):
                f = srv.recv_multipart()
                msg, rid = P.decode(f[2:], TOKEN.encode())
                srv.send_multipart([f[0], b"", *P.encode(P.Submitted(1), TOKEN.encode(), rid)])

    th = threading.Thread(target=echo)
    th.start()
    try:
        with Client(f"tcp://127.0.0.1:{port}", token=TOKEN.encode()) as c:
            env = {"PATH": os.environ.get("PATH", "")}
            t0 = time.perf_counter()
            for _ in range(n):
                c.submit(["true"], 1, out=os.devnull, env=env)
            raw_s = time.perf_counter() - t0
    finally:
        stop.set()
        th.join()
        srv.close(0)
        ctx.term()
    return {"submits": n, "daemon_per_s": n / daemon_s, "raw_zmq_envelope_per_s": n / raw_s,
            "cli_submits": n_cli, "cli_per_s": n_cli / cli_s}


# ------------------------------------------------------------------------------------------------ 2c. long queue
_ROWS_TIMED = """
import sys, time
from malleable.controller.daemon import _protocol as P
from malleable.controller.daemon._client import Client
with Client(state=sys.argv[1], token=sys.argv[2].encode(), timeout=60) as c:
    t0 = time.perf_counter()
    n = len(c.rows(P.Queue()))
    print(time.perf_counter() - t0, n)
"""


def bench_queue(n: int = 100_000, reps: int = 3, against: str = "") -> dict:
    """``queue`` with ``n`` pending jobs (written to a real state file, then loaded by a daemon process, as after
    a restart): the answer in parts through :class:`Client` and through the command line; baseline: a JSON
    round trip of the same rows in this process (what any JSON answer costs at least). Daemon memory per
    pending job: its RSS against a daemon of the same build on an empty state. With ``against`` (the Python of
    another build, e.g. the previous commit's worktree), both builds answer the same state in turns, each
    ``Client.rows`` timed in a fresh process of its build."""
    import psutil

    from malleable.controller.daemon import _protocol as P
    from malleable.controller.daemon._client import Client
    from malleable.controller.daemon._records import JobRec
    from malleable.controller.daemon._store import Store

    tmp = scratch()
    empty, state = os.path.join(tmp, "empty.sqlite"), os.path.join(tmp, "s.sqlite")
    st = Store(state)
    now = time.time()
    with st.tx():                 # 2 hosts each on a 1-host pool: they all stay pending
        for i in range(1, n + 1):
            st.save_job(JobRec(i, f"job{i}", ["sleep", "600"], 2, 2, 2, False, 3600.0, os.devnull, os.devnull,
                               tmp, {"PATH": "/usr/bin:/bin"}, now, user="bench"))
    st.close()
    pristine = os.path.join(tmp, "pristine.sqlite")
    shutil.copyfile(state, pristine)
    rss, pid = {}, 0
    for name, path in (("empty", empty), ("full", state)):
        pid = _daemon(path, "--local", "1")
        rss[name] = psutil.Process(pid).memory_info().rss
        if name == "empty":
            _stop(path, pid=pid)
    e = dict(os.environ, MALLEABLE_TOKEN=TOKEN)
    try:
        client_s, cli_s, rows = [], [], []
        for _ in range(reps):
            with Client(state=state, token=TOKEN.encode(), timeout=60) as c:
                t0 = time.perf_counter()
                rows = c.rows(P.Queue())
                client_s.append(time.perf_counter() - t0)
            assert len(rows) == n
            t0 = time.perf_counter()
            out = subprocess.run([sys.executable, "-m", "malleable", "queue", "--state", state], env=e,
                                 capture_output=True, check=True, timeout=120)
            cli_s.append(time.perf_counter() - t0)
            assert out.stdout.count(b"\n") == n + 1
        base_s = []
        for _ in range(reps):
            t0 = time.perf_counter()
            json.loads(json.dumps(rows))
            base_s.append(time.perf_counter() - t0)
    finally:
        _stop(state, pid=pid)
    result = {"pending": n, "client_s_median": statistics.median(client_s), "client_s": client_s,
              "cli_s_median": statistics.median(cli_s), "cli_s": cli_s,
              "json_roundtrip_s_median": statistics.median(base_s),
              "daemon_rss_empty_mib": rss["empty"] / 2**20, "daemon_rss_full_mib": rss["full"] / 2**20,
              "bytes_per_pending_job": (rss["full"] - rss["empty"]) / n}
    if against:
        result["paired"] = _queue_paired(pristine, n, reps, {"this": sys.executable, "against": against}, e)
    return result


def _queue_paired(pristine: str, n: int, reps: int, builds: dict[str, str], env: dict) -> dict:
    """Each build's daemon on its own copy of the same state, one at a time, the order swapped every round:
    ``Client.rows`` (in a fresh process of that build) and ``malleable queue``."""
    times: dict[str, dict[str, list[float]]] = {b: {"client_s": [], "cli_s": []} for b in builds}
    for rnd in range(reps):
        for b in (list(builds) if rnd % 2 == 0 else list(builds)[::-1]):
            py, state = builds[b], pristine + f".{b}.sqlite"
            shutil.copyfile(pristine, state)
            pid = _daemon(state, "--local", "1", python=py)
            try:
                out = subprocess.run([py, "-P", "-c", _ROWS_TIMED, state, TOKEN], env=env, capture_output=True,
                                     text=True, check=True, timeout=120)
                secs, got = out.stdout.split()
                assert int(got) == n
                times[b]["client_s"].append(float(secs))
                t0 = time.perf_counter()
                q = subprocess.run([py, "-P", "-m", "malleable", "queue", "--state", state], env=env,
                                   capture_output=True, check=True, timeout=120)
                times[b]["cli_s"].append(time.perf_counter() - t0)
                assert q.stdout.count(b"\n") == n + 1
            finally:
                _stop(state, python=py, pid=pid)
    return {b: {**t, "client_s_median": statistics.median(t["client_s"]),
                "cli_s_median": statistics.median(t["cli_s"]), "python": builds[b]} for b, t in times.items()}


def _print_queue(q: dict) -> None:
    print(f"queue, {q['pending']:,} pending: client {q['client_s_median']:.2f} s, 'malleable queue' "
          f"{q['cli_s_median']:.2f} s (medians); baseline JSON round trip of the rows "
          f"{q['json_roundtrip_s_median']:.2f} s; "
          f"daemon {q['daemon_rss_full_mib']:.0f} MiB vs {q['daemon_rss_empty_mib']:.0f} MiB empty: "
          f"{q['bytes_per_pending_job'] / 1024:.1f} KiB per pending job")
    for b, t in q.get("paired", {}).items():
        print(f"  paired, {b} build ({t['python']}): client {t['client_s_median']:.2f} s, 'malleable queue' "
              f"{t['cli_s_median']:.2f} s (medians of {len(t['cli_s'])}, turns alternating)")


# ------------------------------------------------------------------------------------------------ 2b. keys
KEY_MODES = ("old envelope", "operator key", "user key")


def bench_keys(n: int = 300, reps: int = 5, batch: int = 25) -> dict:
    """Submit throughput with the envelope before key ids and payload MACs (``old envelope``: shared secret, HMAC
    of the header only, as ``benchmarks/wire.py`` keeps it), and the current one spoken with the operator's shared
    secret or with a user's key (the daemon derives the key for every message and checks who may submit).

    One daemon serves in a thread (every job waits behind a running one); the modes take turns in batches of
    ``batch`` submits (``reps`` rounds of ``n`` submits per mode), so the machine's drift hits all three alike;
    per mode: submits over the time spent in its batches, and the median of the per-round rates."""
    from _unixuser import bench_user
    from wire import controller_envelope

    from malleable.controller.daemon import _protocol as P
    from malleable.controller.daemon._client import Client
    from malleable.controller.daemon._daemon import Daemon, DaemonConfig
    from malleable.controller.daemon._hostpool import HostPool

    token = TOKEN.encode()
    spent = {m: [0.0] * reps for m in KEY_MODES}
    with tempfile.TemporaryDirectory() as d, bench_user() as name:
        daemon = Daemon(DaemonConfig(os.path.join(d, "ctl.sqlite"), HostPool.local(1), "fcfs", tick=5.0,
                                     host_check=0), token=token)
        addr = daemon.start()
        stop = threading.Event()
        t = threading.Thread(target=daemon.serve, args=(stop,), daemon=True)
        t.start()
        op = Client(addr, token=token, timeout=30)
        user = Client(addr, key=op.add_user(name), timeout=30)
        try:
            op.submit(["sleep", "600"], out=os.devnull, cwd=d, env={})
            env = {"PATH": os.environ.get("PATH", "")}
            for r in range(reps):
                ids = []
                for _ in range(n // batch):
                    for m in KEY_MODES:
                        c = user if m == "user key" else op
                        with controller_envelope(m == "old envelope", token):
                            t0 = time.perf_counter()
                            for _ in range(batch):
                                ids.append(c.submit(["true"], out=os.devnull, cwd=d, env=env))
                            spent[m][r] += time.perf_counter() - t0
                for jid in ids:                        # every round starts from the same queue
                    op.call(P.Cancel(jid))
            op.call(P.Shutdown(True))
            deadline = time.monotonic() + 20
            while daemon.procs and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            user.close()
            op.close()
            stop.set()
            t.join(10)
            daemon.close()
    per = n // batch * batch
    rates = {m: [per / x for x in v] for m, v in spent.items()}
    med = {m: statistics.median(v) for m, v in rates.items()}

    def paired(m: str) -> float:              # the median of the per-round ratios: drift between rounds cancels
        return round(statistics.median(a / b for a, b in zip(rates[m], rates["old envelope"], strict=True)), 3)

    return {"submits_per_round": per, "rounds": reps, "batch": batch,
            "per_s": {m: [round(x, 1) for x in v] for m, v in rates.items()},
            "median_per_s": {m: round(v, 1) for m, v in med.items()},
            "user_key_vs_old": paired("user key"), "operator_key_vs_old": paired("operator key")}


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    ps = result["pass"]
    ax = axes[0]
    x = range(len(ps))
    ax.bar([i - 0.2 for i in x], [p["pass_ms_median"] for p in ps], 0.4, label="daemon pass (median)")
    ax.bar([i + 0.2 for i in x], [p["policy_only_ms_median"] for p in ps], 0.4, label="policy alone")
    ax.axhline(100, color="r", ls="--", lw=1, label="target (EASY)")
    ax.set_xticks(list(x), [p["policy"] for p in ps])
    ax.set_ylabel("ms per pass (1,000 queued, 512 hosts)")
    ax.legend(fontsize=8)
    s = result["submit"]
    names = ["daemon", "raw zmq\nenvelope", "CLI"]
    vals = [s["daemon_per_s"], s["raw_zmq_envelope_per_s"], s["cli_per_s"]]
    if result.get("keys"):                         # same-run baseline: the envelope before keys
        names += [m.replace(" ", "\n") for m in KEY_MODES]
        vals += [result["keys"]["median_per_s"][m] for m in KEY_MODES]
    axes[1].bar(names, vals, color=["tab:blue"] * 3 + ["tab:grey", "tab:green", "tab:orange"][: len(names) - 3])
    axes[1].set_ylabel("submits / s")
    axes[1].set_yscale("log")
    axes[1].tick_params(axis="x", labelsize=7)
    ax = axes[2]
    if result.get("resize"):
        sm = result["resize"]["summary"]
        labels, a, b = [], [], []
        for k in ("expand", "shrink"):
            if k in sm:
                labels.append(k)
                a.append(sm[k]["decision_to_ack_median_s"])
                b.append(sm[k]["runtime_median_s"])
        ax.bar([i - 0.2 for i in range(len(labels))], a, 0.4, label="decision -> acknowledged")
        ax.bar([i + 0.2 for i in range(len(labels))], b, 0.4, label="runtime's own time")
        ax.set_xticks(range(len(labels)), labels)
        ax.set_ylabel("seconds (median)")
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "live sections skipped", ha="center")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--skip-live", action="store_true", help="skip the namespace-host sections")
    ap.add_argument("--only-keys", action="store_true", help="run only the submit-with-keys section")
    ap.add_argument("--only-queue", action="store_true", help="run only the long-queue section")
    ap.add_argument("--queue-reps", type=int, default=3, help="rounds of the long-queue section")
    ap.add_argument("--against", default="", metavar="PYTHON",
                    help="also time the long queue with this Python's build (e.g. the previous commit's worktree "
                         "venv), in turns with this one")
    ap.add_argument("--key-submits", type=int, default=300, help="submits per mode and round of the keys section")
    ap.add_argument("--key-reps", type=int, default=5, help="rounds of the keys section (modes take turns)")
    ap.add_argument("--out", default=str(HERE / "results" / "controller.json"))
    args = ap.parse_args()
    os.environ.setdefault("MALLEABLE_TOKEN", TOKEN)
    result: dict = {"when": time.strftime("%Y-%m-%dT%H:%M:%S"), "cpus": os.cpu_count()}
    if args.only_keys:
        return _keys_only(args, result)
    if args.only_queue:
        out = Path(args.out)
        old = json.loads(out.read_text()) if out.exists() else {}
        old["queue"] = q = bench_queue(reps=args.queue_reps, against=args.against)
        _print_queue(q)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(old, indent=2) + "\n")
        return 0
    result["pass"] = [bench_pass(p) for p in ("easy", "malleable-fill", "mebf-handoff")]
    print(f"{'policy':<15} {'pass median':>12} {'p95':>8} {'policy alone':>13}  (1,000 queued, 512 hosts)")
    for p in result["pass"]:
        print(f"{p['policy']:<15} {p['pass_ms_median']:>9.1f} ms {p['pass_ms_p95']:>5.1f} ms "
              f"{p['policy_only_ms_median']:>10.1f} ms")
    result["submit"] = s = bench_submit()
    print(f"submit: daemon {s['daemon_per_s']:.0f}/s, raw zmq envelope {s['raw_zmq_envelope_per_s']:.0f}/s, "
          f"CLI {s['cli_per_s']:.1f}/s")
    result["queue"] = q = bench_queue(reps=args.queue_reps, against=args.against)
    _print_queue(q)
    result["keys"] = k = bench_keys(args.key_submits, args.key_reps)
    print(f"{'submits/s (medians of ' + str(k['rounds']) + ')':<28} " + " ".join(f"{m:>14}" for m in KEY_MODES))
    print(f"{'':<28} " + " ".join(f"{k['median_per_s'][m]:>14.0f}" for m in KEY_MODES))
    print(f"user key / old envelope: {k['user_key_vs_old']:.0%} (target >= 90%); operator key / old: "
          f"{k['operator_key_vs_old']:.0%}")
    why = None if not args.skip_live else "--skip-live"
    why = why or _netns_ok()
    if why:
        print(f"live sections skipped: {why}")
        result["live_skipped"] = why
    else:
        result["resize"] = r = bench_resize()
        for k, v in r["summary"].items():
            extra = (f", hosts checked empty {v['decision_to_hosts_checked_median_s']:.2f} s"
                     if "decision_to_hosts_checked_median_s" in v else "")
            print(f"{k}: n={v['n']} decision->acknowledged {v['decision_to_ack_median_s']:.2f} s, runtime's own "
                  f"{v['runtime_median_s']:.2f} s{extra} (medians)")
        cost = statistics.median([x["runtime_s"] for k in ("expand", "shrink") for x in r["steps"][k]])
        result["mixed"] = mx = bench_mixed(cost)
        print(f"mixed workload: makespan live {mx['live_makespan_s']:.1f} s vs simulated {mx['sim_makespan_s']:.1f} s; "
              f"mean wait live {mx['live_mean_wait_s']:.1f} s vs simulated {mx['sim_mean_wait_s']:.1f} s")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    plot(result, Path(args.out).with_suffix(".png"))
    print(f"wrote {args.out}")
    return 0


def _keys_only(args: argparse.Namespace, result: dict) -> int:
    """Run the keys section alone and merge it into the results file (the other sections are kept)."""
    out = Path(args.out)
    old = json.loads(out.read_text()) if out.exists() else {}
    result["queue"] = q = bench_queue()
    _print_queue(q)
    result["keys"] = k = bench_keys(args.key_submits, args.key_reps)
    print(" ".join(f"{m}: {k['median_per_s'][m]:.0f}/s" for m in KEY_MODES))
    print(f"user key / old envelope: {k['user_key_vs_old']:.0%} (target >= 90%); operator key / old: "
          f"{k['operator_key_vs_old']:.0%}")
    old["keys"] = {**k, "when": result["when"], "loadavg_at_end": [round(x, 2) for x in os.getloadavg()]}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(old, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
