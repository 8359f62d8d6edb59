"""Contract tests run on every block store (zict style), plus DirStore persistence."""

from __future__ import annotations

import pytest

from malleable.adhocfs._dirstore import DirStore
from malleable.adhocfs._store import MemoryStore


@pytest.fixture(params=["memory", "dir"])
def store(request, tmp_path):
    s = MemoryStore() if request.param == "memory" else DirStore(tmp_path / "blocks")
    yield s
    s.close()


def check_mapping(s):
    s[(1, 0)] = b"hello"
    s[(1, 3)] = bytearray(b"xy")
    s[(2, 0)] = b"z"
    assert len(s) == 3 and (1, 3) in s and (9, 9) not in s
    assert sorted(s) == [(1, 0), (1, 3), (2, 0)]
    assert s.nbytes == 8
    del s[(1, 3)]
    assert s.blocks_of(1) == [0] and s.files() == [1, 2] and s.nbytes == 6
    with pytest.raises(KeyError):
        del s[(1, 3)]


def check_partial_writes(s):
    s.write((5, 0), 4, b"ab")
    assert bytes(s.read((5, 0), 0, 100)) == b"\0\0\0\0ab"
    s.write((5, 0), 0, b"XYZ")
    s.write((5, 0), 5, b"QRS")
    assert bytes(s.read((5, 0), 0, 100)) == b"XYZ\0aQRS"
    assert bytes(s.read((5, 0), 6, 1)) == b"R"
    assert s.read((5, 1), 0, 10) is None
    s.cut((5, 0), 3)
    assert bytes(s.read((5, 0), 0, 100)) == b"XYZ"
    assert s.nbytes == 3


def check_drop_file(s):
    for b in range(4):
        s.write((7, b), 0, b"x" * 10)
    s.write((8, 0), 0, b"y")
    assert s.drop_file(7) == 4
    assert s.blocks_of(7) == [] and len(s) == 1 and s.nbytes == 1


def check_views_keep_their_bytes(s):
    """A view handed out by read() (a zero-copy reply may still be sending it) survives later writes."""
    s.write((1, 0), 0, b"a" * 10)
    v = s.read((1, 0), 0, 10)
    s.write((1, 0), 5, b"b" * 10)  # grows the block while the view is out: no BufferError
    assert bytes(v) == b"a" * 10
    v2 = s.read((1, 0), 0, 15)
    s.write((1, 0), 2, b"c")
    assert bytes(v2) == b"aaaaa" + b"b" * 10
    assert bytes(s.read((1, 0), 0, 15)) == b"aacaa" + b"b" * 10
    s.write((1, 0), 0, b"z" * 20)  # a whole-block overwrite replaces it
    assert bytes(s.read((1, 0), 0, 30)) == b"z" * 20 and bytes(v2) == b"aaaaa" + b"b" * 10


@pytest.mark.parametrize("check", [check_mapping, check_partial_writes, check_drop_file, check_views_keep_their_bytes])
def test_contract(store, check):
    check(store)


def test_dirstore_survives_reopen(tmp_path):
    with DirStore(tmp_path / "d") as s:
        s.write((1, 0), 0, b"abc")
        s.write((1, 0), 5, b"de")
        s.write((1, 2), 0, b"q" * 1000)
        s.write((3, 1), 0, b"gone")
        s.drop_file(3)
        s.cut((1, 2), 10)
    with DirStore(tmp_path / "d") as s:
        assert sorted(s) == [(1, 0), (1, 2)]
        assert bytes(s[(1, 0)]) == b"abc\0\0de"
        assert bytes(s[(1, 2)]) == b"q" * 10
        assert s.nbytes == 17
