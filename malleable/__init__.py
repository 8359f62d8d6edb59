"""malleable: MPI jobs that grow and shrink, a controller that decides when, an elastic ad-hoc file system.

Subpackages: :mod:`malleable.runtime` (adaptation verbs), :mod:`malleable.controller`
(daemon, policies, simulator), :mod:`malleable.adhocfs` (elastic file system),
:mod:`malleable.apps` (sample applications), :mod:`malleable.launch` (launch helpers).
"""

from malleable.errors import (
    AdaptError,
    AdaptTimeout,
    AuthError,
    MalleableError,
    PlacementError,
    PlanError,
    ProtocolError,
)

__version__ = "0.1.0"

__all__ = [
    "AdaptError",
    "AdaptTimeout",
    "AuthError",
    "MalleableError",
    "PlacementError",
    "PlanError",
    "ProtocolError",
    "__version__",
]
