"""Shape-polymorphic JAX exports (`jax.export` with `export.symbolic_shape`), read with the
symbols bound (`import_stablehlo(path, dims=...)`, CLI `--bind NAME=SIZE`): StableHLO's
shape refinement makes every type static and the result computes what JAX computes at
those sizes (irbridge's executor, and the ONNX export in onnxruntime, against JAX itself;
float32, tolerance 1e-5 relative: the same ops in a different order of evaluation).
Without sizes the file is a one-line error naming its symbols."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from irbridge.cli.main import app
from irbridge.converters.onnx import to_onnx
from irbridge.converters.stablehlo import import_stablehlo
from irbridge.errors import IrbridgeError
from irbridge.executor import run_model

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
from jax import export  # noqa: E402

W = np.random.default_rng(0).standard_normal((16, 8)).astype(np.float32)


def _fn(x: object, y: object) -> object:
    """Two inputs with symbols in several places: x f32[b, 16], y f32[2*b, 8]."""
    h = jax.nn.gelu(jnp.asarray(x) @ W)
    both = jnp.concatenate([h, h], axis=0) + jnp.asarray(y)
    return jax.nn.softmax(both.reshape(-1, 4, 2), axis=-1).sum(axis=1)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("poly")
    (b,) = export.symbolic_shape("b")
    exported = export.export(jax.jit(_fn))(
        jax.ShapeDtypeStruct((b, 16), jnp.float32),
        jax.ShapeDtypeStruct((2 * b, 8), jnp.float32))
    text, blob = folder / "f.mlir", folder / "f.jaxexport"
    text.write_text(exported.mlir_module())
    blob.write_bytes(bytes(exported.serialize()))
    return {"mlir": text, "jaxexport": blob}


@pytest.mark.parametrize("kind", ["mlir", "jaxexport"])
@pytest.mark.parametrize("b", [1, 3])
def test_bound_program_computes_what_jax_computes(files: dict[str, Path], kind: str,
                                                  b: int) -> None:
    model = import_stablehlo(files[kind], dims={"b": b})
    assert not [n for n in model.graphs[0].nodes if n.is_opaque]
    assert [str(v.type) for v in model.graph.inputs] == [f"f32[{b},16]", f"f32[{2 * b},8]"]
    rng = np.random.default_rng(b)
    x = rng.standard_normal((b, 16)).astype(np.float32)
    y = rng.standard_normal((2 * b, 8)).astype(np.float32)
    expected = np.asarray(_fn(x, y))
    np.testing.assert_allclose(run_model(model, [x, y])[0], expected, rtol=1e-5, atol=1e-6)
    import onnxruntime as ort

    proto = to_onnx(model)
    session = ort.InferenceSession(proto.SerializeToString())
    feeds = dict(zip((i.name for i in session.get_inputs()), (x, y), strict=True))
    np.testing.assert_allclose(session.run(None, feeds)[0], expected, rtol=1e-5, atol=1e-6)


def test_unbound_and_badly_bound_programs_are_one_line_errors(files: dict[str, Path]) -> None:
    cases = [
        (None, "has dynamic shape tensor<?x16xf32>; bind its symbolic dims with --bind "
               "NAME=SIZE"),
        ({"c": 2}, "cannot bind 'c': no dynamic dim of @main is named so (its symbolic "
                   "dims: b)"),
        ({"b": 0}, "cannot bind 'b' to 0: a size must be an integer of at least 1"),
    ]
    for dims, needle in cases:
        with pytest.raises(IrbridgeError) as info:
            import_stablehlo(files["mlir"], dims=dims)
        assert needle in str(info.value) and "\n" not in str(info.value)


def test_cli_bind(files: dict[str, Path], tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "f.onnx"
    result = runner.invoke(app, ["export", str(files["jaxexport"]), "--to", "onnx", "-o",
                                 str(out), "--bind", "b=2", "--verify"])
    assert result.exit_code == 0, result.stderr
    assert out.is_file() and "verify: PASS" in result.stdout
    refused = runner.invoke(app, ["convert", str(files["mlir"]), "-o", str(tmp_path / "x.irb")])
    assert refused.exit_code == 2 and refused.stderr.count("\n") == 1
    assert "--bind NAME=SIZE" in refused.stderr and not (tmp_path / "x.irb").exists()


def test_a_program_without_jax_specification_names_dims_by_position(tmp_path: Path) -> None:
    path = tmp_path / "plain.mlir"
    path.write_text("func.func @main(%arg0: tensor<?x4xf32>) -> tensor<?x4xf32> {\n"
                    "  %0 = stablehlo.exponential %arg0 : tensor<?x4xf32>\n"
                    "  return %0 : tensor<?x4xf32>\n}\n")
    with pytest.raises(IrbridgeError, match="symbolic dims with --bind NAME=SIZE") as info:
        import_stablehlo(path)
    assert str(info.value).endswith(": arg0_0")
    model = import_stablehlo(path, dims={"arg0_0": 3})
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_allclose(run_model(model, [x])[0], np.exp(x), rtol=1e-6)


def _middle_row(x: object) -> object:
    """`x.shape[0] // 2` as an index: JAX emits a shared private `@_where` helper called
    with different symbolic dims, which StableHLO's shape refinement refused to refine
    twice ("refined with incompatible refinement keys") for b = 1, 2, 6 (5 worked)."""
    xs = jnp.asarray(x)
    return jax.lax.dynamic_index_in_dim(xs, xs.shape[0] // 2, keepdims=False) * 2.0


@pytest.mark.parametrize("b", [1, 2, 5, 6])
def test_programs_with_shared_helpers_bind_at_every_size(tmp_path: Path, b: int) -> None:
    (sym,) = export.symbolic_shape("b")
    path = tmp_path / "middle.mlir"
    path.write_text(export.export(jax.jit(_middle_row))(
        jax.ShapeDtypeStruct((sym, 4), jnp.float32)).mlir_module())
    model = import_stablehlo(path, dims={"b": b})
    x = np.random.default_rng(b).standard_normal((b, 4)).astype(np.float32)
    np.testing.assert_array_equal(run_model(model, [x])[0], np.asarray(_middle_row(x)))


def test_a_failed_constraint_names_the_values_found(tmp_path: Path) -> None:
    """JAX's assertion message holds placeholders ({0}, {1}) for the values it found:
    they are filled in from the bound program."""
    (sym,) = export.symbolic_shape("b", constraints=["b >= 4"])
    path = tmp_path / "c.mlir"
    path.write_text(export.export(jax.jit(lambda x: jnp.tanh(x) * (x.shape[0] // 2)))(
        jax.ShapeDtypeStruct((sym, 4), jnp.float32)).mlir_module())
    with pytest.raises(IrbridgeError) as info:
        import_stablehlo(path, dims={"b": 2})
    message = str(info.value)
    assert "\n" not in message and "{0}" not in message and "{1}" not in message
    assert "Expected 'b - 4' to be greater or equal to 0, but found -2" in message


@pytest.mark.parametrize("command", ["info", "show", "validate"])
def test_reading_commands_take_bind(files: dict[str, Path], command: str) -> None:
    """The one-line error for a shape-polymorphic file says to bind its dims with --bind,
    which info, show and validate did not accept ("No such option: --bind")."""
    runner = CliRunner()
    refused = runner.invoke(app, [command, str(files["mlir"])])
    assert refused.exit_code == 2 and "--bind NAME=SIZE" in refused.stderr
    bound = runner.invoke(app, [command, str(files["mlir"]), "--bind", "b=3"])
    assert bound.exit_code == 0, bound.stderr
    if command == "info":
        assert "f32[3,16]" in bound.stdout and "f32[6,8]" in bound.stdout


def _windows(x: object) -> object:
    """Windowed reductions over the symbolic dim: a cumsum and a cummax along it, and a
    strided, padded max pool across it: JAX writes them as
    `custom_call @stablehlo.dynamic_reduce_window`, whose result types stay dynamic after
    the shapes are refined (the importer refused the call)."""
    xs = jnp.asarray(x)
    pooled = jax.lax.reduce_window(xs, -jnp.inf, jax.lax.max, (2, 3), (1, 2),
                                   ((1, 0), (1, 1)))
    return jnp.cumsum(xs, axis=0), jax.lax.cummax(xs, axis=0), pooled


@pytest.mark.parametrize("b", [1, 4])
def test_dynamic_reduce_window_over_a_symbolic_dim(tmp_path: Path, b: int) -> None:
    (sym,) = export.symbolic_shape("b")
    exported = export.export(jax.jit(_windows))(jax.ShapeDtypeStruct((sym, 6), jnp.float32))
    assert exported.mlir_module().count("dynamic_reduce_window") >= 2
    path = tmp_path / "windows.mlir"
    path.write_text(exported.mlir_module())
    model = import_stablehlo(path, dims={"b": b})
    assert not [n.qualified_op for n in model.graph.nodes if n.is_opaque]
    x = np.random.default_rng(b).standard_normal((b, 6)).astype(np.float32)
    want = [np.asarray(a) for a in _windows(x)]
    got = run_model(model, [x])
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


def test_a_dynamic_reduce_window_with_another_body_is_one_line(tmp_path: Path) -> None:
    """cumlogsumexp's window body (log-add-exp) has no neutral form: with its result type
    dynamic there is no type for an opaque node either, so the import refuses it in one
    line naming the op."""
    (sym,) = export.symbolic_shape("b")
    path = tmp_path / "cumlse.mlir"
    path.write_text(export.export(jax.jit(lambda x: jax.lax.cumlogsumexp(x, axis=0)))(
        jax.ShapeDtypeStruct((sym, 3), jnp.float32)).mlir_module())
    with pytest.raises(IrbridgeError) as info:
        import_stablehlo(path, dims={"b": 4})
    message = str(info.value)
    assert "\n" not in message and "stablehlo.custom_call" in message
    assert "dynamic shape" in message
