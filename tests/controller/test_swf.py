"""SWF reading: header machine size, field rules, skipped jobs, malformed lines (with line numbers), gzip."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from malleable.controller import read_swf, synthetic, write_swf
from malleable.errors import TraceError

GOOD = """\
; Version: 2.2
; MaxNodes: 64
; MaxProcs: 128
;
1 0 5 100 4 -1 -1 8 200 -1 1 1 1 -1 -1 1 -1 -1
2 10 0 50 16 -1 -1 -1 -1 -1 1 1 1 -1 -1 1 -1 -1
3 20.5 0 300 2 -1 -1 2 120 -1 1 1 1 -1 -1 1 -1 -1
4 30 0 -1 2 -1 -1 2 120 -1 0 1 1 -1 -1 1 -1 -1
5 40 0 10 -1 -1 -1 -1 60 -1 1 1 1 -1 -1 1 -1 -1
6 50 0 10 200 -1 -1 200 60 -1 1 1 1 -1 -1 1 -1 -1
7 5 0 10 1 -1 -1 1 60 -1 1 1 1 -1 -1 1 -1 -1
"""


def write(tmp_path, text, name="t.swf"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_good_file_rules(tmp_path):
    w = read_swf(write(tmp_path, GOOD))
    assert w.machine == 128                          # MaxProcs wins over MaxNodes
    assert list(w.ids) == [1, 7, 2, 3]               # sorted by submit (7 submitted at 5)
    assert list(w.procs) == [8, 1, 16, 2]            # field 8 if > 0, else field 5
    assert list(w.run) == [100, 10, 50, 300]
    assert list(w.estimate) == [200, 60, 50, 300]    # field 9; missing -> run time; smaller -> raised to run
    assert list(w.submit) == [0, 5, 10, 20.5]
    assert w.skipped == {"run<0": 1, "procs<=0": 1, "procs>machine": 1}
    assert w.malformed == 0 and w.n_skipped == 3


def test_machine_from_maxnodes_then_option(tmp_path):
    body = "1 0 0 10 4 -1 -1 4 20 -1 1 1 1 -1 -1 1 -1 -1\n"
    assert read_swf(write(tmp_path, "; MaxNodes: 32\n" + body)).machine == 32
    assert read_swf(write(tmp_path, body), procs=16).machine == 16
    with pytest.raises(TraceError, match="--procs"):
        read_swf(write(tmp_path, body))


def test_malformed_lines_skipped_and_counted(tmp_path, caplog):
    text = GOOD + "8 60 0 10 1 -1 -1 1\n9 70 0 ten 1 -1 -1 1 60 -1 1 1 1 -1 -1 1 -1 -1\n"
    w = read_swf(write(tmp_path, text))
    assert w.malformed == 2 and len(w) == 4
    assert "t.swf:12: malformed SWF record (expected 18 fields, found 8)" in caplog.text
    assert "t.swf:13: malformed SWF record (could not convert" in caplog.text


def test_strict_fails_with_line_number(tmp_path):
    text = GOOD + "9 70 0 ten 1 -1 -1 1 60 -1 1 1 1 -1 -1 1 -1 -1\n"
    with pytest.raises(TraceError, match=r"t\.swf:12: malformed SWF record .*could not convert"):
        read_swf(write(tmp_path, text), strict=True)


def test_gzip_and_limit(tmp_path):
    p = tmp_path / "t.swf.gz"
    with gzip.open(p, "wt") as f:
        f.write(GOOD)
    w = read_swf(p, limit=3)
    assert list(w.ids) == [1, 2, 3]
    assert read_swf(p).machine == 128


def test_missing_file_and_binary_garbage(tmp_path):
    with pytest.raises(TraceError, match="cannot open"):
        read_swf(tmp_path / "nope.swf")
    p = tmp_path / "bad.gz"
    p.write_bytes(b"\x1f\x8b\x08garbage")
    with pytest.raises(TraceError, match="read error"):
        read_swf(p, procs=4)


def test_round_trip_synthetic(tmp_path):
    w = synthetic(500, machine=64, load=0.8, seed=3)
    write_swf(w, tmp_path / "s.swf.gz")
    r = read_swf(tmp_path / "s.swf.gz")
    assert r.machine == 64 and len(r) == 500
    for a, b in ((w.submit, r.submit), (w.run, r.run), (w.estimate, r.estimate), (w.procs, r.procs)):
        assert np.array_equal(a, b)


def test_synthetic_is_seeded_and_hits_the_load():
    a = synthetic(20000, machine=128, load=0.95, seed=1)
    b = synthetic(20000, machine=128, load=0.95, seed=1)
    assert np.array_equal(a.submit, b.submit) and np.array_equal(a.procs, b.procs)
    assert not np.array_equal(a.submit, synthetic(20000, machine=128, load=0.95, seed=2).submit)
    assert 0.85 < a.offered_load() < 1.05
    assert a.procs.min() >= 1 and a.procs.max() <= 128
    assert np.all(a.estimate >= a.run) and np.all(np.diff(a.submit) >= 0)
