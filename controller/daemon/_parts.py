"""Long answers in parts: a table (a queue of 100,000 jobs) goes back as several ``table`` messages under one
request id, each at most :data:`TABLE_PART` rows and one header (:data:`malleable._wire.MAX_HEADER`), ``more`` set
on all but the last; the client joins them (:func:`join`). Rows that share their field names leave out the fields
equal to the first row's (sent once as ``same``): a queue of pending jobs is mostly defaults."""

from __future__ import annotations

from typing import Any

from malleable._wire import Wire
from malleable.errors import ProtocolError

from ._protocol import Error, Message, Table, encode_keyed

__all__ = ["TABLE_PART", "compact_rows", "encode_reply", "join"]

TABLE_PART = 1000
"""Most rows of one part (fewer when they are long: a part must fit a header)."""


def compact_rows(rows: list[dict]) -> tuple[list[dict], dict]:
    """Rows without the fields equal to the first row's, and that first row; rows with differing field names are
    left whole (and no first row is given)."""
    if len(rows) < 2:
        return rows, {}
    first = rows[0]
    keys = first.keys()
    if any(r.keys() != keys for r in rows):
        return rows, {}
    return [{k: v for k, v in r.items() if first[k] != v or type(first[k]) is not type(v)} for r in rows], first


def join(part: Table) -> list[dict]:
    """The rows of one part with the fields they left out put back, in the first row's order."""
    if not part.same:
        return part.rows
    base = part.same
    return [{**base, **r} for r in part.rows]


def encode_reply(msg: Message, wire: Wire, rid: int) -> list[list[Any]]:
    """The messages (each a list of frames) answering request ``rid`` with ``msg``: one, or a table in parts
    halved while one does not fit a header. A single answer too large to send becomes an error that says so."""
    if not isinstance(msg, Table):
        try:
            return [encode_keyed(msg, wire, rid)]
        except ProtocolError as e:
            return [encode_keyed(Error("ProtocolError", f"the answer is too large: {e}"), wire, rid)]
    out: list[list[Any]] = []
    rows, n = msg.rows, len(msg.rows)
    start, step = 0, TABLE_PART
    while True:
        part = rows[start:start + step]
        last = start + step >= n
        small, same = compact_rows(part)
        try:
            out.append(encode_keyed(Table(small, more=not last, same=same), wire, rid))
        except ProtocolError:
            if step == 1:
                raise
            step = max(1, step // 2)
            continue
        if last:
            return out
        start += step
