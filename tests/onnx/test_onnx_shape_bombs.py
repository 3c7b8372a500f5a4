"""Small ONNX files whose declared shapes are huge must not make irbridge allocate what they
declare: an `EyeLike` of a [40000, 40000] tensor, an `Einsum` diagonal of one, a batched
`GatherND` over 10^8 rows (import), an `Expand` of a 1-element weight to [40000, 40000]
folded by the exporter's optimizer, random examples of a 6 GB input (`compare`,
`--verify`). Each ran to 6-14 GB (or was refused as out of memory under a cap).

Arrays a handler makes up from declared dims are constants only up to
`importer.SYNTHESIS_LIMIT` elements and nodes the graph computes when it runs past it; the
node path is checked here against onnxruntime on ONNX's own test cases with the limit at 0.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from hostile_cli import MEMORY_CAP, run_cli
from onnx import TensorProto, helper, numpy_helper

from irbridge.converters.onnx import import_onnx
from irbridge.converters.onnx import importer as onnx_importer

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import onnx_conformance as conformance  # noqa: E402

N = 40_000
"""[N, N] float32 is 6 GB: past the children's 2 GiB address-space cap."""

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _init(name: str, value: object, dtype: type = np.int64) -> TensorProto:
    return numpy_helper.from_array(np.array(value, dtype), name)


def _sum_of(x: str) -> list[onnx.NodeProto]:
    """x -> Relu -> ReduceSum -> y: the huge value is an intermediate, not an output."""
    return [helper.make_node("Relu", [x], ["r"]),
            helper.make_node("ReduceSum", ["r"], ["y"], keepdims=0)]


