"""Administrative Python API of a running adhocfs: expand (commission), shrink (decommission), wait for a
change, resolve ``HOST[:PORT]`` server specs. The CLI and the controller call these.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

from malleable.adhocfs._deploy import MetaClient, start_data_servers
from malleable.adhocfs._protocol import Change, Check, CheckReply, Expand, Lose, Shrink, StopServers
from malleable.errors import ConfigError, FsError

__all__ = ["check_fs", "expand_fs", "lose_fs", "resolve_servers", "shrink_fs", "wait_change"]

log = logging.getLogger(__name__)


def resolve_servers(
    addr: str, specs: Sequence[str], token: bytes | None = None, states: Sequence[str] = ("active",)
) -> list[int]:
    """Server ids for specs ``sid``, ``HOST`` (every server on it) or ``HOST:PORT``, among servers in ``states``.

    Raises:
        ConfigError: a spec matches no such server.
    """
    with MetaClient(addr, token) as mc:
        rows = [s for s in mc.status().servers if s["state"] in states]
    out: list[int] = []
    for spec in specs:
        if spec.isdigit():
            hits = [r["sid"] for r in rows if r["sid"] == int(spec)]
        elif ":" in spec:
            hits = [r["sid"] for r in rows if r["addr"].removeprefix("tcp://") == spec]
        else:
            hits = [r["sid"] for r in rows if r["host"] == spec]
        if not hits:
            raise ConfigError(f"no {'/'.join(states)} data server matches {spec!r}")
        out += [h for h in hits if h not in out]
    return out


def wait_change(
    addr: str,
    change_id: int | None,
    timeout: float = 600.0,
    token: bytes | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Poll the metadata server until change ``change_id`` is no longer running; returns its final info.

    Raises:
        FsError: timeout.
    """
    deadline = time.monotonic() + timeout
    with MetaClient(addr, token) as mc:
        while True:
            ch = mc.status().change or {}
            if progress:
                progress(ch)
            if change_id is None or (ch.get("id") == change_id and ch.get("state") != "running"):
                return ch
            if time.monotonic() > deadline:
                raise FsError(f"change {change_id} still running after {timeout:g} s: {ch}")
            time.sleep(0.05)


def expand_fs(
    addr: str,
    hosts: Sequence[str],
    dir: str | None = None,
    rebalance: bool = False,
    rate: float = 0.0,
    state: str | None = None,
    launcher: str | None = None,
    token: bytes | None = None,
    wait: bool = True,
    capacity: int = 0,
    env: dict[str, str] | None = None,
) -> tuple[dict[int, tuple[str, str]], dict[str, Any], dict[str, Any]]:
    """Start data servers on ``hosts`` and commission them (a new placement epoch; nothing moves unless
    ``rebalance``). I/O continues meanwhile; files show ``commissioning``. ``env`` is the new servers'
    environment (default: this process's; the controller passes a job file system's secret and tag). Their logs
    go in ``state``; by default the metadata server's state directory when it is on this host (removed with the
    file system), else a new temporary directory.

    Returns:
        ``({sid: (host, address)}, {name: process}, change info)``.
    """
    state = state or _log_dir(addr, token)
    try:
        servers, procs = start_data_servers(addr, list(hosts), state, dir, launcher, token, capacity=capacity,
                                            env=env)
    except BaseException:
        with MetaClient(addr, token) as mc:
            mc.call(Expand([]))  # end the commissioning state
        raise
    try:
        with MetaClient(addr, token) as mc:
            reply = mc.call(Expand(sorted(servers), rebalance, float(rate)))
    except BaseException:  # refused (e.g. a shrink is running): stop what was started, end commissioning
        with MetaClient(addr, token) as mc:
            mc.call(Expand([]))
            mc.call(StopServers(sorted(servers)))
        for p in procs.values():
            p.wait(10)
        raise
    assert isinstance(reply, Change)
    info = reply.info
    if wait and info.get("state") == "running":
        info = wait_change(addr, info.get("id"), token=token)
    log.info("expanded %s with %s: %s", addr, sorted(servers), info)
    return servers, procs, info


def _log_dir(addr: str, token: bytes | None) -> str:
    """Where new data servers write their logs: the metadata server's state directory when it is on this host
    (removed with the file system), else a new temporary directory."""
    with MetaClient(addr, token) as mc:
        st = mc.status()
    if st.state and os.path.isfile(os.path.join(st.state, "meta.sqlite")):
        return st.state
    return tempfile.mkdtemp(prefix="malleable-fs-expand-")


def shrink_fs(
    addr: str,
    sids: Sequence[int],
    mode: str = "partial",
    rate: float = 0.0,
    wait: bool = True,
    timeout: float = 600.0,
    token: bytes | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Decommission data servers ``sids`` with ``partial`` or ``total`` redistribution.

    Returns:
        The change info (``state`` done or rolled_back when waited for).

    Raises:
        FsError: the shrink was rolled back (with the reason), or did not finish in time.
    """
    with MetaClient(addr, token) as mc:
        reply = mc.call(Shrink(list(sids), mode, float(rate)))
    assert isinstance(reply, Change)
    info = reply.info
    if wait and info.get("state") == "running":
        info = wait_change(addr, info.get("id"), timeout, token, progress)
    if info.get("state") == "rolled_back":
        raise FsError(f"shrink of {list(sids)} rolled back (nothing lost): {info.get('error')}")
    return info


def lose_fs(
    addr: str, sids: Sequence[int], wait: bool = False, timeout: float = 600.0, token: bytes | None = None
) -> dict[str, Any]:
    """Declare dead data servers ``sids`` lost: they leave every layout at once, blocks with another copy are
    copied again in the background (``wait`` for it), written blocks without one mark their files damaged.

    Raises:
        FsError: a server still answers (stop it, or shrink it instead), or a change is in progress.
    """
    with MetaClient(addr, token) as mc:
        reply = mc.call(Lose(list(sids)))
    assert isinstance(reply, Change)
    info = reply.info
    if wait and info.get("state") == "running":
        info = wait_change(addr, info.get("id"), timeout, token)
    return info


def check_fs(addr: str, repair: bool = False, token: bytes | None = None, timeout: float = 60.0) -> CheckReply:
    """Files with damaged (lost), missing (no live copy, not yet recorded) or under-replicated blocks; with
    ``repair`` also start re-copying and recording (see the reply's ``change``)."""
    with MetaClient(addr, token, timeout) as mc:
        reply = mc.call(Check(repair))
    assert isinstance(reply, CheckReply)
    return reply
