"""The file-system options of a submit (``--bb``, ``--fs-*``, ``--stage-*``): their parsing and bounds, shared by
the command line and the message check so that both refuse with the same line."""

from __future__ import annotations

__all__ = ["MAX_FS_SERVERS", "check_fs_bounds", "check_fs_replicas", "format_size", "parse_stage"]

MAX_FS_SERVERS = 64
"""Most data servers a job's file system may have (``submit --fs-servers``)."""


def parse_stage(text: str, direction: str) -> tuple[str, str]:
    """``SRC:DST`` of ``submit --stage-in`` (``direction`` "in": a local file, then a path in the job's file
    system) or ``--stage-out`` ("out": a path in the file system, then a local file), split at the first colon;
    the file-system side must be absolute (``/...``).

    Raises:
        ValueError: not of that form (the message says which form is expected).
    """
    src, sep, dst = text.partition(":")
    form = "LOCAL:/FS/PATH" if direction == "in" else "/FS/PATH:LOCAL"
    inner = src if direction == "out" else dst
    if not sep or not src or not dst or not inner.startswith("/"):
        raise ValueError(f"--stage-{direction} wants {form} (the file-system path absolute), got {text[:200]!r}")
    return src, dst


def check_fs_bounds(servers: int, fs_min: int, fs_max: int) -> str:
    """Why ``--fs-servers``/``--fs-min``/``--fs-max`` do not fit together ("" when they do): each between 1 and
    :data:`MAX_FS_SERVERS` (0 for a bound: ``servers``) and ``fs_min <= servers <= fs_max``. Shared by the command
    line and the message check, so both refuse with the same line."""
    lo, hi = fs_min or servers, fs_max or servers
    for name, n in (("--fs-servers", servers), ("--fs-min", lo), ("--fs-max", hi)):
        if not 1 <= n <= MAX_FS_SERVERS:
            return f"{name} must be between 1 and {MAX_FS_SERVERS}, got {n}"
    if not lo <= servers <= hi:
        return f"need --fs-min <= --fs-servers <= --fs-max, got {lo} <= {servers} <= {hi}"
    return ""


def check_fs_replicas(replicas: int, most: int) -> str:
    """Why ``--fs-replicas`` does not fit ("" when it does): between 1 and ``most``, the most data servers the file
    system may have (a block's copies are on distinct servers). Shared by the command line and the message check."""
    if not 1 <= replicas <= most:
        return f"--fs-replicas must be between 1 and the file system's most data servers ({most}), got {replicas}"
    return ""


def format_size(n: float) -> str:
    """Bytes as ``512M``/``1.5G`` (powers of 1024, what ``--bb`` and ``--bb-capacity`` accept)."""
    for unit in ("", "K", "M", "G", "T"):
        if n < 1024 or unit == "T":
            return f"{n:.0f}{unit}" if n == int(n) else f"{n:.1f}{unit}"
        n /= 1024
    return f"{n:.1f}T"