BOMBS: dict[str, tuple[list[onnx.NodeProto], list[TensorProto], list[onnx.ValueInfoProto],
                       list[int]]] = {
    # folded by the exporter's optimizer (all inputs are initializers)
    "expand": ([helper.make_node("Expand", ["v", "sh"], ["z"]), *_sum_of("z")],
               [_init("v", [1.0], np.float32), _init("sh", [N, N])], [], []),
    "constant_of_shape": ([helper.make_node("ConstantOfShape", ["sh"], ["z"], value=_init(
        "one", [1.0], np.float32)), *_sum_of("z")], [_init("sh", [N, N])], [], []),
    "tile": ([helper.make_node("Tile", ["v", "rp"], ["z"]), *_sum_of("z")],
             [_init("v", np.ones((2, 2)), np.float32), _init("rp", [N // 2, N // 2])], [], []),
    "outer_matmul": ([helper.make_node("MatMul", ["a", "b"], ["z"]), *_sum_of("z")],
                     [_init("a", np.ones((N, 1)), np.float32),
                      _init("b", np.ones((1, N)), np.float32)], [], []),
    "broadcast_add": ([helper.make_node("Add", ["a", "b"], ["z"]), *_sum_of("z")],
                      [_init("a", np.ones((N, 1)), np.float32),
                       _init("b", np.ones((1, N)), np.float32)], [], []),
    "pad": ([helper.make_node("Pad", ["v", "p"], ["z"]), *_sum_of("z")],
            [_init("v", [[1.0]], np.float32), _init("p", [0, 0, N, N])], [], []),
    "one_hot": ([helper.make_node("OneHot", ["i", "d", "vv"], ["z"]), *_sum_of("z")],
                [_init("i", np.arange(N)), _init("d", [N]), _init("vv", [0, 1], np.float32)],
                [], []),
    # made up by import handlers from declared dims
    "eye_like": ([helper.make_node("ConstantOfShape", ["sh"], ["e"]),
                  helper.make_node("EyeLike", ["e"], ["z"]), *_sum_of("z")],
                 [_init("sh", [N, N])], [], []),
    "einsum_diagonal": ([helper.make_node("Einsum", ["x"], ["y"], equation="ii->i")], [],
                        [helper.make_tensor_value_info("x", F, [N, N])], [N]),
    "gather_nd_batched": ([helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=1)], [],
                          [helper.make_tensor_value_info("x", F, [N * N // 16, 3]),
                           helper.make_tensor_value_info("i", I64, [N * N // 16, 1])],
                          [N * N // 16]),
}


def _write(folder: Path, name: str) -> Path:
    nodes, inits, inputs, out_shape = BOMBS[name]
    graph = helper.make_graph(nodes, name, inputs,
                              [helper.make_tensor_value_info("y", F, out_shape)], inits)
    path = folder / f"{name}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    assert path.stat().st_size < 1 << 20   # under 1 MB, declaring 6 GB
    return path


_CHILD = """
import json, sys
from irbridge.analysis import analyze, resolve_targets
from irbridge.converters.onnx import import_onnx, to_onnx
from irbridge.converters.stablehlo import to_mlir_text
done = {}
for path in sys.argv[1:]:
    model = import_onnx(path)
    analyze(model, resolve_targets("h100-sxm"))
    proto = to_onnx(model)
    to_mlir_text(model)
    done[path] = [n.op_type for n in proto.graph.node]
print(json.dumps(done))
"""


def test_small_files_declaring_huge_arrays_stay_small(tmp_path: Path) -> None:
    """Import, analysis and both exports of every bomb in one child under a 2 GiB
    address-space cap (each needed 6-14 GB before)."""
    paths = [str(_write(tmp_path, name)) for name in BOMBS]
    limit = f"import resource; resource.setrlimit(resource.RLIMIT_AS, ({MEMORY_CAP}, {MEMORY_CAP}))"
    proc = subprocess.run([sys.executable, "-c", f"{limit}\n{_CHILD}", *paths],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ops = json.loads(proc.stdout.strip().splitlines()[-1])
    # the exporter kept the huge intermediates as nodes instead of folding them
    assert "Expand" in ops[paths[0]] and "Tile" in ops[paths[2]]
    assert "MatMul" in ops[paths[3]] and "Add" in ops[paths[4]]


def test_export_of_an_expand_bomb_through_the_cli(tmp_path: Path) -> None:
    path = _write(tmp_path, "expand")
    out = tmp_path / "out.onnx"
    result = run_cli("export", path, "--to", "onnx", "-o", out, cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert out.stat().st_size < 4096   # no folded 6 GB initializer


@pytest.mark.parametrize("command", ["compare", "verify"])
def test_random_examples_of_a_huge_declared_input_are_refused(tmp_path: Path,
                                                              command: str) -> None:
    """A 6 GB declared input is not made up (that was the 12 GB float64 draw): compare says
    the numbers were not compared (a difference, exit 1), --verify fails (exit 1) and
    writes nothing, both naming the input and the override."""
    path = _write(tmp_path, "einsum_diagonal")
    args = ("compare", path, path) if command == "compare" else \
        ("export", path, "--to", "onnx", "-o", tmp_path / "o.onnx", "--verify")
    result = run_cli(*args, cwd=tmp_path, timeout=120)
    assert result.returncode == 1, result.stderr[-2000:]
    assert "Traceback" not in result.stderr and "out of memory" not in result.stderr
    text = result.stdout + result.stderr
    assert "the model's inputs take 6.0 GiB" in text and "'x', f32[40000,40000]" in text
    assert "random examples are made up to 2.0 GiB (set IRBRIDGE_MAX_MEMORY" in text
    if command == "verify":
        assert "verify: FAIL" in result.stdout and not (tmp_path / "o.onnx").exists()
    else:
        assert "numbers not compared" in result.stdout


def test_random_examples_keep_their_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Examples are drawn a million at a time into the input's dtype: the same numbers as
    one float64 draw cast afterwards (what compare and --verify fed before)."""
    from irbridge.compare.numeric import _random_for
    from irbridge.dtypes import DType
    from irbridge.ir import TensorType, Value

    for dtype in (DType.FLOAT32, DType.FLOAT16, DType.INT64, DType.INT8, DType.COMPLEX64):
        shape = (3, 700_001)
        got = _random_for(Value("x", TensorType(dtype, shape)), np.random.default_rng(0))
        rng = np.random.default_rng(0)
        if dtype.is_integer:
            want = rng.integers(0, 10, size=shape).astype(dtype.numpy)
        elif dtype == DType.COMPLEX64:
            want = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(
                dtype.numpy)
        else:
            want = rng.standard_normal(shape).astype(dtype.numpy)
        assert got.dtype == want.dtype and np.array_equal(got, want), dtype


SYNTHESISING_OPS = ("EyeLike", "Einsum", "GatherND", "RNN", "GRU", "LSTM")


@pytest.fixture(scope="module")
def synthesising_cases() -> list[conformance.Case]:
    cases = [c for c in conformance.node_cases() if c.operator in SYNTHESISING_OPS]
    assert {c.operator for c in cases} == set(SYNTHESISING_OPS)
    return cases


def test_run_time_synthesis_agrees_with_onnxruntime(
        synthesising_cases: list[conformance.Case], monkeypatch: pytest.MonkeyPatch) -> None:
    """ONNX's own cases of the handlers that make up arrays, with SYNTHESIS_LIMIT at 0 (every
    such array a node): each case fares as it does with constants, on both the IR executor
    and onnxruntime running the exported file."""
    before = {c.name: conformance.run_case(c) for c in synthesising_cases}
    monkeypatch.setattr(onnx_importer, "SYNTHESIS_LIMIT", 0)
    made_nodes = set()
    for case in synthesising_cases:
        after = conformance.run_case(case)
        was = before[case.name]
        assert (after.status, after.ir_status) == (was.status, was.ir_status), \
            (case.name, after.reason, after.ir_reason)
        try:
            model = import_onnx_proto(case.model)
        except Exception:   # the statuses above already cover it
            continue
        if any(n.op in ("range", "full") for n in model.graphs[0].nodes):
            made_nodes.add(case.operator)
    passing = sum(r.status == "pass" for r in before.values())
    assert passing >= 30, passing
    # the node path was taken where the handler makes arrays up for these cases
    assert {"EyeLike", "Einsum", "GatherND", "RNN", "GRU", "LSTM"} <= made_nodes, made_nodes


def import_onnx_proto(proto: onnx.ModelProto) -> object:
    from irbridge.converters.onnx import from_onnx

    return from_onnx(proto)[0]


def test_einsum_diagonal_of_a_declared_huge_input_imports_as_nodes(tmp_path: Path) -> None:
    model = import_onnx(_write(tmp_path, "einsum_diagonal"))
    nodes = model.graphs[0].nodes
    assert [n.op for n in nodes if n.op != "constant"] == ["equal", "cast", "mul",
                                                            "reduce_sum"]
    # the mask is computed from two 40k ranges when the graph runs, not stored: 1.6e9
    # elements made up at import time before
    biggest = max(int(np.prod(n.outputs[0].type.static_shape())) for n in nodes
                  if n.op == "constant")
    assert biggest == N and not model.tensors
