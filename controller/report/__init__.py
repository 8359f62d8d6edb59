"""Reports a person reads: one self-contained HTML page per results file (an experiment's ``<name>.json`` or a
simulation's ``--results`` file), and the Markdown tables of docs/experiments.md.

``malleable report RESULTS.json [-o report.html]`` writes the page: the table of published numbers against ours
with intervals, controls and verdicts; Gantt charts with resizes and interruptions; utilisation, burst buffer and
file-system bandwidth over time; wait and slowdown distributions; and the command and commit behind it. Only the
``report`` command and the experiments load this package (never a job's rank 0 or the daemon).
"""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from malleable.errors import ConfigError

if TYPE_CHECKING:
    from ._markdown import DOCUMENTS, document_section, markdown, summary_table, update_generated
    from ._page import render

_WHERE = {"DOCUMENTS": "._markdown", "document_section": "._markdown", "markdown": "._markdown",
          "summary_table": "._markdown", "update_generated": "._markdown", "render": "._page"}

__all__ = ["DOCUMENTS", "document_section", "markdown", "read_results", "render", "summary_table",
           "update_generated", "write_report"]


def read_results(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A results file as a document.

    Raises:
        ConfigError: unreadable, not JSON, or not a results file (an experiment's or a simulation's ``--results``).
    """
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except OSError as e:
        raise ConfigError(f"{p}: cannot read: {e.strerror or e}") from e
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{p}: not a JSON file: {e}") from e
    kind = doc.get("kind") if isinstance(doc, dict) else None
    if kind not in ("experiment", "simulation"):
        hint = (" (a --json summary: write a report's input with 'malleable simulate ... --results FILE')"
                if isinstance(doc, dict) and "mean_wait" in doc else "")
        raise ConfigError(f"{p}: not a results file of an experiment or a simulation{hint}")
    return doc


def write_report(doc: dict[str, Any], out: str | os.PathLike[str]) -> Path:
    """Write the page of ``doc`` to ``out``; returns its path."""
    from ._page import render

    p = Path(out)
    p.write_text(render(doc))
    return p


def __getattr__(name: str) -> Any:
    # the page and tables load matplotlib and numpy: only when used (the command's parser needs none of it)
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(mod, __name__), name)
