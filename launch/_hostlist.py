"""Slurm host lists: expand ``node[1-4,7],gpu[01-02]`` into host names (and compress them back for display)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from malleable.errors import ConfigError

__all__ = ["compress_hostlist", "expand_hostlist"]

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


def compress_hostlist(hosts: Iterable[str]) -> str:
    """A short Slurm-style form of ``hosts`` (``node[1-3,7]``); consecutive runs of one prefix are merged,
    order is kept otherwise. ``expand_hostlist(compress_hostlist(h)) == list(h)`` for distinct names."""
    groups: list[tuple[str, list[str]]] = []
    for h in hosts:
        m = re.fullmatch(r"(.*?)(\d+)", h)
        prefix, num = (m.group(1), m.group(2)) if m else (h, "")
        if groups and num and groups[-1][0] == prefix and groups[-1][1] and groups[-1][1][-1] != "":
            groups[-1][1].append(num)
        else:
            groups.append((prefix, [num] if num else [""]))
    parts = []
    for prefix, nums in groups:
        if nums == [""]:
            parts.append(prefix)
        elif len(nums) == 1:
            parts.append(prefix + nums[0])
        else:
            parts.append(f"{prefix}[{_ranges(nums)}]")
    return ",".join(parts)


def _ranges(nums: list[str]) -> str:
    out: list[str] = []
    i = 0
    while i < len(nums):
        j = i
        while (j + 1 < len(nums) and int(nums[j + 1]) == int(nums[j]) + 1
               and len(nums[j + 1]) == len(nums[j])):
            j += 1
        out.append(nums[i] if i == j else f"{nums[i]}-{nums[j]}")
        i = j + 1
    return ",".join(out)
