"""The wire requests about an ended job's kept file system (``malleable fs stage-out|release --job ID``), beside
the protocol's own messages and registered with them; handled by :class:`~._storage.Storage`."""

from __future__ import annotations

from . import _protocol as P

__all__ = ["StageOutAgain"]


@P._msg("stage_out_again")  # noqa: SLF001 - registered with the protocol's messages; it is storage's own request
class StageOutAgain(P.Message):
    """``malleable fs stage-out --job ID``: try again the failed stage-out of an ended job (its file system was
    kept); with ``release`` (``fs release --job ID``) give it up: the file system and its data are dropped."""

    job_id: int
    release: bool = False
