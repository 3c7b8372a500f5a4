"""The comparison as one object, and its plain renderings (JSON, Markdown, text lines).

`compare_models` runs matching, costs and numerics on two loaded sides; `Comparison.
differences` is the short list of what the report flags: failed captures, changed layers,
unmatched compute, nodes present on one side only, shape or dtype disagreements, modules
whose matmul-like FLOPs differ, and the first numeric divergence. Decompositions and
fusions are listed but not flagged: they are the expected differences between front-ends.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from irbridge.analysis.hardware import Target, resolve_target
from irbridge.compare.costs import CostComparison, CostRow, compare_costs
from irbridge.compare.match import Group, Matching, match
from irbridge.compare.numeric import ATOL, RTOL, Numerics, compare_numerics
from irbridge.compare.sources import Side
from irbridge.ops.registry import Category
from irbridge.sanitize import markdown as md
from irbridge.summary import human_bytes, human_count

QUIET = (Category.SHAPE, Category.CONSTANT, Category.DATA_MOVEMENT)
"""Categories of nodes that only move or view data: one side having such nodes the other
lacks (a reshape, a copy, a constant) is listed but not flagged."""
DEFAULT_TARGET = "h100"


@dataclass
class Difference:
    """One flagged finding, with the module it is about and the group to look at."""

    kind: str  # capture | inputs | changed | unmatched | shape | dtype | cost | numeric
    module: str
    message: str
    group: int | None = None


@dataclass
class Comparison:
    left: Side
    right: Side
    matching: Matching | None = None
    costs: CostComparison | None = None
    numerics: Numerics | None = None
    differences: list[Difference] = field(default_factory=list)

    @property
    def title(self) -> str:
        return f"{self.left.label} vs {self.right.label}"


def compare_models(left: Side, right: Side, *, target: Target | str = DEFAULT_TARGET,
                   depth: int | None = None, numerics: bool = True, rtol: float = RTOL,
                   atol: float = ATOL) -> Comparison:
    """Compare two sides. Bad input (a failed capture, unrelated models, inputs that do not
    fit) is reported in the result, never raised."""
    result = Comparison(left, right)
    for name, side in (("left", left), ("right", right)):
        if not side.ok:
            result.differences.append(Difference(
                "capture", "", f"{name} side {side.label} failed to capture: {side.error}"))
    if left.model is None or right.model is None:
        return result
    result.matching = match(left.model, right.model)
    chosen = resolve_target(target) if isinstance(target, str) else target
    right_paths = {id(b.node): a.path for a, b in result.matching.pairs if a.path != b.path}
    result.costs = compare_costs(left.model, right.model, chosen, depth, right_paths)
    if numerics:
        examples = left.examples or right.examples
        result.numerics = compare_numerics(left.model, right.model, result.matching, examples,
                                           rtol=rtol, atol=atol)
    result.differences += _differences(result)
    return result


def _differences(result: Comparison) -> list[Difference]:
    found: list[Difference] = []
    matching = result.matching
    assert matching is not None
    for group in matching.groups:
        if group.kind == "changed":
            found.append(Difference("changed", group.module, "; ".join(group.notes), group.id))
        elif group.kind in ("left-only", "right-only"):
            refs = group.left or group.right
            loud = [r for r in refs if r.category not in QUIET]
            if loud:
                side = "left" if group.left else "right"
                found.append(Difference("unmatched", group.module,
                                        f"only on the {side}: {_group_ops(group)}", group.id))
        elif any(n.startswith("unmatched compute") for n in group.notes):
            found.append(Difference("unmatched", group.module, "; ".join(group.notes), group.id))
    for pair in matching.disagreements():
        what = "shape" if not pair.shape_equal else "dtype"
        found.append(Difference(what, matching.groups[pair.group].module,
                                f"{pair.left.name} {pair.left.type} vs {pair.right.name} "
                                f"{pair.right.type}", pair.group))
    left_ratio, right_ratio = (matching.compute_match_ratio(s) for s in ("left", "right"))
    if left_ratio < 1 or right_ratio < 1:
        found.append(Difference("unmatched", "", f"{left_ratio:.0%} of compute nodes matched on "
                                f"the left, {right_ratio:.0%} on the right"))
    if result.costs is not None:
        for row in result.costs.rows:
            if row.flagged:
                found.append(Difference("cost", row.module, _cost_message(row)))
    numerics = result.numerics
    if numerics is not None and not numerics.ran:
        found.append(Difference("inputs", "", f"numbers not compared: {numerics.reason}"))
    elif numerics is not None and numerics.first_divergence is not None:
        first = numerics.first_divergence
        origin = divergence_origin(matching, numerics, first.pair.group)
        cause = "" if origin.id == first.pair.group else \
            f"; it follows group {origin.id} ({origin.kind}), which has no matched value"
        found.append(Difference(
            "numeric", origin.module,
            f"numbers first diverge at {first.pair.left.name} / {first.pair.right.name} "
            f"(max abs error {first.max_abs:.3g}, max rel error {first.max_rel:.3g}, "
            f"tolerance {numerics.atol:g} + {numerics.rtol:g} x {first.scale:.3g}){cause}",
            origin.id))
    elif numerics is not None:
        for name_l, name_r, what in numerics.diverged_outputs:
            found.append(Difference(
                "numeric", "", f"model output {name_l} / {name_r} differs ({what}) where every "
                "matched value agrees: the cause is in nodes the matching did not pair"))
    return found


def divergence_origin(matching: Matching, numerics: Numerics, group_id: int) -> Group:
    """Where a divergence starts: the first diverging value may only be the first one
    compared after the cause (a node present on one side only, or a changed layer, has no
    matched value of its own). Walk upstream from the diverging group on both sides, up to
    values that agreed, and return the earliest changed or one-sided group found there;
    else the diverging group itself."""
    agreed = {id(v.pair.left) for v in numerics.values if not v.diverged} | \
        {id(v.pair.right) for v in numerics.values if not v.diverged}
    group_of = matching.group_of()
    start = matching.groups[group_id]
    seen: set[int] = set()
    stack = [r.node for r in start.left + start.right]
    suspects: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        group = matching.groups[group_of[id(node)]]
        if group.kind in ("changed", "left-only", "right-only"):
            suspects.add(group.id)
        for value in node.inputs:
            if value is not None and value.producer is not None and id(value) not in agreed:
                stack.append(value.producer)
    return matching.groups[min(suspects)] if suspects else start


def _group_ops(group: Group) -> str:
    refs = group.left or group.right
    return ", ".join(r.describe() for r in refs[:6]) + (
        f" and {len(refs) - 6} more" if len(refs) > 6 else "")


def _cost_message(row: CostRow) -> str:
    return (f"matmul-like FLOPs {human_count(row.left.matmul_flops)} vs "
            f"{human_count(row.right.matmul_flops)} ({_pct(row.left.matmul_flops, row.right.matmul_flops)})")


def _pct(left: float, right: float) -> str:
    if left == right:
        return "="
    if left == 0:
        return "new"
    return f"{(right - left) / left:+.2%}"


def _num(value: float) -> float | str:
    return value if math.isfinite(value) else str(value)


# -- JSON ----------------------------------------------------------------------------------------

def to_dict(result: Comparison) -> dict[str, Any]:
    """Everything the report shows, as plain JSON data."""
    data: dict[str, Any] = {
        "left": _side_dict(result.left), "right": _side_dict(result.right),
        "differences": [d.__dict__ for d in result.differences],
    }
    matching = result.matching
    if matching is not None:
        data["matching"] = {
            "mode": matching.mode,
            "compute_matched": {s: dict(zip(("matched", "total"), matching.compute_counts(s),
                                            strict=True)) for s in ("left", "right")},
            "histogram_difference": [{"op": op, "left": a, "right": b}
                                     for op, a, b in matching.histogram_difference()],
            "decompositions": [{"kind": k, "signature": s, "count": n}
                               for k, s, n in matching.decompositions()],
            "groups": [{
                "id": g.id, "kind": g.kind, "module": g.module, "signature": g.signature,
                "notes": g.notes,
                "left": [_ref_dict(r) for r in g.left], "right": [_ref_dict(r) for r in g.right],
                "values": [{"left": p.left.name, "right": p.right.name,
                            "left_type": str(p.left.type), "right_type": str(p.right.type)}
                           for p in g.values],
            } for g in matching.groups],
            "renamed_values": len(matching.renamed()),
        }
    if result.costs is not None:
        costs = result.costs
        data["costs"] = {"target": costs.target, "dtype": costs.dtype, "depth": costs.depth,
                         "rows": [_row_dict(r) for r in [*costs.rows, costs.total]],
                         "warnings": costs.warnings}
    if result.numerics is not None:
        n = result.numerics
        first = n.first_divergence
        data["numerics"] = {
            "ran": n.ran, "reason": n.reason, "rtol": n.rtol, "atol": n.atol,
            "inputs": n.inputs, "compared": len(n.values), "skipped": n.skipped,
            "max_abs": _num(n.max_abs), "max_rel": _num(n.max_rel),
            "first_divergence": None if first is None else {
                "group": first.pair.group, "left": first.pair.left.name,
                "right": first.pair.right.name, "max_abs": _num(first.max_abs),
                "max_rel": _num(first.max_rel)},
            "outputs": [{"left": a, "right": b, "max_abs": _num(x), "max_rel": _num(y)}
                        for a, b, x, y in n.outputs],
            "values": [{"group": v.pair.group, "left": v.pair.left.name,
                        "right": v.pair.right.name, "max_abs": _num(v.max_abs),
                        "max_rel": _num(v.max_rel), "diverged": v.diverged} for v in n.values],
        }
    return data


def _side_dict(side: Side) -> dict[str, Any]:
    model = side.model
    return {"spec": side.spec, "how": side.how, "label": side.label, "ok": side.ok,
            "error": side.error, "seconds": round(side.seconds, 3),
            "nodes": sum(1 for _ in model.all_nodes()) if model is not None else 0,
            "graphs": len(model.graphs) if model is not None else 0}


def _ref_dict(ref: Any) -> dict[str, Any]:
    return {"id": ref.node.id, "op": ref.op, "module": ref.path, "graph": ref.graph,
            "source_op": ref.node.provenance.source_op,
            "outputs": [f"{v.name}: {v.type}" for v in ref.node.outputs]}


def _row_dict(row: CostRow) -> dict[str, Any]:
    return {"module": row.module, "left": row.left.__dict__, "right": row.right.__dict__,
            "matmul_flops_delta": row.matmul_delta, "flagged": row.flagged}


def to_json(result: Comparison) -> str:
    return json.dumps(to_dict(result), indent=2)


# -- text and Markdown -----------------------------------------------------------------------

def headline(result: Comparison) -> list[str]:
    """The few lines that say how the two sides relate."""
    lines = [result.title]
    matching = result.matching
    if matching is None:
        lines += [f"  {d.message}" for d in result.differences]
        return lines
    (lm, lt), (rm, rt) = matching.compute_counts("left"), matching.compute_counts("right")
    left_pct = f"{lm / lt:.1%}" if lt else "n/a"
    right_pct = f"{rm / rt:.1%}" if rt else "n/a"
    lines.append(f"  matched by {matching.mode}: {left_pct} of compute nodes matched on the "
                 f"left ({lm}/{lt}), {right_pct} on the right ({rm}/{rt}); "
                 f"{len(matching.groups)} groups")
    if result.costs is not None:
        total = result.costs.total
        lines.append(f"  matmul-like FLOPs {total.left.matmul_flops:,} vs "
                     f"{total.right.matmul_flops:,} ({_pct(total.left.matmul_flops, total.right.matmul_flops)}); "
                     f"latency on {result.costs.target} {_time(total.left.latency)} vs "
                     f"{_time(total.right.latency)}")
    n = result.numerics
    if n is not None:
        if not n.ran:
            lines.append(f"  numbers not compared: {n.reason}")
        else:
            first = n.first_divergence
            where = "none" if first is None else \
                f"group {first.pair.group} ({matching.groups[first.pair.group].module or '-'})"
            outputs = f"; model outputs differ: {len(n.diverged_outputs)}" \
                if n.diverged_outputs else ""
            lines.append(f"  numbers: {len(n.values)} matched values, max abs error "
                         f"{n.max_abs:.3g}, max rel error {n.max_rel:.3g}; first divergence: "
                         f"{where}{outputs}")
    return lines


def _time(seconds: float) -> str:
    return human_count(seconds, "s") if seconds >= 1 else f"{seconds * 1e6:.3g} µs"


def to_markdown(result: Comparison) -> str:
    """The report as Markdown: headline, differences, decompositions, costs, groups."""
    out = [f"# {md(result.title)}", ""]
    out += [md(line.strip()) if i else f"**{md(line)}**" for i, line in enumerate(headline(result))]
    out += ["", "## Differences", ""]
    out += [f"- **{md(d.kind)}** {md(d.module or '')}: {md(d.message)}"
            for d in result.differences] or \
        ["- none"]
    matching = result.matching
    if matching is not None:
        out += ["", "## Decompositions and fusions", "", "| kind | left -> right | groups |",
                "|---|---|---|"]
        out += [f"| {md(k)} | {md(s)} | {n} |" for k, s, n in matching.decompositions()]
        out += ["", "## Op histogram difference", "", "| op | left | right |", "|---|---|---|"]
        out += [f"| {md(op)} | {a} | {b} |" for op, a, b in matching.histogram_difference()]
    if result.costs is not None:
        c = result.costs
        out += ["", md(f"## Cost by module (depth {c.depth}, {c.target}, {c.dtype})"), "",
                "| module | mm FLOPs left | mm FLOPs right | delta | other FLOPs left | "
                "other FLOPs right | bytes left | bytes right | latency left | latency right |",
                "|---|---|---|---|---|---|---|---|---|---|"]
        for row in [*c.rows, c.total]:
            out.append(f"| {md(row.module)} | {human_count(row.left.matmul_flops)} | "
                       f"{human_count(row.right.matmul_flops)} | "
                       f"{_pct(row.left.matmul_flops, row.right.matmul_flops)} | "
                       f"{human_count(row.left.other_flops)} | {human_count(row.right.other_flops)} | "
                       f"{human_bytes(row.left.bytes)} | {human_bytes(row.right.bytes)} | "
                       f"{_time(row.left.latency)} | {_time(row.right.latency)} |")
    if matching is not None:
        out += ["", "## Groups", "", "| # | kind | module | left | right |", "|---|---|---|---|---|"]
        for g in matching.groups:
            out.append(f"| {g.id} | {md(g.kind)} | {md(g.module or '-')} | "
                       f"{md(_ops_cell(g, 'left'))} | {md(_ops_cell(g, 'right'))} |")
    return "\n".join(out) + "\n"


def _ops_cell(group: Group, side: str) -> str:
    ops = group.ops(side)
    return ", ".join(op if n == 1 else f"{op} x{n}" for op, n in ops.items()) or "-"
