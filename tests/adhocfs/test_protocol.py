"""The adhocfs wire protocol: round trips and rejection of malformed or unauthenticated messages."""

from __future__ import annotations

import json

import pytest

from malleable._wire import MAGIC, pack_raw
from malleable.adhocfs import _protocol as P
from malleable.errors import AuthError, ProtocolError

TOKEN = b"secret"


@pytest.mark.parametrize(
    "msg",
    [
        P.Put(1, 2, 3, 4, b"abc"),
        P.Get(1, 2, 0, 10, 1),
        P.Data(True, b"xyz"),
        P.Ok(),
        P.Error("stale", "x"),
        P.DropBlocks(1, [3, 4], from_block=5, cut_block=4, cut_len=7),
        P.Open("/a", "w+", 4096),
        P.FileInfo(1, "/a", 10, 4096, 2, [[0, 0], [2, 1]], "ready", 3, {"0": [1]}, {"1": "tcp://x:1"}),
        P.Shrink([1, 2], "total"),
        P.DeclareRio("job", 12.5),
        P.Stats(),
        P.Fence(1, 2, 3),
    ],
)
def test_round_trip(msg):
    got, rid = P.decode(P.encode(msg, TOKEN, 42), TOKEN)
    assert rid == 42
    if hasattr(msg, "data"):
        assert bytes(got.data) == bytes(msg.data)
        assert {k: v for k, v in vars_(got).items() if k != "data"} == {
            k: v for k, v in vars_(msg).items() if k != "data"
        }
    else:
        assert got == msg


def vars_(m):
    return {f: getattr(m, f) for f in m.__dataclass_fields__}


def _frames(header, payloads=(), token=TOKEN):
    raw = json.dumps(dict(header, sizes=[len(p) for p in payloads])).encode()
    return pack_raw(raw, token, payloads)


def test_wrong_token_is_an_auth_error():
    with pytest.raises(AuthError):
        P.decode(P.encode(P.Stats(), b"other"), TOKEN)


@pytest.mark.parametrize(
    "header,payloads",
    [
        ({"v": 1, "type": "put", "fid": 1, "block": 2, "offset": 0}, [b"x"]),  # missing version
        ({"v": 1, "type": "put", "fid": 1, "block": 2, "offset": 0, "version": 1, "x": 1}, [b"x"]),  # extra
        ({"v": 1, "type": "put", "fid": -1, "block": 2, "offset": 0, "version": 1}, [b"x"]),  # negative
        ({"v": 1, "type": "put", "fid": True, "block": 2, "offset": 0, "version": 1}, [b"x"]),  # bool as int
        ({"v": 1, "type": "put", "fid": 1, "block": 2, "offset": 0, "version": 1}, []),  # no data
        ({"v": 1, "type": "stats"}, [b"x"]),  # unexpected data
        ({"v": 1, "type": "drop_blocks", "fid": 1, "blocks": [1, "2"]}, []),  # bad list item
        ({"v": 1, "type": "nonsense"}, []),  # unknown type
        ({"v": 2, "type": "stats"}, []),  # version
        ({"v": 1, "type": "declare_rio", "job": "j", "rio": -1.0}, []),  # negative rate
        ({"v": 1, "type": "stats", "id": "x"}, []),  # bad id
    ],
)
def test_malformed_rejected(header, payloads):
    with pytest.raises(ProtocolError):
        P.decode(_frames(header, payloads), TOKEN)


def test_expected_types_enforced():
    with pytest.raises(ProtocolError):
        P.decode(P.encode(P.Stats(), TOKEN), TOKEN, expect=(P.Ok,))


def test_truncated_and_bad_magic():
    with pytest.raises(ProtocolError):
        P.decode([MAGIC, b"{}"], TOKEN)
    frames = P.encode(P.Stats(), TOKEN)
    frames[0] = b"XXXX"
    with pytest.raises(ProtocolError):
        P.decode(frames, TOKEN)
