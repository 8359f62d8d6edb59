"""Immutable value records for the runtime's pure core, and a logger that loads :mod:`logging` on first use.

Every process an expansion spawns imports the runtime before it can answer its parents, so the import is part of
every expansion. ``dataclasses`` compiles generated code (``exec``) for each class it makes and pulls in
``inspect``, ``ast`` and ``tokenize``; ``logging`` pulls in ``traceback``, ``string`` and regular expressions. A
joiner needs neither to join: records here are plain slotted classes, and loggers load :mod:`logging` when they
first log. A record lists its fields in ``__slots__`` (annotated in the class body for type checkers) and sets
them in its ``__init__`` with :meth:`Record._init`; equality, hashing, ``repr``, pickling and :meth:`Record.replace`
follow the fields in slot order.
"""

from __future__ import annotations

TYPE_CHECKING = False   # typing stays unloaded: a joiner imports this on every expansion's path
if TYPE_CHECKING:
    import logging
    from typing import Any

__all__ = ["Record", "get_logger"]


class Record:
    """Base of the frozen records (see the module docstring)."""

    __slots__ = ()

    def _init(self, **values: Any) -> None:
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def _values(self) -> tuple:
        return tuple(getattr(self, f) for f in self.__slots__)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable: cannot delete {name!r}")

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._values() == other._values()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._values()))

    def __repr__(self) -> str:
        fields = ", ".join(f"{f}={getattr(self, f)!r}" for f in self.__slots__)
        return f"{type(self).__name__}({fields})"

    def __reduce__(self) -> tuple:
        return type(self), self._values()

    def replace(self, **changes: Any) -> Any:
        """A copy with ``changes`` (field name: new value)."""
        values = dict(zip(self.__slots__, self._values(), strict=True))
        values.update(changes)
        return type(self)(**values)


class _LazyLogger:
    """Stands for ``logging.getLogger(name)``, which it makes when first used."""

    __slots__ = ("_logger", "_name")

    def __init__(self, name: str) -> None:
        self._name = name
        self._logger: Any = None

    def __getattr__(self, attr: str) -> Any:
        if self._logger is None:
            import logging

            self._logger = logging.getLogger(self._name)
        return getattr(self._logger, attr)


def get_logger(name: str) -> logging.Logger:
    """The logger ``name``; :mod:`logging` loads when it first logs."""
    return _LazyLogger(name)  # type: ignore[return-value]
