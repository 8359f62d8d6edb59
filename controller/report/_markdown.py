"""An experiment's results as a Markdown table (the generated parts of docs/experiments.md)."""

from __future__ import annotations

from typing import Any

from ._format import cell

__all__ = ["markdown"]


def _md(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown(doc: dict[str, Any]) -> str:
    """The table of ``doc`` with a line of provenance and the verdict counts."""
    v = doc["verdicts"]
    lines = [f"Seeds: {doc['seeds']} (a seed draws {doc['random']}); {doc['interval']}; "
             f"{doc['runs']['count']} runs, {doc['runs']['cpu_seconds']:.0f} CPU-seconds. "
             f"Verdicts: {v.get('reproduced', 0)} reproduced, {v.get('confounded', 0)} confounded, "
             f"{v.get('not reproduced', 0)} not reproduced.", "",
             "| scenario | metric | published | ours | controls | verdict |", "|---|---|---|---|---|---|"]
    for r in doc["table"]:
        ctl = "; ".join(f"{c['label']}: {cell(r, c)}" for c in r["controls"])
        verdict = r["verdict"] if r["verdict"] != "no published number" else "-"
        if r.get("reason"):
            verdict = f"**{verdict}**: {r['reason']}"
        metric = r["metric"] + (f" ({r['note']})" if r.get("note") else "")
        lines.append(f"| {_md(r['scenario'])} | {_md(metric)} | {_md(r['published'])} | {_md(cell(r))} | "
                     f"{_md(ctl) or '-'} | {_md(verdict)} |")
    return "\n".join(lines) + "\n"


DOCUMENTS = {"000": "seed 000 (ADMIRE D3.3): MEBF, SFSJ node stealing, I/O-intensity-aware scheduling",
             "001": "seed 001 (I/O mapping and scheduling, ICS 2020): Make-Pack",
             "002": "seed 002: malleable EASY backfilling (MEBF)",
             "003": "seed 003 (the IMPI thesis): the elastic batch scheduler, workloads W1 and W2",
             "004": "seed 004: plan-based scheduling with shared burst buffers"}
"""The source documents, by the prefix of their experiments' names."""


def document_section(docs: list[dict[str, Any]], report_dir: str) -> str:
    """One source document's generated part of docs/experiments.md: for each of its experiments the table, a
    link to the report page (in ``report_dir``, relative to the docs) and the deviations."""
    parts = []
    for doc in docs:
        parts.append(f"**`{doc['name']}`: {doc['title']}** ([report]({report_dir}/{doc['name']}.html))\n")
        parts.append(markdown(doc))
        if doc.get("deviations"):
            parts.append("Deviations from the document:\n")
            parts.append("| topic | the document | ours | why / effect |\n|---|---|---|---|")
            parts += [f"| {_md(d['topic'])} | {_md(d['paper'])} | {_md(d['ours'])} | {_md(d['why'])} |"
                      for d in doc["deviations"]]
            parts.append("")
    return "\n".join(parts).rstrip() + "\n"


def summary_table(docs: list[dict[str, Any]]) -> str:
    """The verdicts of every experiment in one table."""
    lines = ["| experiment | seeds | runs | CPU-seconds | reproduced | confounded | not reproduced |",
             "|---|---|---|---|---|---|---|"]
    tot = [0, 0, 0, 0, 0]
    for d in docs:
        v = d["verdicts"]
        row = [d["runs"]["count"], d["runs"]["cpu_seconds"], v.get("reproduced", 0), v.get("confounded", 0),
               v.get("not reproduced", 0)]
        tot = [a + b for a, b in zip(tot, row, strict=True)]
        lines.append(f"| `{d['name']}` | {d['seeds']} | {row[0]} | {row[1]:.0f} | {row[2]} | {row[3]} | {row[4]} |")
    lines.append(f"| all | | {tot[0]} | {tot[1]:.0f} | {tot[2]} | {tot[3]} | {tot[4]} |")
    return "\n".join(lines) + "\n"


def update_generated(text: str, sections: dict[str, str]) -> str:
    """``text`` with the content between ``<!-- generated: KEY -->`` and ``<!-- end: KEY -->`` replaced by
    ``sections[KEY]`` for every key.

    Raises:
        ValueError: a key without its pair of markers.
    """
    for key, body in sections.items():
        start, end = f"<!-- generated: {key} -->", f"<!-- end: {key} -->"
        i, j = text.find(start), text.find(end)
        if i < 0 or j < i:
            raise ValueError(f"no generated section {key!r} (markers {start} ... {end})")
        text = text[: i + len(start)] + "\n" + body + text[j:]
    return text
