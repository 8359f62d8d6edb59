"""Per-message cost of the wire envelope, old (HMAC over the header only, no replay check) vs new (MAC over the
header and every payload, session counter and replay window, depth check), measured in the same run; and the
controller's submit throughput through a real daemon with each envelope.

1. encode + decode of small messages (a controller ``submit``, an adhocfs ``put`` header) per second;
2. encode + decode of a 512 KiB adhocfs block (the payload is MACed now: bytes per second);
3. ``submit`` requests per second, client -> daemon (thread) -> SQLite -> reply, with the controller's
   protocol bound to the old envelope and then to the new one (alternating, best of each).

Usage: python benchmarks/wire.py [--seconds 1.0] [--submits 300] [--reps 3]
Writes benchmarks/results/wire.json and .png.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import hmac
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
TOKEN = b"wire-benchmark-token"


# ---------------------------------------------------------------- the previous envelope (the baseline)
OLD_MAGIC = b"MLB1"


def old_pack(header: Mapping[str, Any], token: bytes, payloads: Sequence[Any] = ()) -> list[Any]:
    """The envelope before this change: ``[MAGIC, header, HMAC(MAGIC + header), *payloads]``."""
    body = dict(header)
    body["sizes"] = [len(memoryview(p).cast("B")) for p in payloads]
    raw = json.dumps(body, separators=(",", ":")).encode()
    return [OLD_MAGIC, raw, hmac.new(token, OLD_MAGIC + raw, hashlib.sha256).digest(), *payloads]


def old_unpack(frames: Sequence[Any], token: bytes, versions: tuple[int, ...]) -> tuple[dict[str, Any], list[Any]]:
    """The old checks: magic, header MAC, JSON, version, type, sizes (payload bytes not authenticated)."""
    magic, raw, mac = (bytes(f) for f in frames[:3])
    assert magic == OLD_MAGIC and hmac.compare_digest(mac, hmac.new(token, OLD_MAGIC + raw, hashlib.sha256).digest())
    header = json.loads(raw)
    assert header.get("v") in versions and isinstance(header.get("type"), str)
    payloads = [p if isinstance(p, (bytes, bytearray, memoryview)) else memoryview(p) for p in frames[3:]]
    assert [len(memoryview(p)) for p in payloads] == header["sizes"]
    return header, payloads


def _rate(fn: Callable[[], Any], seconds: float) -> float:
    n, t0 = 0, time.perf_counter()
    while (dt := time.perf_counter() - t0) < seconds:
        for _ in range(50):
            fn()
        n += 50
    return n / dt


def codec_rates(seconds: float) -> dict[str, dict[str, float]]:
    """Messages (or bytes) per second through encode + decode, old and new, interleaved."""
    from malleable import _wire as W

    submit = {"v": 1, "type": "submit", "id": 7, "name": "job", "cmd": ["python", "app.py", "--steps", "100"],
              "nodes": 2, "min_nodes": 1, "max_nodes": 4, "malleable": True, "time_limit": 600.0, "out": "o.txt",
              "err": "", "cwd": "/work", "env": {f"VAR{i}": "x" * 20 for i in range(30)}}
    put = {"v": 1, "type": "put_blocks", "id": 9, "fid": 3, "blocks": [12], "offsets": [0], "version": 1}
    block = os.urandom(512 * 1024)
    tx, rx = W.Wire(TOKEN), W.Wire(TOKEN)
    cases = {
        "submit msg/s": (lambda: old_unpack(old_pack(submit, TOKEN), TOKEN, (1,)),
                         lambda: rx.unpack(tx.pack(submit), (1,))),
        "put header msg/s": (lambda: old_unpack(old_pack(put, TOKEN, [b""]), TOKEN, (1,)),
                             lambda: rx.unpack(tx.pack(put, [b""]), (1,))),
        "512 KiB block MB/s": (lambda: old_unpack(old_pack(put, TOKEN, [block]), TOKEN, (1,)),
                               lambda: rx.unpack(tx.pack(put, [block]), (1,))),
    }
    out = {}
    for name, (old, new) in cases.items():
        olds, news = [], []
        for _ in range(3):
            olds.append(_rate(old, seconds / 3))
            news.append(_rate(new, seconds / 3))
        scale = 0.5 if "MB/s" in name else 1.0  # 512 KiB per message
        out[name] = {"old": max(olds) * scale, "new": max(news) * scale}
    return out


@contextlib.contextmanager
def controller_envelope(old: bool, token: bytes = TOKEN) -> Iterator[None]:
    """Bind the controller protocol's envelope functions to the old or the new implementation (the old one has
    no key ids: the daemon's keyed decoding and replies fall back to the shared ``token``)."""
    from malleable import _wire as W
    from malleable.controller.daemon import _protocol as P

    saved = P.pack, P.unpack, P.decode_keyed, P.encode_keyed
    if old:
        P.pack, P.unpack = old_pack, old_unpack
        P.decode_keyed = lambda frames, keyring: (*P.decode(frames, token), "")
        P.encode_keyed = lambda msg, wire, rid=0: P.encode(msg, token, rid)
    else:
        P.pack, P.unpack = W.pack, W.unpack
    try:
        yield
    finally:
        P.pack, P.unpack, P.decode_keyed, P.encode_keyed = saved


