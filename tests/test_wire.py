"""The shared wire envelope: every frame authenticated, replays and stale messages refused, nesting bounded before
JSON parsing, CURVE encryption between peers that hold the secret, and a daemon that survives hostile messages."""

from __future__ import annotations

import dataclasses
import json
import random
import time

import pytest
import zmq

from malleable import _sockets as S
from malleable import _wire as W
from malleable.errors import AuthError, ProtocolError, ReplayError

TOKEN = b"wire-test-secret"
V = (1,)
NESTED = b'{"v":1,"type":"status","x":' + b"[" * 100_000 + b"}"


def pair(window: float = 120.0, clock=time.time) -> tuple[W.Wire, W.Wire]:
    """A sender and a receiver with the same secret (separate sessions, as two processes would be)."""
    return W.Wire(TOKEN, window, clock), W.Wire(TOKEN, window, clock)


def test_round_trip_with_payloads():
    a, b = pair()
    frames = a.pack({"v": 1, "type": "put", "n": 3}, [b"abc", memoryview(b"defg"), b""])
    header, payloads = b.unpack(frames, V)
    assert header == {"v": 1, "type": "put", "n": 3, "sizes": [3, 4, 0]}
    assert [bytes(p) for p in payloads] == [b"abc", b"defg", b""]


@pytest.mark.parametrize("n", [1000, 300_000], ids=["small", "bulk"])  # HMAC alone; GMAC tags inside the HMAC
@pytest.mark.parametrize("where", ["header", "payload", "payload-swap", "seal-counter", "seal-time", "magic"])
def test_any_altered_frame_is_refused(where, n):
    a, b = pair()
    frames = a.pack({"v": 1, "type": "put", "fid": 1}, [b"A" * n, b"B" * 10])
    assert b.unpack(list(frames), V)[0]["fid"] == 1  # unaltered: accepted (once)
    frames = a.pack({"v": 1, "type": "put", "fid": 1}, [b"A" * n, b"B" * 10])
    if where == "header":
        frames[1] = frames[1].replace(b'"fid":1', b'"fid":2')
    elif where == "payload":
        frames[3] = b"A" * (n - 1) + b"X"
    elif where == "payload-swap":  # same bytes in total, moved between frames: lengths are in the MAC
        frames[3], frames[4] = b"A" * n + b"B" * 5, b"B" * 5
        frames[1] = frames[1].replace(f"[{n},10]".encode(), f"[{n + 5},5]".encode())
    elif where == "seal-counter":
        frames[2] = frames[2][:8] + (9).to_bytes(8, "big") + frames[2][16:]
    elif where == "seal-time":
        frames[2] = frames[2][:16] + b"\x00" * 8 + frames[2][24:]
    else:
        frames[0] = b"MLB1"
    with pytest.raises(ProtocolError if where == "magic" else AuthError, match="magic|not authenticated"):
        b.unpack(frames, V)


def test_bulk_payloads_swapped_are_refused():
    a, b = pair()
    one, two = b"A" * 100_000, b"B" * 100_000
    frames = a.pack({"v": 1, "type": "put"}, [one, two])
    frames[3], frames[4] = frames[4], frames[3]  # same sizes: only the order of the tags in the MAC tells them apart
    with pytest.raises(AuthError, match="not authenticated"):
        b.unpack(frames, V)


def test_kept_tags_send_a_received_frame_back_without_hashing_it_again():
    """A data server keeps the payload tag of each frame it receives and reuses it when it sends that frame back:
    the frame goes out under the tag it arrived with. Changed in place after receipt, it is then refused by its
    reader (which is why only a process that never changes received frames keeps tags); a wire that keeps no tags
    hashes it anew and its reader accepts the changed bytes."""
    client, server, reader, plain = W.Wire(TOKEN), W.Wire(TOKEN), W.Wire(TOKEN), W.Wire(TOKEN)
    server.keep_tags = True
    block = random.randbytes(300_000)
    ctx = zmq.Context()
    tx, rx = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    try:
        rx.bind("inproc://kept-tags")
        tx.connect("inproc://kept-tags")
        tx.send_multipart(client.pack({"v": 1, "type": "put"}, [block]))
        assert rx.poll(10_000)
        frames = rx.recv_multipart(copy=False)
        _, (got,) = server.unpack(frames, V)
        assert bytes(got) == block

        def read_back(wire: W.Wire) -> bytes:
            _, (data,) = reader.unpack(wire.pack({"v": 1, "type": "data"}, [got[0:len(block)]]), V)
            return bytes(data)

        assert read_back(server) == block
        memoryview(frames[3])[0] ^= 0xFF  # changed in place, after its tag was kept
        with pytest.raises(AuthError, match="not authenticated"):
            read_back(server)
        assert read_back(plain)[0] == block[0] ^ 0xFF
    finally:
        tx.close(0)
        rx.close(0)
        ctx.term()


def test_wrong_secret_refused():
    frames = W.Wire(b"other").pack({"v": 1, "type": "x"})
    with pytest.raises(AuthError, match="shared secret"):
        W.Wire(TOKEN).unpack(frames, V)


