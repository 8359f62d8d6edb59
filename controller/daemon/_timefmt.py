"""Slurm's time-limit formats (``--time``) parsed to seconds, and durations formatted the way squeue does."""

from __future__ import annotations

import re

from malleable.errors import ConfigError

__all__ = ["format_duration", "parse_time"]

_FORMS = "M, M:S, H:M:S, D-H, D-H:M or D-H:M:S"


def parse_time(text: str) -> float:
    """Seconds of a Slurm time limit.

    Accepted forms (as sbatch's ``--time``): ``minutes``, ``minutes:seconds``, ``hours:minutes:seconds``,
    ``days-hours``, ``days-hours:minutes``, ``days-hours:minutes:seconds``. A plain number is minutes.

    Raises:
        ConfigError: anything else, or a zero limit (the message lists the accepted forms).
    """
    s = text.strip() if isinstance(text, str) else ""
    m = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", s)
    if not m:
        raise ConfigError(f"bad time limit {text!r}: use {_FORMS}")
    days, a, b, c = m.groups()
    if days is not None:
        h, mi, sec = int(a), int(b or 0), int(c or 0)
        total = int(days) * 86400 + h * 3600 + mi * 60 + sec
    elif c is not None:
        total = int(a) * 3600 + int(b) * 60 + int(c)
    elif b is not None:
        total = int(a) * 60 + int(b)
    else:
        total = int(a) * 60
    if total <= 0:
        raise ConfigError(f"bad time limit {text!r}: must be longer than 0 s")
    return float(total)


def format_duration(seconds: float) -> str:
    """``[D-]H:MM:SS`` like squeue's TIME column (``M:SS`` under an hour)."""
    s = max(0, int(seconds))
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    if d:
        return f"{d}-{h:02d}:{m:02d}:{s:02d}"
    if h:
        return f"{h}:{m:02d}:{s:02d}"
    return f"{m}:{s:02d}"
