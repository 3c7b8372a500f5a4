"""Hand-made hostile files of issue 12 item 13 for `analyze` and `compare`: huge,
negative and overflowing dims and attributes, duplicate node ids and backward graph links
give one line naming the node or value, exit 2 (compare: the side's error, exit 1 as for
any side that fails to load), never a traceback or an assertion."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from outputs.ir_models import cnn
from typer.testing import CliRunner

from irbridge import serde
from irbridge.cli.main import app
from irbridge.dtypes import DType
from irbridge.ir import Graph, GraphLink, Model, TensorType

runner = CliRunner()


def _input_dim(dim: int) -> Callable[[Model], None]:
    def edit(model: Model) -> None:
        x = model.graphs[0].inputs[0]
        assert x.type is not None
        x.type = TensorType(x.type.dtype, (dim, 3, 16, 16))
    return edit


def _all_outputs_dim(dim: int) -> Callable[[Model], None]:
    def edit(model: Model) -> None:
        for node in model.graphs[0].nodes:
            for v in node.outputs:
                if v.type is not None and v.type.shape:
                    v.type = TensorType(v.type.dtype, (dim, *v.type.shape[1:]))
    return edit


def _pads(model: Model) -> None:
    model.graphs[0].nodes[0].attrs["pads"] = (2**40,) * 4


def _duplicate_ids(model: Model) -> None:
    nodes = model.graphs[0].nodes
    nodes[2].id = nodes[1].id


def _backward_link(model: Model) -> None:
    second = Graph("second")
    y = second.add_input("fc", TensorType(DType.FLOAT32, (2, 10)))
    second.set_outputs([y])
    model.graphs.insert(0, second)  # graph 0 now reads graph 1's output
    model.links.append(GraphLink(1, "fc", 0, "fc"))


CASES = {
    "dim 2^62": (_input_dim(2**62), ("has dim 4611686018427387904, past the analysis limit",
                                      "infers f32[4611686018427387904,")),
    "negative input dim": (_input_dim(-5), "negative dim -5"),  # serde or analysis
    "negative output dims": (_all_outputs_dim(-2), "has a negative dim -2"),
    "huge output dims": (_all_outputs_dim(2**47), ("elements, past the analysis limit 2^56",
                                                   "140737488355328")),
    "pads 2^40": (_pads, "node #"),
    "duplicate node ids": (_duplicate_ids, ("has the same id as node", "is also used by")),
    "backward graph link": (_backward_link, ("does not go forward", "link")),
}


@pytest.mark.parametrize("name", list(CASES))
def test_analyze_refuses_with_one_line(tmp_path: Path, name: str) -> None:
    edit, message = CASES[name]
    model = cnn()
    edit(model)
    path = serde.save(model, tmp_path / "hostile.irb", weights="none")
    result = runner.invoke(app, ["analyze", str(path), "-o", str(tmp_path / "out.irb")])
    lines = result.stderr.splitlines()
    if name == "pads 2^40" and result.exit_code == 0:
        # the shapes stored in the file stand; then the costs must be plain, in range
        assert "-" not in result.stdout.split("MACs")[0][-1:]
        return
    assert result.exit_code == 2, result.output
    # the reader's structural check (irbridge.verify, run on every .irb read) or the
    # analysis' own input check may refuse first; either names the problem in one line
    needles = message if isinstance(message, tuple) else (message,)
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert any(n in lines[0] for n in needles), lines
    assert "internal error" not in lines[0]
    assert not (tmp_path / "out.irb").exists()


@pytest.mark.parametrize("name", ["negative input dim", "negative output dims", "dim 2^62",
                                  "duplicate node ids"])
def test_compare_reports_the_side_with_one_line(tmp_path: Path, name: str) -> None:
    edit, message = CASES[name]
    good = serde.save(cnn(), tmp_path / "good.irb")
    model = cnn()
    edit(model)
    path = serde.save(model, tmp_path / "hostile.irb")
    result = runner.invoke(app, ["compare", str(good), str(path), "--format", "json"])
    assert result.exit_code == 2, result.output   # an unreadable file is bad input
    assert "Traceback" not in result.output and "internal error" not in result.output
    needles = message if isinstance(message, tuple) else (message,)
    assert any(n in result.output for n in needles), result.output


def test_cost_figures_out_of_range_are_refused() -> None:
    """The cost guard itself: negative or 2^64-sized figures name the node."""
    from irbridge.analysis.check import check_cost
    from irbridge.errors import IrbridgeError
    from irbridge.ir import Cost

    node = cnn().graphs[0].nodes[0]
    check_cost(node, Cost(macs=2**62))
    for bad in (Cost(macs=-1), Cost(bytes_read=2**64), Cost(other_flops=2**63)):
        with pytest.raises(IrbridgeError, match=r"node #\d+ conv: .* out of range"):
            check_cost(node, bad)