def test_replay_refused_and_reordering_accepted():
    a, b = pair()
    msgs = [a.pack({"v": 1, "type": "x", "i": i}) for i in range(50)]
    order = list(range(50))
    random.Random(3).shuffle(order)
    for i in order:  # out of order but each once: all accepted
        assert b.unpack(msgs[i], V)[0]["i"] == i
    for i in (0, 17, 49):
        with pytest.raises(ReplayError, match="replayed"):
            b.unpack(msgs[i], V)
    other = W.Wire(TOKEN)  # another receiver (another process) has not seen them: accepts once
    assert other.unpack(msgs[5], V)[0]["i"] == 5


def test_counter_far_behind_is_refused():
    a, b = pair()
    first = a.pack({"v": 1, "type": "x"})
    for _ in range(W.REPLAY_SPAN):
        a.pack({"v": 1, "type": "x"})  # counters spent elsewhere
    b.unpack(a.pack({"v": 1, "type": "x"}), V)
    with pytest.raises(ReplayError, match="too old"):
        b.unpack(first, V)


def test_time_window_and_receiver_start():
    now = [1_000_000.0]
    a, b = pair(window=60, clock=lambda: now[0])
    late = a.pack({"v": 1, "type": "x"})
    now[0] += 61
    with pytest.raises(ReplayError, match="window"):
        b.unpack(late, V)
    now[0] += 1000  # a receiver restarted later: a message captured before its start (in the window) is refused
    captured = a.pack({"v": 1, "type": "x"})
    now[0] += 35
    fresh = W.Wire(TOKEN, 60, lambda: now[0])
    with pytest.raises(ReplayError, match="before this receiver started"):
        fresh.unpack(captured, V)
    assert fresh.unpack(a.pack({"v": 1, "type": "x"}), V)[0]["type"] == "x"


def test_silent_sessions_are_forgotten():
    now = [5_000.0]
    b = W.Wire(TOKEN, 10, lambda: now[0])
    senders = [W.Wire(TOKEN, 10, lambda: now[0]) for _ in range(100)]
    for s in senders:
        b.unpack(s.pack({"v": 1, "type": "x"}), V)
    assert len(b.guard) == 100
    now[0] += 11
    a = W.Wire(TOKEN, 10, lambda: now[0])
    for _ in range(4096):
        b.unpack(a.pack({"v": 1, "type": "x"}), V)
    assert len(b.guard) == 1


def test_nested_brackets_refused_before_parsing():
    a, b = pair()
    with pytest.raises(ProtocolError, match="nested deeper"):
        b.unpack(a.pack_raw(NESTED), V)
    deep_ok = {"v": 1, "type": "x", "d": json.loads("[" * 60 + "]" * 60), "s": "[[[[{{{{" * 100}
    assert b.unpack(a.pack(deep_ok), V)[0]["s"] == "[[[[{{{{" * 100  # brackets in strings do not count
    for raw in (b'{"v":1,"type":"x","d":' + b"[" * 80 + b"]" * 80 + b"}", b'{"v":1,"type":"x","d":[[[}'):
        with pytest.raises(ProtocolError):
            b.unpack(a.pack_raw(raw), V)


def test_limits_before_authentication():
    a, b = pair()
    with pytest.raises(ProtocolError, match="header too large"):
        b.unpack([W.MAGIC, b" " * (W.MAX_HEADER + 1), b"x" * W.SEAL_SIZE], V)
    with pytest.raises(ProtocolError, match="too many frames"):
        b.unpack([W.MAGIC, b"{}", b"x" * W.SEAL_SIZE] + [b""] * W.MAX_FRAMES, V)
    with pytest.raises(AuthError, match="seal"):
        b.unpack([W.MAGIC, b"{}", b"short"], V)
    with pytest.raises(ProtocolError, match="truncated"):
        b.unpack([W.MAGIC, b"{}"], V)


def test_fuzzed_messages_never_get_through():
    """Random mutations of frames (header, seal and payload bytes, frame order and count): each one is refused
    with a ProtocolError (AuthError included), never accepted altered and never another exception."""
    rng = random.Random(20261123)
    a, b = pair()
    refused = 0
    for i in range(3000):
        payloads = [rng.randbytes(rng.randrange(0, 300)) for _ in range(rng.randrange(0, 4))]
        frames = [bytes(f) for f in a.pack({"v": 1, "type": "put", "i": i}, payloads)]
        kind = rng.randrange(5)
        if kind == 0 and payloads:  # flip a bit of a payload
            k = rng.randrange(3, len(frames))
            f = bytearray(frames[k] or b"\x00")
            f[rng.randrange(len(f))] ^= 1 << rng.randrange(8)
            frames[k] = bytes(f)
        elif kind == 1:  # flip a bit anywhere
            k = rng.randrange(len(frames))
            f = bytearray(frames[k] or b"\x00")
            f[rng.randrange(len(f))] ^= 1 << rng.randrange(8)
            frames[k] = bytes(f)
        elif kind == 2:  # drop or duplicate a frame
            k = rng.randrange(len(frames))
            frames = frames[:k] + frames[k + 1 :] if rng.random() < 0.5 else frames[:k] + [frames[k]] + frames[k:]
        elif kind == 3:  # truncate or extend a frame
            k = rng.randrange(len(frames))
            frames[k] = frames[k][: rng.randrange(len(frames[k]) + 1)] if rng.random() < 0.5 else frames[k] + b"\x00"
        else:  # replace the payloads by others with the same sizes
            if not any(payloads):
                continue
            frames[3:] = [rng.randbytes(len(p)) for p in payloads]
        try:
            header, got = b.unpack(frames, V)
        except ProtocolError:
            refused += 1
            continue
        # a mutation that changed nothing (e.g. truncating to the full length) must give back the original
        assert header["i"] == i and [bytes(p) for p in got] == payloads
    assert refused > 2000


