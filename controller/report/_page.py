"""One self-contained HTML page per results file: no file or network fetched, figures inline as SVG, a few lines
of script (verdict filter, and a check that sets ``data-rendered`` on the body once the page has laid out)."""

from __future__ import annotations

import html
import json
from collections.abc import Iterable
from typing import Any

from ._figures import claims_figure, curves_figure, distribution_figure, gantt_figure
from ._format import cell

__all__ = ["render"]

CSS = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d232a;margin:0 auto;
max-width:1180px;padding:1.2rem 1.6rem 4rem}
h1{font-size:1.55rem;margin:.2rem 0 .4rem}h2{font-size:1.2rem;margin:2rem 0 .6rem;border-bottom:1px solid #dde}
h3{font-size:1.02rem;margin:1.2rem 0 .4rem}
.meta{color:#4a5560;font-size:.9rem}.meta code{font-size:.85rem;background:#f2f4f7;padding:.05rem .3rem}
nav a{margin-right:1rem;font-size:.92rem}
table{border-collapse:collapse;width:100%;font-size:.88rem;margin:.4rem 0}
th,td{border:1px solid #d8dde3;padding:.3rem .45rem;vertical-align:top;text-align:left}
th{background:#f1f4f8;position:sticky;top:0}#claims td:nth-child(1){width:13%}#claims td:nth-child(2){width:21%}
#claims td:nth-child(5){width:22%}#claims td:nth-child(6){width:20%}td.num{white-space:nowrap;font-variant-numeric:tabular-nums}
.v{display:inline-block;border-radius:.7rem;padding:.05rem .55rem;font-size:.8rem;font-weight:600;white-space:nowrap}
.v-reproduced{background:#d9f2e0;color:#125c2b}.v-not-reproduced{background:#fbe0dc;color:#8c1d10}
.v-confounded{background:#fdf0cc;color:#7a5300}.v-none{background:#eceff3;color:#4a5560}
.why{color:#4a5560;font-size:.8rem;margin-top:.2rem}.note{color:#4a5560;font-size:.8rem}
.ctl{white-space:nowrap;font-size:.82rem}
.filters button{margin:0 .4rem .4rem 0;border:1px solid #c8ced6;background:#fff;border-radius:.3rem;padding:.2rem .6rem;
cursor:pointer}.filters button.on{background:#1f5fa8;color:#fff;border-color:#1f5fa8}
figure{margin:.8rem 0 1.4rem}svg.fig{width:100%;height:auto;max-width:1000px;display:block}
figcaption{font-size:.85rem;color:#4a5560}
#script-errors{color:#8c1d10;white-space:pre-wrap}
"""

HEAD_SCRIPT = ("window.__errors=[];window.addEventListener('error',function(e){"
               "window.__errors.push(String(e.message||e))});")

TAIL_SCRIPT = """
(function(){
  var rows=document.querySelectorAll('tr[data-verdict]');
  var buttons=document.querySelectorAll('.filters button');
  buttons.forEach(function(b){b.addEventListener('click',function(){
    buttons.forEach(function(x){x.classList.toggle('on',x===b)});
    var want=b.dataset.show;
    rows.forEach(function(r){r.style.display=(want==='all'||r.dataset.verdict===want)?'':'none'});
  })});
  var figs=document.querySelectorAll('svg.fig'),drawn=0;
  figs.forEach(function(s){var b=s.getBBox();if(b.width>0&&b.height>0){drawn++}});
  document.body.dataset.figures=figs.length+'/'+drawn;
  document.getElementById('script-errors').textContent=window.__errors.join('\\n');
  document.body.dataset.rendered=window.__errors.length?'errors':'ok';
})();
"""


def _e(x: object) -> str:
    return html.escape(str(x), quote=True)


def _verdict_class(v: str) -> str:
    return "v-" + ("none" if v == "no published number" else v.replace(" ", "-"))


def _table(rows: list[dict[str, Any]]) -> str:
    out = ['<table id="claims"><thead><tr><th>scenario</th><th>metric</th><th>published</th>'
           '<th>ours (mean ± 95% interval)</th><th>controls (same statistic)</th><th>verdict</th></tr></thead><tbody>']
    for r in rows:
        ctl = "<br>".join(f'<span class="ctl">{_e(c["label"])}: {_e(cell(r, c))}</span>' for c in r["controls"])
        note = f'<div class="note">{_e(r["note"])}</div>' if r.get("note") else ""
        why = f'<div class="why">{_e(r["reason"])}</div>' if r.get("reason") else ""
        n = r["ours"]["n"]
        seeds = f' <span class="note">({n} seed{"s" if n != 1 else ""})</span>' if n else ""
        out.append(f'<tr data-verdict="{_e(r["verdict"])}"><td>{_e(r["scenario"])}</td><td>{_e(r["metric"])}{note}'
                   f'</td><td>{_e(r["published"])}</td><td class="num">{_e(cell(r))}{seeds}</td><td>{ctl}</td>'
                   f'<td><span class="v {_verdict_class(r["verdict"])}">{_e(r["verdict"])}</span>{why}</td></tr>')
    out.append("</tbody></table>")
    return "".join(out)


def _figure(svg: str, caption: str) -> str:
    return f"<figure>{svg}<figcaption>{_e(caption)}</figcaption></figure>"


def _record_sections(records: list[dict[str, Any]]) -> list[str]:
    parts: list[str] = []
    if not records:
        return parts
    parts.append('<h2 id="runs">Runs in detail</h2>')
    parts.append('<p class="note">One seed (the first) of the runs drawn here; the tables above hold every seed.</p>')
    for rec in records:
        s = rec["summary"]
        parts.append(f"<h3>{_e(rec['label'])}</h3><p class=\"note\">{_e(rec['workload'])}: {rec['jobs']} jobs on "
                     f"{rec['machine']} nodes; mean wait {s['mean_wait']:.0f} s, mean bounded slowdown "
                     f"{s['mean_bsld']:.2f} (tau {rec['tau']:g} s), makespan {s['makespan']:.0f} s, utilisation "
                     f"{100 * s['utilization']:.1f}%, {s['resizes']} resizes</p>")
        if rec.get("gantt", {}).get("jobs"):
            parts.append(_figure(gantt_figure(rec), "Gantt chart: each colour is a job; resizes and interruptions "
                                                    "are drawn where they happen"))
    keys: list[str] = []
    for rec in records:
        keys += [k for k in rec.get("curves", {}) if k not in keys]
    parts.append('<h2 id="curves">Over time</h2>')
    for k in keys:
        parts.append(_figure(curves_figure(records, k), "time averages over equal bins of the run"))
    parts.append('<h2 id="distributions">Distributions</h2>')
    parts.append(_figure(distribution_figure(records, "wait"), "every job's wait (start - submission)"))
    parts.append(_figure(distribution_figure(records, "bsld"), "bounded slowdown max(1, (wait + run) / max(run, "
                                                               "tau))"))
    return parts


def _provenance(doc: dict[str, Any]) -> str:
    dirty = " (with uncommitted changes)" if doc.get("dirty") else ""
    return (f'<p class="meta">command <code>{_e(doc.get("command", "?"))}</code><br>commit <code>'
            f'{_e(doc.get("commit", "unknown"))}</code>{dirty}, malleable {_e(doc.get("version", "?"))}, '
            f'{_e(doc.get("created", ""))}, {_e(doc.get("cores", "?"))} cores</p>')


def _experiment(doc: dict[str, Any]) -> list[str]:
    rows = doc["table"]
    v = doc["verdicts"]
    runs = doc.get("runs", {})
    parts = [f"<h1>{_e(doc['name'])}: {_e(doc['title'])}</h1>", _provenance(doc),
             f'<p class="meta">seeds: {doc["seeds"]} (a seed draws {_e(doc["random"])}); {_e(doc["interval"])}; '
             f'{runs.get("count", 0)} runs, {runs.get("cpu_seconds", 0):.0f} CPU-seconds'
             f'{" (quick set-up)" if doc.get("quick") else ""}</p>',
             '<nav><a href="#table">table</a><a href="#figures">published vs ours</a><a href="#runs">runs</a>'
             '<a href="#curves">over time</a><a href="#distributions">distributions</a>'
             '<a href="#assumptions">assumptions</a><a href="#deviations">deviations</a></nav>',
             '<h2 id="table">Published numbers and ours</h2>',
             '<p class="filters">' + "".join(
                 f'<button data-show="{_e(k)}"{" class=on" if k == "all" else ""}>{_e(k)} '
                 f'({len(rows) if k == "all" else v.get(k, sum(1 for r in rows if r["verdict"] == k))})</button>'
                 for k in ("all", "reproduced", "confounded", "not reproduced", "no published number")) + "</p>",
             '<p class="note">reproduced: the published value lies in our interval (or, for a direction, the whole '
             'interval is on its side); confounded: a control without the credited mechanism does that too; not '
             'reproduced: otherwise. Each verdict is computed from the runs, with its reason.</p>',
             _table(rows), '<h2 id="figures">Published vs ours</h2>']
    units: list[str] = []
    for r in rows:
        if r.get("pub_value") is not None and r["ours"]["n"] > 0 and r["unit"] not in units:
            units.append(r["unit"])
    for u in units:
        parts.append(_figure(claims_figure([r for r in rows if r["unit"] == u], u),
                             "red: published; blue: ours with its 95% interval; grey: the controls"))
    parts += _record_sections(doc.get("records", []))
    parts.append('<h2 id="assumptions">Assumptions</h2><ul>' +
                 "".join(f"<li>{_e(a)}</li>" for a in doc.get("assumptions", [])) + "</ul>")
    parts.append('<h2 id="deviations">Deviations from the document</h2><table><thead><tr><th>topic</th>'
                 '<th>the document</th><th>ours</th><th>why / effect</th></tr></thead><tbody>' +
                 "".join(f"<tr><td>{_e(d['topic'])}</td><td>{_e(d['paper'])}</td><td>{_e(d['ours'])}</td>"
                         f"<td>{_e(d['why'])}</td></tr>" for d in doc.get("deviations", [])) + "</tbody></table>")
    return parts


def _simulation(doc: dict[str, Any]) -> list[str]:
    s = doc["summary"]
    rows = "".join(f"<tr><th>{_e(k)}</th><td class=\"num\">{_e(_num(v))}</td></tr>" for k, v in s.items())
    return [f"<h1>{_e(doc.get('title', 'simulation'))}</h1>", _provenance(doc),
            '<nav><a href="#summary">summary</a><a href="#runs">run</a><a href="#curves">over time</a>'
            '<a href="#distributions">distributions</a></nav>',
            f'<h2 id="summary">Summary</h2><table style="width:auto">{rows}</table>',
            *_record_sections(doc.get("records", []))]


def _num(v: object) -> str:
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1e4 else f"{v:,.0f}"
    if isinstance(v, dict):
        return json.dumps(v)[:200]
    return str(v)


def render(doc: dict[str, Any]) -> str:
    """The page of a results document (an experiment's or a simulation run's)."""
    title = f"{doc.get('name', '')} {doc.get('title', 'simulation')}".strip()
    body: Iterable[str] = _experiment(doc) if doc.get("kind") == "experiment" else _simulation(doc)
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
            f"<title>{_e(title)}</title><style>{CSS}</style><script>{HEAD_SCRIPT}</script></head><body>"
            + "\n".join(body) + '<pre id="script-errors"></pre>'
            f"<script>{TAIL_SCRIPT}</script></body></html>\n")
