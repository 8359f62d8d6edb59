"""``connect()`` as a job calls it: the address from MALLEABLE_FS, the secret from MALLEABLE_TOKEN (or given as
str or bytes), and a one-line error when there is no address."""

from __future__ import annotations

import pytest
from conftest import TOKEN, close_checked


def _roundtrip(fs, path: str) -> bytes:
    with fs.open(path, "wb") as f:
        f.write(b"hello " + path.encode())
    with fs.open(path, "rb") as f:
        return f.read()


def test_token_as_str_or_bytes(dep2):
    """The secret as the environment gives it (str) or as bytes: both reach the file system."""
    from malleable.adhocfs import connect

    for token in (TOKEN, TOKEN.encode()):
        fs = connect(dep2.address, token=token, timeout=3.0)
        try:
            path = f"/tok-{type(token).__name__}"
            assert _roundtrip(fs, path) == f"hello {path}".encode()
        finally:
            close_checked(fs)


def test_address_and_secret_from_the_environment(dep2, monkeypatch):
    """What a job's rank does: connect() with no arguments (MALLEABLE_FS and MALLEABLE_TOKEN are set)."""
    from malleable.adhocfs import connect

    monkeypatch.setenv("MALLEABLE_FS", dep2.address)
    monkeypatch.setenv("MALLEABLE_TOKEN", TOKEN)
    fs = connect(timeout=3.0)
    try:
        assert fs.addr == dep2.address
        assert _roundtrip(fs, "/from-env") == b"hello /from-env"
    finally:
        close_checked(fs)


def test_wrong_secret_as_str_is_refused(dep2):
    from malleable.adhocfs import connect
    from malleable.errors import AuthError, ServerUnavailable

    fs = connect(dep2.address, token="not-the-secret", timeout=1.0)  # noqa: S106 - a wrong one on purpose
    try:
        with pytest.raises((AuthError, ServerUnavailable)):
            fs.listdir("/")
    finally:
        close_checked(fs)


def test_bad_arguments_are_one_line_errors(monkeypatch):
    from malleable.adhocfs import connect
    from malleable.errors import ConfigError

    monkeypatch.delenv("MALLEABLE_FS", raising=False)
    with pytest.raises(ConfigError) as err:
        connect()
    assert str(err.value) == (
        "adhocfs.connect: no address: pass connect('tcp://HOST:PORT') or set MALLEABLE_FS"
    )
    assert isinstance(err.value, ValueError)
    monkeypatch.setenv("MALLEABLE_FS", "127.0.0.1:5555")
    with pytest.raises(ConfigError, match=r"must be tcp://HOST:PORT .*got '127.0.0.1:5555'"):
        connect()
    with pytest.raises(ConfigError, match="empty token"):
        connect("tcp://127.0.0.1:5555", token="")
    with pytest.raises(TypeError, match="token must be str or bytes, got int"):
        connect("tcp://127.0.0.1:5555", token=1234)