def test_curve_encryption_between_holders_of_the_secret():
    ctx = zmq.Context()
    socks = []

    def sock(kind, token, server):
        s = ctx.socket(kind)
        s.setsockopt(zmq.LINGER, 0)
        socks.append(s)
        assert S.secure_socket(s, token, server=server, encrypt=token is not None) is (token is not None)
        return s

    try:
        srv = sock(zmq.ROUTER, TOKEN, True)
        port = srv.bind_to_random_port("tcp://127.0.0.1")
        clients = {b"bad": sock(zmq.DEALER, b"not-the-secret", False), b"plain": sock(zmq.DEALER, None, False),
                   b"good": sock(zmq.DEALER, TOKEN, False)}
        for body, s in clients.items():
            s.connect(f"tcp://127.0.0.1:{port}")
            s.send_multipart([b"", body])
        assert srv.poll(5000)
        assert srv.recv_multipart()[-1] == b"good"
        assert not srv.poll(500), "a peer without the secret got a message through"
    finally:
        for s in socks:
            s.close(0)
        ctx.term()


def test_encryption_setting():
    assert S.encryption_wanted({"MALLEABLE_ENCRYPT": "1"}) and S.encryption_wanted({"MALLEABLE_ENCRYPT": "yes"})
    assert not S.encryption_wanted({}) and not S.encryption_wanted({"MALLEABLE_ENCRYPT": "0"})
    from malleable.errors import ConfigError

    with pytest.raises(ConfigError, match="MALLEABLE_ENCRYPT"):
        S.encryption_wanted({"MALLEABLE_ENCRYPT": "maybe"})


def test_per_thread_sessions_and_fresh_after_fork():
    import os
    import threading

    mine = W.shared(TOKEN)
    assert W.shared(TOKEN) is mine
    other: list[W.Wire] = []
    t = threading.Thread(target=lambda: other.append(W.shared(TOKEN)))
    t.start()
    t.join()
    assert other[0].session != mine.session
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(w, W.shared(TOKEN).session)
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(r, 8) != mine.session
    os.close(r)
    os.close(w)


# ------------------------------------------------------------------------------------------- the controller daemon
def test_controller_survives_nested_brackets_and_refuses_replays(tmp_path, monkeypatch):
    """The nested-bracket header used to kill the daemon (RecursionError); a captured submit replayed used to
    start the job again."""
    from malleable.controller.daemon import _protocol as P
    from malleable.controller.daemon._hostpool import HostPool
    from tests.controller._daemon_util import TOKEN as CTL
    from tests.controller._daemon_util import daemon_thread

    monkeypatch.setenv("MALLEABLE_TOKEN", CTL)
    token = CTL.encode()
    with daemon_thread(tmp_path / "ctl.sqlite", HostPool.local(1), tick=0.5) as (d, c):
        ctx = zmq.Context()
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(c.address)
        peer = W.Wire(token)  # an outside client: its own session
        try:
            s.send_multipart([b"", *peer.pack_raw(NESTED)])
            assert s.poll(10_000)
            reply, _ = P.decode(s.recv_multipart()[1:], token)
            assert isinstance(reply, P.Error) and "nested" in reply.msg
            submit = P.Submit("r", ["true"], 1, 1, 1, False, 0.0, str(tmp_path / "o"), "", str(tmp_path), {})
            header = {"v": P.VERSION, "type": "submit", "id": 9}
            header.update({f.name: getattr(submit, f.name) for f in dataclasses.fields(submit)})
            captured = peer.pack(header)
            answers = []
            for _ in range(2):  # the original, then the same frames again
                s.send_multipart([b"", *captured])
                assert s.poll(10_000)
                answers.append(P.decode(s.recv_multipart()[1:], token)[0])
            assert isinstance(answers[0], P.Submitted)
            assert isinstance(answers[1], P.Error) and "replayed" in answers[1].msg
            assert [r["id"] for r in c.rows(P.History(0))] == [answers[0].job_id]
            assert c.status()["handled"] >= 1  # still serving
        finally:
            s.close(0)
            ctx.term()
