"""Long answers in parts: a table (a queue of 100,000 jobs) goes back as several ``table`` messages under one
request id, each at most :data:`TABLE_PART` rows and one header (:data:`malleable._wire.MAX_HEADER`), ``more`` set
on all but the last; the client joins them (:func:`join`). Rows that share their field names go as value lists
under one list of column names, and a column whose value is the same in every row of a part is sent once (in
``same``): a queue of pending jobs is mostly defaults."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from operator import itemgetter
from typing import Any

from malleable._wire import Wire
from malleable.errors import ProtocolError

from ._protocol import Error, Message, Table, encode_keyed

__all__ = ["TABLE_PART", "columns", "compact", "encode_reply", "join"]

TABLE_PART = 1000
"""Most rows of one part (fewer when they are long: a part must fit a header)."""


def columns(rows: list[dict[str, Any]]) -> tuple[list[str], list[Any]] | None:
    """The rows as ``(column names, value lists)``, or None when their field names differ."""
    if not rows:
        return None
    keys = rows[0].keys()
    if any(r.keys() != keys for r in rows):
        return None
    cols = list(keys)
    get = itemgetter(*cols)
    return cols, [get(r) for r in rows] if len(cols) > 1 else [(r[cols[0]],) for r in rows]


def _constant(column: tuple[Any, ...]) -> bool:
    first = column[0]
    if column != (first,) * len(column):
        return False
    return type(first) not in _NUMBERS or len(set(map(type, column))) == 1   # 1 equals 1.0 and True, but differs


_NUMBERS = (int, float, bool)


def compact(cols: list[str], vals: list[Any], more: bool = False) -> Table:
    """A table part of value lists (each in ``cols`` order) with its constant columns sent once, in ``same``
    (one column always stays in the value lists, so that they keep the row count)."""
    if len(vals) < 2:
        return Table([], more=more, cols=cols, vals=vals)
    by_col = list(zip(*vals))
    varying = [i for i, c in enumerate(by_col) if not _constant(c)] or [0]
    fixed = set(range(len(cols))) - set(varying)
    same = {cols[i]: by_col[i][0] for i in sorted(fixed)}
    return Table([], more=more, same=same, cols=cols, vals=list(zip(*(by_col[i] for i in varying))))


def join(part: Table) -> list[dict[str, Any]]:
    """The rows of one part as objects, with the fields they left out put back, in the column (or first row's)
    order."""
    if part.cols:
        cols, same = part.cols, part.same
        if not same:
            return [dict(zip(cols, r)) for r in part.vals]
        rest = [c for c in cols if c not in same]
        template = {c: same.get(c) for c in cols}    # a copy keeps the key order; update fills in the rest
        out = []
        for r in part.vals:
            row = template.copy()
            row.update(zip(rest, r))
            out.append(row)
        return out
    if not part.same:
        return part.rows
    first = part.same
    return [{**first, **r} for r in part.rows]


def encode_reply(msg: Message, wire: Wire, rid: int) -> Iterator[list[Any]]:
    """The messages (each a list of frames) answering request ``rid`` with ``msg``: one, or a table in parts
    halved while one does not fit a header. A single answer too large to send becomes an error that says so.
    Parts come one at a time: the first is on its way (and being decoded) while the next is encoded."""
    if not isinstance(msg, Table):
        try:
            yield encode_keyed(msg, wire, rid)
        except ProtocolError as e:
            yield encode_keyed(Error("ProtocolError", f"the answer is too large: {e}"), wire, rid)
        return
    if msg.cols:
        cols, vals = msg.cols, msg.vals
    else:
        by_cols = columns(msg.rows)
        if by_cols is None:                 # rows of differing fields go whole
            yield from _in_parts(msg.rows, lambda part, more: Table(part, more=more), wire, rid)
            return
        cols, vals = by_cols
    yield from _in_parts(vals, lambda part, more: compact(cols, part, more), wire, rid)


def _in_parts(rows: list[Any], part_of: Callable[[list[Any], bool], Table], wire: Wire,
              rid: int) -> Iterator[list[Any]]:
    n, start, step = len(rows), 0, TABLE_PART
    while True:
        last = start + step >= n
        try:
            frames = encode_keyed(part_of(rows[start:start + step], not last), wire, rid)
        except ProtocolError:
            if step == 1:
                raise
            step = max(1, step // 2)
            continue
        yield frames
        if last:
            return
        start += step