def submit_rate(n: int, old: bool, user: bool = False) -> float:
    """Submits per second through a daemon serving in a thread (every job waits behind a running one); with
    ``user``, the submits are sealed with a user's key (the daemon derives it and checks the rules)."""
    from _unixuser import bench_user

    from malleable.controller.daemon import _protocol as P
    from malleable.controller.daemon._client import Client
    from malleable.controller.daemon._core import CoreConfig
    from malleable.controller.daemon._daemon import Daemon, DaemonConfig
    from malleable.controller.daemon._hostpool import HostPool

    with tempfile.TemporaryDirectory() as d, controller_envelope(old), \
            (bench_user() if user else contextlib.nullcontext("")) as name:
        daemon = Daemon(DaemonConfig(os.path.join(d, "ctl.sqlite"), HostPool.local(1), "fcfs", tick=5.0,
                                     core=CoreConfig()), token=TOKEN)
        addr = daemon.start()
        stop = threading.Event()
        t = threading.Thread(target=daemon.serve, args=(stop,), daemon=True)
        t.start()
        op = Client(addr, token=TOKEN, timeout=30)
        c = Client(addr, key=op.add_user(name), timeout=30) if user else op
        try:
            first = c.submit(["sleep", "60"], out=os.devnull, cwd=d, env={})
            t0 = time.perf_counter()
            for _ in range(n):
                c.submit(["true"], out=os.devnull, cwd=d, env={})
            rate = n / (time.perf_counter() - t0)
            for row in op.rows(P.Queue()):
                op.call(P.Cancel(row["id"]))
            deadline = time.monotonic() + 20
            while daemon.procs and time.monotonic() < deadline:
                time.sleep(0.1)
            assert first
        finally:
            if c is not op:
                c.close()
            op.close()
            stop.set()
            t.join(10)
            daemon.close()
    return rate


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=1.5, help="seconds per codec case and side")
    p.add_argument("--submits", type=int, default=300, help="submits per daemon run")
    p.add_argument("--reps", type=int, default=3, help="daemon runs per envelope (alternating)")
    p.add_argument("--out", default=str(RESULTS / "wire"), help="output path without extension")
    args = p.parse_args()
    os.environ["MALLEABLE_TOKEN"] = TOKEN.decode()
    codec = codec_rates(args.seconds)
    subs: dict[str, list[float]] = {"old": [], "new": []}
    for _ in range(args.reps):
        for side in ("old", "new"):
            subs[side].append(submit_rate(args.submits, side == "old"))
            print(f"submit {side}: {subs[side][-1]:.0f}/s", file=sys.stderr)
    result = {
        "benchmark": "wire",
        "codec": {k: {s: round(v, 1) for s, v in d.items()} | {"new_vs_old": round(d["new"] / d["old"], 3)}
                  for k, d in codec.items()},
        "submit_per_s": {s: [round(x, 1) for x in v] for s, v in subs.items()},
        "submit_median": {s: round(statistics.median(v), 1) for s, v in subs.items()},
        "submit_new_vs_old": round(statistics.median(subs["new"]) / statistics.median(subs["old"]), 3),
        "cpus": os.cpu_count(),
        "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    print(f"{'case':<22} {'old':>12} {'new':>12} {'new/old':>8}")
    for k, d in result["codec"].items():
        print(f"{k:<22} {d['old']:>12.0f} {d['new']:>12.0f} {d['new_vs_old']:>8.0%}")
    m = result["submit_median"]
    print(f"{'daemon submit/s':<22} {m['old']:>12.0f} {m['new']:>12.0f} {result['submit_new_vs_old']:>8.0%}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2))
    _plot(result, out.with_suffix(".png"))
    return 0


def _plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [*result["codec"], "daemon submit/s"]
    ratios = [d["new_vs_old"] for d in result["codec"].values()] + [result["submit_new_vs_old"]]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar(range(len(names)), ratios, color="tab:blue")
    ax.axhline(1.0, color="k", ls="--", label="old envelope (same run)")
    ax.axhline(0.9, color="grey", ls=":", label="-10%")
    ax.set_xticks(range(len(names)), names, fontsize=7)
    ax.set_ylabel("new / old")
    ax.set_title("wire envelope: new cost relative to the old one")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
