"""The metadata namespace over real SQLite, without sockets."""

from __future__ import annotations

import pytest

from malleable.adhocfs import _protocol as P
from malleable.adhocfs._namespace import Namespace, normalize
from malleable.adhocfs._placement import UNALLOCATED, intern_epoch
from malleable.adhocfs._rpc import Busy
from malleable.errors import FsError


@pytest.fixture
def ns(tmp_path):
    n = Namespace(str(tmp_path / "m.sqlite"), block_size=4096)
    eid, ep = intern_epoch({}, [1, 2])
    n.set_epochs(ep, eid)
    yield n
    n.close()


def h(ns, msg):
    return ns.handle(msg)[0]


def test_normalize():
    assert normalize("a/b/../c") == "/a/c"
    assert normalize("//x//") == "/x"
    for bad in ["", "a\0b", 3, "x" * 5000]:
        with pytest.raises(ValueError):
            normalize(bad)


def test_open_modes(ns):
    with pytest.raises(FileNotFoundError):
        h(ns, P.Open("/f", "r"))
    info = h(ns, P.Open("/f", "x"))
    assert info.size == 0 and info.block_size == 4096 and info.layout == [[0, UNALLOCATED]]
    h(ns, P.Extend(info.fid, 10, 1))
    with pytest.raises(FileExistsError):
        h(ns, P.Open("/f", "x"))
    assert h(ns, P.Open("/f", "r+")).fid == info.fid
    assert h(ns, P.Open("/f", "a")).fid == info.fid
    reply, actions = ns.handle(P.Open("/f", "w"))
    assert reply.fid != info.fid  # truncation: a fresh file id
    assert {a[1].fid for a in actions} == {info.fid} and all(isinstance(a[1], P.DropFile) for a in actions)
    with pytest.raises(ValueError):
        h(ns, P.Open("/f", "q"))
    with pytest.raises(FileNotFoundError):
        h(ns, P.Open("/nodir/f", "w"))
    h(ns, P.Mkdir("/d"))
    with pytest.raises(IsADirectoryError):
        h(ns, P.Open("/d", "r"))
    with pytest.raises(NotADirectoryError):
        h(ns, P.Open("/f/g", "w"))
    with pytest.raises(ValueError):
        h(ns, P.Open("/g", "w", block_size=100))


def test_extend_and_intervals(ns):
    info = h(ns, P.Open("/f", "w"))
    info = h(ns, P.Extend(info.fid, 5000, 2))
    assert info.hw == 2 and info.size == 5000 and info.layout == [[0, 0], [2, UNALLOCATED]]
    info = h(ns, P.Extend(info.fid, 5000, 12, first=10))  # a far write allocates only its range
    assert info.layout == [[0, 0], [2, UNALLOCATED], [10, 0], [12, UNALLOCATED]] and info.hw == 12
    eid, ep = intern_epoch(ns.epochs(), [1, 2, 3])  # an expansion
    ns.set_epochs(ep, eid)
    info = h(ns, P.Extend(info.fid, 9000, 14, first=2))  # the gap and the tail: new epoch
    assert info.layout == [[0, 0], [2, eid], [10, 0], [12, eid], [14, UNALLOCATED]]
    assert info.hw == 14 and info.size == 9000
    assert info.epochs == {"0": [1, 2], str(eid): [1, 2, 3]}
    info = h(ns, P.Extend(info.fid, 100, 1))  # never shrinks size or hw
    assert info.size == 9000 and info.hw == 14
    later = h(ns, P.Open("/g", "w"))
    later = h(ns, P.Extend(later.fid, 1, 1))
    assert later.layout == [[0, eid], [1, UNALLOCATED]]  # a new file records the new count


def test_set_size_cuts_blocks(ns):
    info = h(ns, P.Open("/f", "w"))
    h(ns, P.Extend(info.fid, 10000, 3))
    reply, actions = ns.handle(P.SetSize(info.fid, 5000))
    assert reply.size == 5000
    drop = actions[0][1]
    assert drop.from_block == 2 and drop.cut_block == 1 and drop.cut_len == 5000 - 4096
    assert {a[0] for a in actions} == {1, 2}


def test_directories(ns):
    h(ns, P.Mkdir("/a"))
    h(ns, P.Mkdir("/a/b"))
    h(ns, P.Open("/a/f", "w"))
    h(ns, P.Open("/a/b/g", "w"))
    assert h(ns, P.ListDir("/")).names == ["a"]
    assert h(ns, P.ListDir("/a")).names == ["b", "f"]
    with pytest.raises(NotADirectoryError):
        h(ns, P.ListDir("/a/f"))
    with pytest.raises(FileExistsError):
        h(ns, P.Mkdir("/a"))
    h(ns, P.Mkdir("/a", exist_ok=True))
    with pytest.raises(OSError):
        h(ns, P.Remove("/a"))  # not empty
    h(ns, P.Rename("/a", "/z"))
    assert h(ns, P.ListDir("/z/b")).names == ["g"]
    assert h(ns, P.Stat("/z/b/g")).is_dir is False
    with pytest.raises(FileNotFoundError):
        h(ns, P.Stat("/a/f"))
    with pytest.raises(ValueError):
        h(ns, P.Rename("/z", "/z/b/q"))
    h(ns, P.Extend(h(ns, P.Open("/z/h", "w")).fid, 10, 1))
    reply, actions = ns.handle(P.Rename("/z/f", "/z/h"))  # replaces a file
    assert actions and h(ns, P.ListDir("/z")).names == ["b", "h"]
    h(ns, P.Remove("/z/h"))
    with pytest.raises(PermissionError):
        h(ns, P.Remove("/"))


def test_failed_request_changes_nothing(ns):
    h(ns, P.Open("/f", "w"))
    before = ns.files()
    with pytest.raises(FileExistsError):
        h(ns, P.Open("/f", "x"))
    assert ns.files() == before


def test_busy_while_decommissioning(ns):
    info = h(ns, P.Open("/f", "w"))
    ns.db.execute("UPDATE files SET status='decommissioning' WHERE fid=?", (info.fid,))
    with pytest.raises(Busy):
        h(ns, P.Extend(info.fid, 10, 1))
    assert h(ns, P.GetLayout(info.fid)).status == "decommissioning"  # reads go on


def test_servers_register_and_no_servers(tmp_path):
    n = Namespace(str(tmp_path / "x.sqlite"))
    with pytest.raises(FsError):
        h(n, P.Open("/f", "w"))  # no data servers yet
    sids = h(n, P.AddServers(["h1", "h2"])).sids
    assert sids == [1, 2]
    h(n, P.Register(1, "tcp://h1:5", "h1", 99))
    assert [r["state"] for r in n.servers()] == ["up", "reserved"]
    with pytest.raises(ValueError):
        h(n, P.Register(7, "tcp://h:1", "h", 1))
    n.close()


def test_state_survives_reopen(tmp_path):
    n = Namespace(str(tmp_path / "p.sqlite"))
    eid, ep = intern_epoch({}, [1])
    n.set_epochs(ep, eid)
    fid = h(n, P.Open("/keep", "w")).fid
    n.close()
    n = Namespace(str(tmp_path / "p.sqlite"))
    assert h(n, P.Stat("/keep")).fid == fid and n.current_epoch() == eid
    n.close()
