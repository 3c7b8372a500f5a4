"""`export_stablehlo` to `.mlir` streams each large weight's hex literal into the file instead
of building the whole text in memory; `.mlirbc` refuses models past its stated size."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from irbridge.converters.pytorch import capture
from irbridge.converters.stablehlo import evaluate, export_stablehlo, to_mlir_text
from irbridge.converters.stablehlo.export import PORTABLE_WEIGHT_LIMIT
from irbridge.dtypes import DType
from irbridge.errors import ExportError
from irbridge.ir import Graph, Model, Tensor, TensorType


class _Mixed(nn.Module):
    """Weights of every kind the writer meets: streamed (more than 100 elements, float and
    int64), small (printed as a list), a splat (all ones) and a table read by an index."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.lin1 = nn.Linear(16, 32, dtype=dtype)  # 512 + 32 elements
        self.lin2 = nn.Linear(32, 8, dtype=dtype)  # 256 + 8
        self.scale = nn.Parameter(torch.ones(4, 32, dtype=dtype))  # 128 equal: a splat
        self.table = nn.Parameter(torch.randn(128, 8, dtype=dtype))
        self.register_buffer("idx", torch.arange(120) * 7 % 128)  # int64, 120 elements

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin2(torch.nn.functional.gelu(self.lin1(x) * self.scale))
        return h + self.table.index_select(0, self.idx).sum(0)


@pytest.mark.parametrize(("dtype", "tol"), [
    (torch.float32, 1e-5),  # float32 sums in another order: a few ulps
    # bfloat16 keeps 8 bits: each matmul and sum rounds intermediates at ~4e-3 relative,
    # differently in torch (float32 accumulation) and the interpreter
    (torch.bfloat16, 5e-2),
])
def test_streamed_mlir_is_the_in_memory_text_and_runs(tmp_path: Path, dtype: torch.dtype,
                                                       tol: float) -> None:
    torch.manual_seed(0)
    module = _Mixed(dtype).eval()
    x = torch.randn(2, 4, 16, dtype=dtype)
    model = capture(module, (x,), frontend="export", weights=True).model
    path = export_stablehlo(model, tmp_path / "m.mlir")
    data = path.read_bytes()
    assert data == to_mlir_text(model).encode("utf-8")
    assert data.count(b'dense<"0x') >= 4  # lin1.weight, lin2.weight, table, idx streamed
    with torch.no_grad():
        want = module(x).float().numpy()
    feed = x.view(torch.int16).numpy().view(DType.BFLOAT16.numpy) if dtype == torch.bfloat16 \
        else x.numpy()
    (got,) = evaluate(path, [feed])
    np.testing.assert_allclose(np.asarray(got, np.float32), want, rtol=tol, atol=tol)
    assert [p.name for p in tmp_path.iterdir()] == ["m.mlir"]  # no temporary file left


def test_mlir_export_holds_the_weights_about_once(tmp_path: Path) -> None:
    """One 4096x8192 float32 weight (128 MiB). The in-memory path held MLIR's copy, the
    text (twice the bytes in hex) and its UTF-8 encoding: over 5x the weight on top of the
    model. Streamed, the export adds the hex of one chunk (4 MiB -> 8 MiB, twice: upper case)
    and the text around the weights: measured 0.16x, allowed 0.25x the weight."""
    script = textwrap.dedent(
        f"""
        import resource, sys
        import numpy as np
        from irbridge.builder import GraphBuilder
        from irbridge.converters.stablehlo import export_stablehlo
        from irbridge.ir import Graph, Model, Tensor, TensorType
        from irbridge.dtypes import DType
        def matmul(rows, cols):
            graph = Graph()
            model = Model(graphs=[graph], name="big")
            b = GraphBuilder(graph, model)
            x = graph.add_input("x", TensorType(DType.FLOAT32, (1, rows)))
            weight = model.add_tensor(Tensor.from_array(
                "w", np.random.default_rng(0).standard_normal((rows, cols), np.float32)))
            graph.set_outputs([b.op("matmul", [x, graph.add_parameter(weight)])])
            return model, weight
        # warm up the libraries on a small model, then build the big one
        export_stablehlo(matmul(64, 64)[0], {str(tmp_path / "tiny.mlir")!r})
        model, weight = matmul(4096, 8192)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        export_stablehlo(model, {str(tmp_path / "big.mlir")!r})
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
        print(grown / weight.nbytes)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "big.mlir").stat().st_size > 2 * 4096 * 8192 * 4
    ratio = float(done.stdout.split()[-1])
    assert ratio < 0.25, f"the export grew the process by {ratio:.2f}x the weight"


def test_portable_artifact_refuses_past_its_limit(tmp_path: Path) -> None:
    graph = Graph()
    model = Model(graphs=[graph], name="huge")
    x = graph.add_input("x", TensorType(DType.FLOAT32, (1,)))
    count = PORTABLE_WEIGHT_LIMIT // 4 + 1  # one element past the limit, as float32
    # a broadcast view: the size of a big weight without its memory
    model.add_tensor(Tensor("w", DType.FLOAT32, (count,),
                            np.broadcast_to(np.float32(1.0), (count,))))
    graph.set_outputs([x])
    with pytest.raises(ExportError, match=r"huge\.mlirbc: 2\.00 GiB of weights .* write "
                                          r"\.mlir text .* weights_as_args=True") as info:
        export_stablehlo(model, tmp_path / "huge.mlirbc")
    assert "\n" not in str(info.value.message)
    assert list(tmp_path.iterdir()) == []
