"""StableHLO -> IR: JAX programs (text and portable artifacts from jax.export) through the
IR reference executor and through IR -> ONNX -> onnxruntime; torch-mlir's StableHLO
(dense_resource weights, arith.constant, its gather and transposed-conv forms); and
StableHLO -> IR -> StableHLO round trips checked by the reference interpreter."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from jax_programs import JaxProgram, export_text, programs
from shlotools import assert_close, opaque_ops, total_macs

from irbridge.converters.stablehlo import (
    build_module,
    evaluate,
    export_stablehlo,
    from_mlir,
    import_stablehlo,
    import_stablehlo_with_report,
)
from irbridge.executor import run_model
from irbridge.verify import verify

PROGRAMS = programs()
NAMES = sorted(PROGRAMS)


@pytest.fixture(scope="module")
def exported() -> dict[str, tuple[str, bytes, list[np.ndarray]]]:
    return {name: export_text(PROGRAMS[name]) for name in NAMES}


def _imported(source: str | bytes) -> object:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing may become opaque
        return from_mlir(source)


@pytest.mark.parametrize("kind", ["text", "artifact"])
@pytest.mark.parametrize("name", NAMES)
def test_jax_program_through_the_executor(name: str, kind: str,
                                          exported: dict[str, tuple]) -> None:
    text, artifact, expected = exported[name]
    model = _imported(text if kind == "text" else artifact)
    assert not [p for p in verify(model) if p.severity == "error"]  # type: ignore[arg-type]
    assert not opaque_ops(model)  # type: ignore[arg-type]
    got = run_model(model, PROGRAMS[name].args)  # type: ignore[arg-type]
    assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_jax_patterns_are_recognised(exported: dict[str, tuple]) -> None:
    """Costs depend on recognising matmuls, convolutions with groups and pools."""
    ops = {name: {n.op for _, n in from_mlir(exported[name][1]).all_nodes()} for name in NAMES}
    assert {"conv", "max_pool", "avg_pool"} <= ops["cnn"]
    assert "matmul" in ops["attention"] and "matmul" in ops["mlp"]
    assert {"argmax", "argmin", "cumsum", "sort", "topk", "reduce_prod"} <= ops["reductions"]
    assert {"gather", "gather_elements", "scatter_elements", "erf"} <= ops["indexing"]
    assert {"loop", "if"} <= ops["control"]
    cnn = from_mlir(exported["cnn"][1])
    convs = [n for n in cnn.graph.nodes if n.op == "conv"]
    assert [n.attrs.get("groups", 1) for n in convs] == [1, 8]
    # 2x8x8 outputs of 8 channels from 3x3x3 (dense) and 3x3x1 (depthwise) kernels + fc
    assert total_macs(cnn) == 2 * 8 * 8 * 8 * 27 + 2 * 8 * 8 * 8 * 9 + 2 * 32 * 5


@pytest.mark.parametrize("name", NAMES)
def test_jax_program_through_onnxruntime(name: str, exported: dict[str, tuple],
                                         tmp_path: Path) -> None:
    onnx_export = pytest.importorskip("irbridge.converters.onnx").export_onnx
    ort = pytest.importorskip("onnxruntime")
    _, artifact, expected = exported[name]
    model = from_mlir(artifact)
    path = onnx_export(model, tmp_path / f"{name}.onnx")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {i.name: a for i, a in zip(session.get_inputs(), PROGRAMS[name].args, strict=True)}
    assert_close([np.asarray(o) for o in session.run(None, feeds)], expected, rtol=1e-4,
                 atol=1e-4)


@pytest.mark.parametrize("name", NAMES)
def test_stablehlo_ir_stablehlo_round_trip(name: str, exported: dict[str, tuple]) -> None:
    """JAX's StableHLO -> IR -> StableHLO gives JAX's outputs in the reference interpreter,
    and the second import has the same compute ops and MACs as the first."""
    text, _, expected = exported[name]
    first = from_mlir(text)
    built = build_module(first)
    got = evaluate(built, PROGRAMS[name].args)
    assert_close(got, expected, rtol=1e-4, atol=1e-4)
    second = from_mlir(built.artifact())
    assert total_macs(second) == total_macs(first)
    compute = {"conv", "matmul", "linear", "max_pool", "avg_pool", "sort", "cumsum", "argmax",
               "loop", "if", "gather", "gather_elements", "scatter_elements"}
    assert {n.op for _, n in second.all_nodes()} & compute == \
        {n.op for _, n in first.all_nodes()} & compute


def test_counted_while_loops_cost_their_trip_count() -> None:
    """JAX's scan and fori_loop are whiles on `i < N` of a counter from a constant: they
    import as loops of a constant trip count, so the analysis costs the body N times; a
    while on data keeps its cond and is costed once."""
    import jax
    import jax.numpy as jnp

    from irbridge.analysis.cost import cost_model

    w = np.random.default_rng(3).standard_normal((8, 8)).astype(np.float32)
    xs = np.random.default_rng(4).standard_normal((5, 8)).astype(np.float32)

    def scan(xs: jax.Array) -> tuple[jax.Array, jax.Array]:
        def step(c: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
            c = jnp.tanh(c @ w + x)
            return c, c * 2.0
        return jax.lax.scan(step, jnp.zeros(8, jnp.float32), xs)

    def fori(x: jax.Array) -> jax.Array:  # starts at 2: 7 - 2 = 5 iterations
        return jax.lax.fori_loop(2, 7, lambda i, c: c @ w, x)

    def data(x: jax.Array) -> jax.Array:
        return jax.lax.while_loop(lambda c: c.sum() < 100.0, lambda c: c @ w + 1.0, x)

    for fn, x in ((scan, xs), (fori, xs[0]), (data, np.abs(xs[0]))):
        text = jax.jit(fn).lower(x).as_text()
        model = from_mlir(text)
        [loop] = [n for n in model.graph.nodes if n.op == "loop"]
        expected = [np.asarray(e) for e in jax.tree_util.tree_leaves(jax.jit(fn)(x))]
        assert_close(run_model(model, [x]), expected, rtol=1e-4, atol=1e-4)
        assert_close(evaluate(build_module(model), [x]), expected, rtol=1e-4, atol=1e-4)
        macs = cost_model(model).total.macs
        if fn is data:  # data-dependent: cond kept, one [8] x [8,8] matmul counted
            assert loop.inputs[0] is None and loop.inputs[1] is not None
            assert macs == 64
        else:  # 5 iterations of one [8] x [8,8] matmul
            assert loop.inputs[1] is None
            assert loop.inputs[0] is not None and loop.inputs[0].producer is not None
            assert loop.inputs[0].producer.attrs["value"].data.item() == 5
            assert macs == 5 * 64


def test_import_files(tmp_path: Path, exported: dict[str, tuple]) -> None:
    text, artifact, expected = exported["mlp"]
    (tmp_path / "mlp.mlir").write_text(text)
    (tmp_path / "mlp.mlirbc").write_bytes(artifact)
    for path in (tmp_path / "mlp.mlir", tmp_path / "mlp.mlirbc"):
        model, report = import_stablehlo_with_report(path)
        assert model.name == "jit_mlp" and model.source_format == "stablehlo"
        assert_close(run_model(model, PROGRAMS["mlp"].args), expected, rtol=1e-4, atol=1e-4)
        assert report.ops["stablehlo.dot_general"] == 2 and not report.opaque
    assert import_stablehlo(tmp_path / "mlp.mlirbc").metadata["stablehlo.artifact_version"]
    node = next(n for n in import_stablehlo(tmp_path / "mlp.mlir").graph.nodes
                if n.op == "matmul")
    assert node.provenance.source_op == "stablehlo.dot_general"
    assert node.provenance.module_path.startswith("jit(mlp)")
    assert node.provenance.location is not None
    assert node.provenance.location.file.endswith("jax_programs.py")


def test_export_import_export_keeps_weights_names_and_numbers(tmp_path: Path) -> None:
    program: JaxProgram = PROGRAMS["cnn"]
    model = from_mlir(export_text(program)[1])
    path = export_stablehlo(model, tmp_path / "cnn.mlirbc")
    again = import_stablehlo(path)
    assert sorted(again.tensors) == sorted(model.tensors)
    assert [v.name for v in again.graph.inputs] == [v.name for v in model.graph.inputs]
    assert_close(run_model(again, program.args), run_model(model, program.args))


def test_torch_mlir_module() -> None:
    """torch-mlir's StableHLO (with arith.constant and dense_resource weights) imports
    without opaque nodes and computes what torch computes."""
    torch = pytest.importorskip("torch")
    fx = pytest.importorskip("torch_mlir.fx")

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
            self.bn = torch.nn.BatchNorm2d(4)
            self.up = torch.nn.ConvTranspose2d(4, 2, 2, stride=2)
            self.fc = torch.nn.Linear(4, 5)
            self.emb = torch.nn.Embedding(10, 5)

        def forward(self, x: object, ids: object) -> tuple[object, ...]:
            y = torch.relu(self.bn(self.conv(x)))
            pooled = torch.nn.functional.max_pool2d(y, 2)
            index = torch.zeros(1, 2, 4, 4, dtype=torch.long)
            return (self.fc(pooled.mean((2, 3))) + self.emb(ids).sum(1),
                    torch.nn.functional.avg_pool2d(y, 2), torch.gather(y, 1, index),
                    torch.softmax(y, -1), self.up(y), torch.cumsum(y, 1))

    torch.manual_seed(0)
    net = Net().eval()
    args = (torch.randn(1, 3, 4, 4), torch.tensor([[1, 2]]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module = fx.export_and_import(net, *args, output_type="stablehlo")
    text = str(module)
    assert "arith.constant" in text and "dense_resource" in text
    model = _imported(text)
    assert not opaque_ops(model)  # type: ignore[arg-type]
    ops = {n.op for _, n in model.all_nodes()}  # type: ignore[attr-defined]
    assert {"conv", "conv_transpose", "gather_elements", "cumsum", "max_pool"} <= ops
    with torch.no_grad():
        expected = [t.numpy() for t in net(*args)]
    assert_close(run_model(model, [a.numpy() for a in args]), expected,  # type: ignore[arg-type]
                 rtol=1e-4, atol=1e-5)


def _registry_examples() -> list[str]:
    from shlotools import NO_STABLEHLO_FORM, NOT_LOWERED

    from irbridge.ops.examples import examples

    # ops the exporter refuses are tested for that in test_stablehlo_export.py
    refused = NO_STABLEHLO_FORM | set(NOT_LOWERED)
    data_dependent = {"non_zero", "masked_select", "unique", "unique_consecutive"}
    return sorted(set(examples()) - data_dependent - {"loop"} - refused)


@pytest.mark.parametrize("name", _registry_examples())
def test_ir_stablehlo_ir_round_trip_of_every_op(name: str) -> None:
    """Each op's StableHLO imports back without opaque nodes and computes the same."""
    from shlotools import example_model, reference

    model, feeds = example_model(name)
    back = from_mlir(build_module(model).text())
    assert not opaque_ops(back)
    assert not [p for p in verify(back) if p.severity == "error"]
    assert [v.name for v in back.graph.inputs] == [v.name for v in model.graph.inputs]
    assert_close(run_model(back, feeds), reference(model, feeds))
