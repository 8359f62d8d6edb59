"""Slurm host lists: expand ``node[1-4,7],gpu[01-02]`` into host names, and compress names back, sorted the way
Slurm prints them (``n[9-10]``)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from malleable.errors import ConfigError

__all__ = ["compress_hostlist", "expand_hostlist", "sort_key"]

MAX_HOSTS = 1 << 16  # refuse lists that would expand to more hosts than any allocation has


def _split_top(text: str) -> list[str]:
    """Split on commas outside brackets."""
    out, depth, cur = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ConfigError(f"bad host list {text!r}: unbalanced ']'")
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise ConfigError(f"bad host list {text!r}: unbalanced '['")
    out.append("".join(cur))
    return [s.strip() for s in out if s.strip()]


def _expand_range(spec: str, whole: str) -> list[str]:
    out: list[str] = []
    for part in spec.split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ConfigError(f"bad host list {whole!r}: bad range {part!r}")
        if not sep:
            out.append(lo)
            continue
        a, b = int(lo), int(hi)
        if b < a:
            raise ConfigError(f"bad host list {whole!r}: range {part!r} runs backwards")
        if b - a >= MAX_HOSTS:
            raise ConfigError(f"bad host list {whole!r}: range {part!r} is too large")
        width = len(lo) if lo.startswith("0") and len(lo) > 1 else 0
        out.extend(str(i).zfill(width) for i in range(a, b + 1))
    return out


def _expand_one(item: str, whole: str) -> list[str]:
    m = re.search(r"\[([^\[\]]*)\]", item)
    if m is None:
        if "[" in item or "]" in item:
            raise ConfigError(f"bad host list {whole!r}: stray bracket in {item!r}")
        return [item]
    head, tail = item[:m.start()], item[m.end():]
    out: list[str] = []
    for n in _expand_range(m.group(1), whole):
        out.extend(_expand_one(head + n + tail, whole))  # several bracket groups: node[1-2]-ib[0-1]
        if len(out) > MAX_HOSTS:
            raise ConfigError(f"bad host list {whole!r}: more than {MAX_HOSTS} hosts")
    return out


def expand_hostlist(text: str) -> list[str]:
    """Host names of a Slurm host list, in order, duplicates kept.

    ``node[1-4,7]`` gives node1..node4, node7; zero padding is kept (``n[08-10]`` gives n08, n09, n10);
    several groups multiply (``r[1-2]n[1-2]`` gives r1n1, r1n2, r2n1, r2n2); commas outside brackets
    separate items.

    Raises:
        ConfigError: unbalanced brackets, a bad or backwards range, or an empty list.
    """
    if not isinstance(text, str):
        raise TypeError(f"host list must be a string, got {type(text).__name__}")
    hosts: list[str] = []
    for item in _split_top(text):
        hosts.extend(_expand_one(item, text))
    if not hosts:
        raise ConfigError(f"host list {text!r} names no hosts")
    return hosts


def _split_num(host: str) -> tuple[str, str]:
    """``(prefix, trailing digits)`` of a host name (``("node", "07")``; ``(host, "")`` without digits)."""
    m = re.fullmatch(r"(.*?)(\d+)", host)
    return (m.group(1), m.group(2)) if m else (host, "")


def sort_key(host: str) -> tuple[str, int, int, str]:
    """Slurm's host order: by prefix, then by number (``n9`` before ``n10``), names without a number first."""
    prefix, num = _split_num(host)
    return (prefix, 1, int(num), num) if num else (prefix, 0, 0, "")


def compress_hostlist(hosts: Iterable[str], sort: bool = True) -> str:
    """The Slurm form of ``hosts``, as squeue prints it: ``n[9-10]``, ``local[1-2]``, ``a,node[1-3,7]``.

    With ``sort`` (the default) the names are put in Slurm's order first (:func:`sort_key`), so one prefix
    gives one bracket; without it the order is kept and only neighbours of one prefix are merged
    (``local2,local1`` gives ``local[2,1]``). Zero padding is kept (``n[08-10]``). Duplicates are kept.
    ``expand_hostlist(compress_hostlist(h, sort=False)) == list(h)`` and
    ``expand_hostlist(compress_hostlist(h)) == sorted(h, key=sort_key)`` for names without brackets or commas.
    """
    names = sorted(hosts, key=sort_key) if sort else list(hosts)
    groups: list[tuple[str, list[str]]] = []   # (prefix, numbers); numbers == [] for a name without digits
    for h in names:
        prefix, num = _split_num(h)
        if num and groups and groups[-1][0] == prefix and groups[-1][1]:
            groups[-1][1].append(num)
        else:
            groups.append((prefix, [num] if num else []))
    parts = []
    for prefix, nums in groups:
        if not nums:
            parts.append(prefix)
        elif len(nums) == 1:
            parts.append(prefix + nums[0])
        else:
            parts.append(f"{prefix}[{_ranges(nums)}]")
    return ",".join(parts)


def _next_in_range(lo: str, prev: str, cur: str) -> bool:
    """Does ``cur`` continue the range ``lo-prev`` so that expanding the range gives it back?"""
    i = int(prev) + 1
    padded = lo.startswith("0") and len(lo) > 1          # the rule of _expand_range
    return int(cur) == i and cur == (str(i).zfill(len(lo)) if padded else str(i))


def _ranges(nums: list[str]) -> str:
    out: list[str] = []
    i = 0
    while i < len(nums):
        j = i
        while j + 1 < len(nums) and _next_in_range(nums[i], nums[j], nums[j + 1]):
            j += 1
        out.append(nums[i] if i == j else f"{nums[i]}-{nums[j]}")
        i = j + 1
    return ",".join(out)
