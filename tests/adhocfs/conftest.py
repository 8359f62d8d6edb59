"""Fixtures of the adhocfs tests: a shared secret, local deployments, clients whose sockets must all close."""

from __future__ import annotations

import os
import threading

import pytest

TOKEN = "adhocfs-test-token"


@pytest.fixture(scope="session", autouse=True)
def shared_secret():
    """Every server and client of these tests uses the same MALLEABLE_TOKEN (servers inherit it)."""
    old = os.environ.get("MALLEABLE_TOKEN")
    os.environ["MALLEABLE_TOKEN"] = TOKEN
    yield TOKEN.encode()
    if old is None:
        os.environ.pop("MALLEABLE_TOKEN", None)
    else:
        os.environ["MALLEABLE_TOKEN"] = old


def close_checked(fs, timeout: float = 5.0) -> None:
    """Close a FileSystem; fail if its zmq context does not terminate (open sockets likely remain)."""
    t = threading.Thread(target=fs.close, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        pytest.fail("zmq context did not terminate: open sockets likely remain")


@pytest.fixture(scope="module")
def dep2(tmp_path_factory):
    """A local instance with 2 data servers backed by a directory (shared by a module's tests)."""
    from malleable.adhocfs import start_fs

    root = tmp_path_factory.mktemp("fs2")
    dep = start_fs("127.0.0.1", ["127.0.0.1", "127.0.0.1"], dir=str(root / "data"), state=str(root / "state"))
    yield dep
    dep.stop()


@pytest.fixture
def fs(dep2):
    """A client of ``dep2``; closing it must release every socket."""
    from malleable.adhocfs import connect

    client = connect(dep2.address, timeout=3.0)
    yield client
    close_checked(client)
