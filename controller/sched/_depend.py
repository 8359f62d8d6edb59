"""Job dependencies as sbatch's ``--dependency`` writes them, and whether a job may enter the queue.

A dependency text is a comma-separated list of ``TYPE:ID[:ID...]``, every item to be satisfied (sbatch's ``,``):
``afterok`` is satisfied once every named job ended COMPLETED (exit code 0), ``afterany`` once every named job
ended, whatever its state. A job whose dependencies are not satisfied yet stays out of the queue the policies see
(reason ``Dependency``); one whose ``afterok`` job ended otherwise can never run (``DependencyNeverSatisfied``).

Pure: what has ended is given (job id -> final state); no clock, no store.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["DepKind", "DepStatus", "Dependency", "dependency_status", "format_dependency", "parse_dependency"]


class DepKind(str, enum.Enum):
    """What a job waits for of the jobs it names."""

    AFTEROK = "afterok"      # they ended COMPLETED
    AFTERANY = "afterany"    # they ended, in any state

    def __str__(self) -> str:
        return self.value


class DepStatus(str, enum.Enum):
    """Where a job's dependencies stand."""

    WAITING = "Dependency"                       # some named job has not ended
    SATISFIED = "Satisfied"                      # the job may enter the queue
    NEVER = "DependencyNeverSatisfied"           # an afterok job ended otherwise than COMPLETED


@dataclass(frozen=True, slots=True)
class Dependency:
    """One item of a dependency list: ``kind`` of every job in ``job_ids``."""

    kind: DepKind
    job_ids: tuple[int, ...]


def parse_dependency(text: str) -> tuple[Dependency, ...]:
    """``afterok:3:4,afterany:5`` -> its items (empty text: none).

    Raises:
        ValueError: not of that form (the message is one line, for the user).
    """
    if not text.strip():
        return ()
    out = []
    for item in text.split(","):
        kind, _, ids = item.strip().partition(":")
        try:
            k = DepKind(kind.strip().lower())
        except ValueError:
            raise ValueError(f"--dependency {text!r}: unknown type {kind!r}; known: afterok, afterany "
                             "(TYPE:ID[:ID...][,TYPE:ID...])") from None
        parts = ids.split(":") if ids else []
        if not parts or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
            raise ValueError(f"--dependency {text!r}: {kind} needs job ids, as {kind}:ID[:ID...]")
        out.append(Dependency(k, tuple(int(p) for p in parts)))
    return tuple(out)


def format_dependency(deps: tuple[Dependency, ...]) -> str:
    """The canonical text of parsed dependencies (what is stored and shown)."""
    return ",".join(f"{d.kind}:" + ":".join(str(i) for i in d.job_ids) for d in deps)


def dependency_status(deps: tuple[Dependency, ...], ended: Mapping[int, str]) -> tuple[DepStatus, str]:
    """Whether a job with ``deps`` may enter the queue, given the final states of the jobs that ended (a job not
    in ``ended`` has not ended). Returns the status and, for NEVER, why (``job 3 FAILED``)."""
    waiting = False
    for d in deps:
        for jid in d.job_ids:
            state = ended.get(jid)
            if state is None:
                waiting = True
            elif d.kind is DepKind.AFTEROK and state != "COMPLETED":
                return DepStatus.NEVER, f"job {jid} {state}"
    return (DepStatus.WAITING if waiting else DepStatus.SATISFIED), ""
