"""Slurm host lists through python-hostlist (the host-list module of NSC, as used by Slurm sites' own tools):
expand ``node[1-4,7],gpu[01-02]`` into host names, and compress names back, sorted the way Slurm prints them
(``n[9-10]``). This module only maps its errors into malleable's: a bad list is a :class:`ConfigError`."""

from __future__ import annotations

from collections.abc import Iterable

from malleable.errors import ConfigError

__all__ = ["compress_hostlist", "expand_hostlist"]


def expand_hostlist(text: str) -> list[str]:
    """Host names of a Slurm host list, in order, duplicates kept (a hostfile's repeated names are slots).

    ``node[1-4,7]`` gives node1..node4, node7; zero padding is kept (``n[08-10]`` gives n08, n09, n10);
    several groups multiply (``r[1-2]n[1-2]`` gives r1n1, r1n2, r2n1, r2n2); commas outside brackets
    separate items.

    Raises:
        ConfigError: unbalanced brackets, a bad, backwards or too large range, or a list that names no host.
    """
    import hostlist  # here: launching a job on this host needs no host list

    if not isinstance(text, str):
        raise TypeError(f"host list must be a string, got {type(text).__name__}")
    try:
        hosts = hostlist.expand_hostlist(text, allow_duplicates=True)
    except hostlist.BadHostlist as e:
        raise ConfigError(f"bad host list {text!r}: {e}") from None
    if not hosts:
        raise ConfigError(f"host list {text!r} names no hosts")
    return hosts


def compress_hostlist(hosts: Iterable[str]) -> str:
    """The Slurm form of ``hosts``, as squeue prints it: sorted by prefix then number, one bracket per prefix
    (``n[9-10]``, ``local[1-2]``, ``a,node[1-3,7]``), zero padding kept (``n[08-10]``), each name once.

    Raises:
        ConfigError: a name that cannot be part of a host list (brackets or commas in it).
    """
    import hostlist

    try:
        return str(hostlist.collect_hostlist(list(hosts)))
    except hostlist.BadHostlist as e:
        raise ConfigError(f"cannot write these names as a host list: {e}") from None
