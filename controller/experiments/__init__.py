"""The source documents' experiments rebuilt in the simulator: each published number beside ours, with its
95 % interval over seeds, the controls that isolate the mechanism it credits, and a computed verdict.

``malleable simulate --experiment NAME|all [--seeds N] [--quick] [--out DIR]`` runs them through the sweep
machinery and writes, per experiment, ``<name>.json`` (the results) and ``<name>.html`` (the report page), with
every run in ``runs.jsonl`` (what resuming reads). docs/experiments.md explains the method and shows the tables.
"""

from __future__ import annotations

from ._driver import RUNS_TABLE, default_seeds, run_experiments
from ._exp003 import w2
from ._failures import failure_plan
from ._registry import EXPERIMENTS
from ._spec import Claim, Control, Deviation, Experiment, Run, Runs
from ._stats import Estimate, estimate
from ._verdict import Above, Below, Near, Verdict, judge

__all__ = ["EXPERIMENTS", "RUNS_TABLE", "Above", "Below", "Claim", "Control", "Deviation", "Estimate", "Experiment",
           "Near", "Run", "Runs", "Verdict", "default_seeds", "estimate", "failure_plan", "judge", "run_experiments",
           "w2"]

