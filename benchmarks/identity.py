"""Submits per second with a proven Unix identity against the current keys: one daemon (this build, a thread of this
process, running as root), one Unix user made for the run, and in a process of that user three clients taking
turns, ``--batch`` submits each, round after round:

* ``user key``: the user's key over TCP (what users had before: the baseline);
* ``MUNGE``: a MUNGE session over TCP (one credential per client, decoded by a ``munged`` started for the run);
* ``peer credentials``: the daemon's local socket, where the kernel gives the sender's uid (SO_PEERCRED).

Each round's figure is submits over seconds for each mode; the table shows medians over rounds and each mode's
ratio to the user key, paired per round. The jobs stay pending (the operator's job holds the only host) and are
cancelled at the end of each round, so every round starts from the same queue.

Usage (as root): python benchmarks/identity.py [--submits 200] [--batch 25] [--rounds 9]
Writes benchmarks/results/identity.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _unixuser import bench_user

TOKEN = b"identity-benchmark-token"
MODES = ("user key", "MUNGE", "peer credentials")

CHILD = """
import json, os, sys, time
from malleable._secret import parse_credential
from malleable.controller.daemon import _protocol as P
from malleable.controller.daemon._client import Client
uid, gid, state, address, key, n, batch, rounds, cwd = sys.argv[1:10]
uid, gid, n, batch, rounds = int(uid), int(gid), int(n), int(batch), int(rounds)
os.setgroups([])
os.setgid(gid)
os.setuid(uid)
clients = {"user key": Client(address, key=parse_credential(key), timeout=30),
           "MUNGE": Client(address, munge=True, timeout=30),
           "peer credentials": Client(state=state, timeout=30)}
assert clients["peer credentials"].address.startswith("ipc://")
spent = {m: [0.0] * rounds for m in clients}
env = {"PATH": "/usr/bin:/bin"}
for r in range(rounds):
    ids = []
    for _ in range(n // batch):
        for m, c in clients.items():
            t0 = time.perf_counter()
            for _ in range(batch):
                ids.append(c.submit(["true"], out=os.devnull, cwd=cwd, env=env))
            spent[m][r] += time.perf_counter() - t0
    for jid in ids:
        clients["user key"].call(P.Cancel(jid))
print(json.dumps(spent))
"""


def start_munged(d: Path) -> Path:
    """A munged of our own (fresh key) with its socket in ``d``."""
    (d / "key").write_bytes(os.urandom(128))
    (d / "key").chmod(0o600)
    sock = d / "munge.sock"
    subprocess.run(["munged", "--force", f"--socket={sock}", f"--key-file={d / 'key'}", f"--pid-file={d / 'pid'}",
                    f"--seed-file={d / 'seed'}", f"--log-file={d / 'log'}"], check=True, timeout=30)
    deadline = time.monotonic() + 10
    while not sock.exists():
        if time.monotonic() > deadline:
            raise SystemExit("munged did not start")
        time.sleep(0.05)
    return sock


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--submits", type=int, default=200, help="submits per mode and round")
    ap.add_argument("--batch", type=int, default=25, help="submits per turn")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "identity"))
    args = ap.parse_args()
    if not shutil.which("munged"):
        raise SystemExit("needs Debian's munge package")

    from malleable.controller.daemon._client import Client
    from malleable.controller.daemon._daemon import Daemon, DaemonConfig
    from malleable.controller.daemon._hostpool import HostPool
    from malleable.controller.daemon._munge import MUNGE_SOCKET_ENV

    d = Path(tempfile.mkdtemp(prefix="mlb-identity-", dir="/tmp"))
    d.chmod(0o755)
    sock = None
    try:
        with bench_user() as name:
            sock = start_munged(d)
            os.environ[MUNGE_SOCKET_ENV] = str(sock)
            state = d / "ctl.sqlite"
            daemon = Daemon(DaemonConfig(str(state), HostPool.local(1), "fcfs", tick=5.0, host_check=0), token=TOKEN)
            addr = daemon.start()
            stop = threading.Event()
            t = threading.Thread(target=daemon.serve, args=(stop,), daemon=True)
            t.start()
            try:
                with Client(addr, token=TOKEN, timeout=30) as op:
                    op.submit(["sleep", "600"], out=os.devnull, cwd=str(d), env={})
                    key = op.add_user(name)
                    import pwd

                    pw = pwd.getpwnam(name)
                    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLEABLE_")}
                    env[MUNGE_SOCKET_ENV] = str(sock)
                    p = subprocess.run([sys.executable, "-c", CHILD, str(pw.pw_uid), str(pw.pw_gid), str(state), addr,
                                        key.text, str(args.submits), str(args.batch), str(args.rounds), str(d)],
                                       capture_output=True, text=True, timeout=3600, env=env)
                    if p.returncode:
                        raise SystemExit(f"the user's client failed: {p.stderr.strip().splitlines()[-1:]}")
                    spent = json.loads(p.stdout)
                    from malleable.controller.daemon import _protocol as P

                    op.call(P.Shutdown(True))
            finally:
                stop.set()
                t.join(30)
                daemon.close()
    finally:
        if sock is not None:
            subprocess.run(["munged", "--stop", f"--socket={sock}"], capture_output=True, timeout=30)
        shutil.rmtree(d, ignore_errors=True)

    rates = {m: [args.submits / s for s in spent[m]] for m in MODES}
    base = rates["user key"]
    result = {"submits": args.submits, "batch": args.batch, "rounds": args.rounds, "rates": rates, "modes": {}}
    print(f"{'mode':<18} {'submits/s (median)':>19} {'min':>7} {'max':>7} {'vs user key (paired median)':>28}")
    for m in MODES:
        r = rates[m]
        ratio = statistics.median(a / b for a, b in zip(r, base, strict=True))
        result["modes"][m] = {"median": statistics.median(r), "min": min(r), "max": max(r), "ratio": ratio}
        print(f"{m:<18} {statistics.median(r):>19.0f} {min(r):>7.0f} {max(r):>7.0f} {ratio:>28.2f}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out + ".json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
