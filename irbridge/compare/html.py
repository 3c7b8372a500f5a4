"""The side-by-side HTML report: one self-contained file (inline CSS and JS, no network).

Every matched group is a row with the left nodes beside the right nodes and an anchor
(`#g12`); differences, decompositions, cost rows and numeric results link to their group.
A filter box and a "differences only" switch narrow the group table in the page.
"""

from __future__ import annotations

import json
from pathlib import Path

from irbridge.atomic import atomic_file
from irbridge.compare.match import Group, NodeRef
from irbridge.compare.report import Comparison, _pct, _time, headline
from irbridge.sanitize import html_text
from irbridge.summary import human_bytes, human_count

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em}
table{border-collapse:collapse;margin:.4em 0}td,th{border:1px solid #ccc;padding:2px 6px;
vertical-align:top}th{background:#f3f3f3;text-align:left}td.n{text-align:right}
.kind-same{background:#fff}.kind-fused,.kind-decomposed,.kind-rewritten{background:#eef6ff}
.kind-changed{background:#ffe3e3}.kind-left-only,.kind-right-only{background:#fff4d6}
tr:target{outline:3px solid #f90}.ops{font-family:monospace;font-size:12px}
.flag{color:#b00000;font-weight:bold}.muted{color:#777}#filter{width:24em}
"""

_JS = """
(function(){
  var box=document.getElementById('filter'), only=document.getElementById('only');
  function apply(){
    var text=box.value.toLowerCase(), diff=only.checked, shown=0;
    var rows=document.querySelectorAll('#groups tbody tr');
    for(var i=0;i<rows.length;i++){
      var r=rows[i], ok=r.textContent.toLowerCase().indexOf(text)>=0;
      if(diff && r.getAttribute('data-kind')==='same'){ok=false;}
      r.style.display=ok?'':'none'; if(ok){shown++;}
    }
    document.getElementById('shown').textContent=shown+' of '+rows.length+' groups shown';
  }
  box.addEventListener('input',apply); only.addEventListener('change',apply); apply();
})();
"""


def _e(text: object) -> str:
    return html_text(text)


def _link(group: int | None) -> str:
    return "" if group is None else f'<a href="#g{group}">group {group}</a>'


def _nodes(refs: list[NodeRef]) -> str:
    return "<br>".join(_e(r.describe()) for r in refs) or '<span class="muted">-</span>'


def _group_row(group: Group) -> str:
    notes = "<br>".join(_e(n) for n in group.notes)
    return (f'<tr id="g{group.id}" class="kind-{_e(group.kind)}" data-kind="{_e(group.kind)}">'
            f'<td class="n">{group.id}</td><td>{_e(group.kind)}</td>'
            f'<td>{_e(group.module or "-")}</td><td class="ops">{_nodes(group.left)}</td>'
            f'<td class="ops">{_nodes(group.right)}</td><td>{notes}</td></tr>')


def render_html(result: Comparison) -> str:
    """The whole report as one HTML document."""
    parts = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
             f"<title>{_e(result.title)}</title><style>{_CSS}</style></head><body>",
             f"<h1>{_e(result.title)}</h1>"]
    parts += [f"<p>{_e(line.strip())}</p>" for line in headline(result)[1:]]
    parts.append("<h2>Differences</h2><ul id=\"differences\">")
    parts += [f'<li><span class="flag">{_e(d.kind)}</span> {_e(d.module)} {_e(d.message)} '
              f"{_link(d.group)}</li>" for d in result.differences] or ["<li>none</li>"]
    parts.append("</ul>")
    matching = result.matching
    if matching is not None:
        first_of: dict[tuple[str, str], int] = {}
        for g in matching.groups:
            first_of.setdefault((g.kind, g.signature), g.id)
        parts.append("<h2>Decompositions and fusions</h2><table><tr><th>kind</th>"
                     "<th>left -&gt; right</th><th>groups</th><th>first</th></tr>")
        parts += [f"<tr><td>{_e(k)}</td><td class=\"ops\">{_e(s)}</td><td class=\"n\">{n}</td>"
                  f"<td>{_link(first_of[(k, s)])}</td></tr>"
                  for k, s, n in matching.decompositions()]
        parts.append("</table><h2>Op histogram difference</h2><table><tr><th>op</th>"
                     "<th>left</th><th>right</th></tr>")
        parts += [f"<tr><td>{_e(op)}</td><td class=\"n\">{a}</td><td class=\"n\">{b}</td></tr>"
                  for op, a, b in matching.histogram_difference()]
        parts.append("</table>")
    if result.costs is not None:
        c = result.costs
        parts.append(f"<h2>Cost by module (depth {c.depth}, {_e(c.target)}, {_e(c.dtype)})</h2>"
                     "<table><tr><th>module</th><th>mm FLOPs left</th><th>mm FLOPs right</th>"
                     "<th>delta</th><th>other FLOPs left</th><th>other FLOPs right</th>"
                     "<th>bytes left</th><th>bytes right</th><th>latency left</th>"
                     "<th>latency right</th></tr>")
        for row in [*c.rows, c.total]:
            flag = ' class="flag"' if row.flagged else ""
            parts.append(
                f"<tr><td>{_e(row.module)}</td><td class=\"n\">{human_count(row.left.matmul_flops)}"
                f"</td><td class=\"n\">{human_count(row.right.matmul_flops)}</td>"
                f"<td class=\"n\"><span{flag}>{_pct(row.left.matmul_flops, row.right.matmul_flops)}"
                f"</span></td><td class=\"n\">{human_count(row.left.other_flops)}</td>"
                f"<td class=\"n\">{human_count(row.right.other_flops)}</td>"
                f"<td class=\"n\">{human_bytes(row.left.bytes)}</td>"
                f"<td class=\"n\">{human_bytes(row.right.bytes)}</td>"
                f"<td class=\"n\">{_e(_time(row.left.latency))}</td>"
                f"<td class=\"n\">{_e(_time(row.right.latency))}</td></tr>")
        parts.append("</table>")
    n = result.numerics
    if n is not None and n.ran:
        parts.append(f"<h2>Numbers (rtol {n.rtol:g}, atol {n.atol:g})</h2><p>inputs: "
                     f"{_e('; '.join(n.inputs))}</p><table><tr><th>group</th><th>left value</th>"
                     "<th>right value</th><th>max abs</th><th>max rel</th><th></th></tr>")
        for v in n.values:
            mark = '<span class="flag">diverged</span>' if v.diverged else ""
            parts.append(f"<tr><td>{_link(v.pair.group)}</td><td>{_e(v.pair.left.name)}</td>"
                         f"<td>{_e(v.pair.right.name)}</td><td class=\"n\">{v.max_abs:.3g}</td>"
                         f"<td class=\"n\">{v.max_rel:.3g}</td><td>{mark}</td></tr>")
        parts.append("</table>")
    if matching is not None:
        parts.append('<h2>Groups</h2><p><input id="filter" placeholder="filter (module, op)">'
                     ' <label><input id="only" type="checkbox"> differences only</label> '
                     '<span id="shown" class="muted"></span></p>'
                     '<table id="groups"><thead><tr><th>#</th><th>kind</th><th>module</th>'
                     f"<th>{_e(result.left.label)}</th><th>{_e(result.right.label)}</th>"
                     "<th>notes</th></tr></thead><tbody>")
        parts += [_group_row(g) for g in matching.groups]
        parts.append("</tbody></table>")
    data = json.dumps({"left": result.left.label, "right": result.right.label})
    parts.append(f'<script type="application/json" id="meta">{_e(data)}</script>')
    if matching is not None:
        parts.append(f"<script>{_JS}</script>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_html(result: Comparison, path: Path) -> Path:
    """Write the report atomically; returns the path."""
    with atomic_file(path) as tmp:
        tmp.write_text(render_html(result), encoding="utf-8")
    return path
