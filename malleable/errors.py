"""The one exception tree of malleable: every error the package raises on purpose derives from MalleableError."""

from __future__ import annotations

__all__ = [
    "AdaptError",
    "AdaptTimeout",
    "AuthError",
    "ConfigError",
    "FsError",
    "MalleableError",
    "PlacementError",
    "PlanError",
    "PolicyError",
    "ProtocolError",
    "Refusal",
    "Rejected",
    "ReplayError",
    "ServerUnavailable",
    "SimulationError",
    "TraceError",
    "UnknownJob",
]


class MalleableError(Exception):
    """Root of all malleable errors."""


class ConfigError(MalleableError, ValueError):
    """A configuration value (option, environment variable, file) is invalid."""


class PlanError(ConfigError):
    """A ``MALLEABLE_PLAN`` (or a plan given in code) is invalid; the message says what is wrong."""


class AdaptError(MalleableError):
    """An adaptation (expand or shrink) failed; the job's previous world is still usable."""


class AdaptTimeout(AdaptError, TimeoutError):
    """An adaptation step did not complete within its timeout."""


class ProtocolError(MalleableError):
    """A wire message is malformed, of an unknown type or of an unsupported version."""

    #: the id of an authenticated request refused for one of its fields, so the refusal answers it (0: unknown)
    request_id: int = 0


class AuthError(ProtocolError):
    """A wire message was not authenticated with the shared secret."""


class ReplayError(AuthError):
    """An authenticated wire message was refused as a replay (seen before, or sent outside the time window)."""


class Rejected(ProtocolError):
    """An authentic request (its MAC passed) that the field checks refused: the reason goes back under its key
    ``key_id`` and request id ``request_id`` (0 when it had no valid one)."""

    def __init__(self, reason: str, key_id: str, request_id: object) -> None:
        super().__init__(reason)
        valid = type(request_id) is int and 0 <= request_id < (1 << 63)
        self.key_id, self.request_id = key_id, request_id if valid else 0


class PlacementError(MalleableError):
    """Data placement cannot be computed (no servers, unknown server id, ...)."""


class FsError(MalleableError, OSError):
    """An adhocfs operation failed for a reason other than a standard OSError subclass."""


class ServerUnavailable(FsError):
    """An adhocfs server did not answer in time; the message names the server and the file."""


class PolicyError(MalleableError):
    """A scheduling policy returned a decision that breaks an invariant (size bounds, free nodes, ...)."""


class Refusal(MalleableError):
    """A request the controller will not carry out (too many nodes, a finished job, ...)."""


class UnknownJob(Refusal):
    """No job has this id."""


class SimulationError(MalleableError):
    """The simulator reached an inconsistent state."""


class TraceError(ConfigError):
    """A workload trace (SWF) is malformed; the message gives the line number."""
