"""Slurm's time formats: time limits (``--time``) parsed to seconds, points in time as sacct's ``-S``/``-E`` take
them, and durations formatted the way squeue (``TIME``) and sacct (``Elapsed``) print them."""

from __future__ import annotations

import re
import time

from malleable.errors import ConfigError

__all__ = ["UNLIMITED_WORDS", "format_duration", "format_elapsed", "format_limit", "parse_limit", "parse_time",
           "parse_when"]

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


UNLIMITED_WORDS = ("UNLIMITED", "INFINITE")


def parse_limit(text: str) -> float:
    """Seconds of a time limit, or 0.0 for no limit: ``0``, ``UNLIMITED`` or ``INFINITE`` (any case), as sbatch
    takes them; anything else as :func:`parse_time`.

    Raises:
        ConfigError: not a time limit.
    """
    s = text.strip() if isinstance(text, str) else ""
    if s.upper() in UNLIMITED_WORDS or re.fullmatch(r"0+", s):
        return 0.0
    return parse_time(text)


def format_limit(seconds: float) -> str:
    """A time limit as squeue prints it: ``UNLIMITED`` for none, else :func:`format_duration`."""
    return format_duration(seconds) if seconds else "UNLIMITED"


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


def format_elapsed(seconds: float) -> str:
    """``[D-]HH:MM:SS`` like sacct's ``Elapsed`` column."""
    s = max(0, int(seconds))
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return (f"{d}-" if d else "") + f"{h:02d}:{m:02d}:{s:02d}"


_WHEN_FORMS = ("YYYY-MM-DD[THH:MM[:SS]], HH:MM[:SS], MM/DD[/YY], MMDD[YY], today, midnight, noon or "
               "now[-N[seconds|minutes|hours|days|weeks]]")
_UNITS = {"": 1, "s": 1, "sec": 1, "second": 1, "seconds": 1, "min": 60, "minute": 60, "minutes": 60,
          "h": 3600, "hour": 3600, "hours": 3600, "d": 86400, "day": 86400, "days": 86400, "week": 604800,
          "weeks": 604800}


def parse_when(text: str, now: float | None = None) -> float:
    """A point in time (epoch seconds, local time) in one of sacct's forms for ``--starttime``/``--endtime``.

    ``2026-11-22``, ``2026-11-22T14:30[:05]``, ``14:30[:05]`` (today), ``11/22[/26]`` and ``1122[26]``
    (midnight of that day), ``today``/``midnight``, ``noon``, ``now``, ``now-2hours``, ``now+30minutes``.

    Raises:
        ConfigError: anything else (the message lists the accepted forms).
    """
    t = time.time() if now is None else now
    s = text.strip().lower() if isinstance(text, str) else ""
    today = time.localtime(t)

    def at(y: int, mo: int, d: int, h: int = 0, mi: int = 0, sec: int = 0) -> float:
        if not (1 <= mo <= 12 and 1 <= d <= 31 and h < 24 and mi < 60 and sec < 60):
            raise ConfigError(f"bad time {text!r}: no such date or time of day")
        return time.mktime((y, mo, d, h, mi, sec, 0, 0, -1))

    if s in ("today", "midnight"):
        return at(today.tm_year, today.tm_mon, today.tm_mday)
    if s == "noon":
        return at(today.tm_year, today.tm_mon, today.tm_mday, 12)
    m = re.fullmatch(r"now(?:([+-])(\d+)([a-z]*))?", s)
    if m:
        sign, n, unit = m.groups()
        if sign is None:
            return t
        if unit not in _UNITS:
            raise ConfigError(f"bad time {text!r}: unknown unit {unit!r}; use {_WHEN_FORMS}")
        return t + (1 if sign == "+" else -1) * int(n) * _UNITS[unit]
    m = re.fullmatch(r"(\d{4})-(\d{2})-(\d{2})(?:t(\d{1,2}):(\d{2})(?::(\d{2}))?)?", s)
    if m:
        return at(*(int(x) for x in m.groups() if x is not None))
    m = re.fullmatch(r"(\d{1,2}):(\d{2})(?::(\d{2}))?", s)
    if m:
        return at(today.tm_year, today.tm_mon, today.tm_mday, *(int(x) for x in m.groups() if x is not None))
    m = re.fullmatch(r"(\d{1,2})/(\d{1,2})(?:/(\d{2}))?", s) or re.fullmatch(r"(\d{2})(\d{2})(\d{2})?", s)
    if m:
        mo, d, yy = m.groups()
        return at(2000 + int(yy) if yy else today.tm_year, int(mo), int(d))
    raise ConfigError(f"bad time {text!r}: use {_WHEN_FORMS}")
