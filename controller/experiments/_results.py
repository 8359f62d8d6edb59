"""From a runs table to an experiment's results: every claim's estimate, its controls' estimates and its verdict.

The results document (``<name>.json``) is what ``malleable report`` draws and what docs/experiments.md is
generated from; it holds nothing written by hand except the claims' definitions in the experiment modules.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict
from typing import Any

from malleable.controller.report._format import cell

from ._spec import Claim, Experiment, Runs, Stat
from ._stats import METHOD, estimate
from ._verdict import Near, Verdict, judge

__all__ = ["analyse", "per_seed", "text_table"]


def per_seed(stat: Stat, runs: Runs) -> list[float]:
    """The statistic for every seed whose runs are all there."""
    out = []
    for s in runs.seeds:
        try:
            x = stat(runs, s)
        except (KeyError, ZeroDivisionError):
            continue
        if not math.isnan(x):
            out.append(float(x))
    return out


def _row(c: Claim, runs: Runs) -> dict[str, Any]:
    ours = estimate(per_seed(c.stat, runs), floor=c.floor)
    controls = [(k.label, estimate(per_seed(k.stat, runs), floor=c.floor)) for k in c.controls]
    verdict, reason = judge(c.rule, ours, controls)
    return {"scenario": c.scenario, "metric": c.metric, "published": c.published,
            "rule": None if c.rule is None else c.rule.text(), "unit": c.unit, "digits": c.digits,
            "pub_value": c.rule.value if isinstance(c.rule, Near) else None,
            "ours": ours.as_dict(), "controls": [{"label": k, **e.as_dict()} for k, e in controls],
            "verdict": verdict.value, "reason": reason, "note": c.note}


def analyse(exp: Experiment, rows: Iterable[dict[str, Any]], seeds: int, quick: bool) -> dict[str, Any]:
    """The results document of ``exp`` from the runs table's rows (only its runs of this set-up and of seeds
    ``0 .. seeds-1`` count)."""
    mine = [r for r in rows if r.get("exp") == exp.name and bool(r.get("quick")) == quick
            and int(r.get("seed", -1)) < seeds]
    runs = Runs(mine)
    table = [_row(c, runs) for c in exp.claims(quick)]
    counts = Counter(r["verdict"] for r in table if r["verdict"] != Verdict.NONE.value)
    order = {r.key: k for k, r in enumerate(exp.plan(seeds, quick))}
    records = [r["record"] for r in sorted(mine, key=lambda r: order.get(r["key"], len(order))) if r.get("record")]
    return {"kind": "experiment", "name": exp.name, "title": exp.title, "quick": quick, "seeds": len(runs.seeds),
            "random": exp.random, "interval": METHOD, "assumptions": list(exp.assumptions),
            "deviations": [asdict(d) for d in exp.deviations], "table": table,
            "verdicts": {v.value: counts.get(v.value, 0) for v in Verdict if v is not Verdict.NONE},
            "runs": {"count": len(mine), "cpu_seconds": round(sum(float(r.get("cpu_seconds", 0.0)) for r in mine), 1)},
            "records": records}


def text_table(doc: dict[str, Any]) -> str:
    """The results as aligned text (what ``malleable simulate --experiment`` prints)."""
    lines = [f"== {doc['name']}: {doc['title']}",
             f"   seeds: {doc['seeds']} (a seed draws {doc['random']}); {doc['interval']}"]
    heads = ("scenario", "metric", "published", "ours", "verdict")
    cells = [heads] + [(r["scenario"], r["metric"], r["published"], cell(r), r["verdict"]) for r in doc["table"]]
    widths = [min(48, max(len(c[i]) for c in cells)) for i in range(4)]
    for c in cells:
        lines.append("  ".join(c[i][:48].ljust(widths[i]) for i in range(4)) + "  " + c[4])
    v = doc["verdicts"]
    lines.append("   verdicts: " + ", ".join(f"{n} {k}" for k, n in v.items()))
    return "\n".join(lines)
