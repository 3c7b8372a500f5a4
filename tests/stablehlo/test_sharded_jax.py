"""Multi-device JAX programs (written by real JAX on 8 fake CPU devices, see
sharded_programs.py): a global program with shardings (jax.jit with in/out shardings and
with_sharding_constraint) imports exactly in Shardy and GSPMD form, as text, as a
serialized jax.export Exported and as its portable artifact: no opaque node, the output of
the jitted function on the same inputs, the MACs and ops of the program without shardings,
the shardings and the mesh kept as metadata. Per-device programs (shard_map, pmap) are a
one-line refusal naming the construct and the function."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hostile_cli import assert_one_line_error, run_cli

from irbridge.converters.stablehlo import import_stablehlo
from irbridge.converters.stablehlo.importer import MESH_PREFIX, SHARDING_PREFIX
from irbridge.errors import FileFormatError
from irbridge.executor import run_model
from irbridge.ir import Model
from irbridge.summary import summarize

HERE = Path(__file__).parent
NAMES = ("mlp", "attention", "block")
FORMS = ("sdy", "gspmd")
KINDS = ("mlir", "jaxexport", "mlirbc")

# The executor computes in float32 like XLA on CPU, but the sharded program sums its dot
# products in another order (per-shard partial sums, then across devices): each output is
# a few float32 roundings of sums of at most 32 products of O(1) values, so a relative
# error of 1e-5 (about 80 float32 ulps) and an absolute one of 1e-5 near zero bound it.
RTOL = ATOL = 1e-5


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sharded")
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    subprocess.run([sys.executable, str(HERE / "sharded_programs.py"), str(out)], check=True,
                   timeout=300, env=env)
    return out


def _import(path: Path) -> Model:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an opaque op would warn
        return import_stablehlo(path)


def _ops(model: Model) -> Counter[str]:
    return Counter(n.qualified_op for n in model.graphs[0].nodes)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("name", NAMES)
def test_global_sharded_program_imports_exactly(files: Path, name: str, form: str,
                                                kind: str) -> None:
    model = _import(files / f"{name}_{form}.{kind}")
    assert not [n for n in model.graphs[0].nodes if n.is_opaque]
    data = np.load(files / f"{name}.npz")
    inputs = [data[f"in{i}"] for i in range(len(model.graphs[0].inputs))]
    got = run_model(model, inputs)
    expected = [data[k] for k in sorted(data.files) if k.startswith("out")]
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=RTOL, atol=ATOL)
    plain = _import(files / f"{name}_plain.{kind}")
    assert summarize(model).cost.macs == summarize(plain).cost.macs > 0
    assert _ops(model) == _ops(plain)  # the constraints add no node
    meta = model.metadata
    assert meta["stablehlo.mhlo.num_partitions"].split(" ")[0] == "8"
    shardings = {k: v for k, v in meta.items() if k.startswith(SHARDING_PREFIX)}
    first = SHARDING_PREFIX + model.graphs[0].inputs[0].name
    # every argument and result, and the with_sharding_constraint value
    assert len(shardings) == len(inputs) + len(expected) + 1, shardings
    if form == "sdy":
        assert meta[MESH_PREFIX + "mesh"] == '["dp"=2, "tp"=4]'
        assert shardings[first].startswith('#sdy.sharding<@mesh, [{"dp"}')
    else:
        assert not [k for k in meta if k.startswith(MESH_PREFIX)]
        assert shardings[first].startswith("{devices=[2,1")


@pytest.mark.parametrize("form", FORMS)
def test_cli_info_shows_no_opaque_node_the_unsharded_macs_and_the_mesh(files: Path, form: str) -> None:
    sharded = run_cli("info", files / f"mlp_{form}.mlir", cwd=files)
    plain = run_cli("info", files / "mlp_plain.mlir", cwd=files)
    assert sharded.returncode == 0 and plain.returncode == 0, sharded.stderr + plain.stderr

    def line(text: str, key: str) -> str:
        return next(ln for ln in text.splitlines() if ln.startswith(key))

    assert "(0 opaque)" in line(sharded.stdout, "nodes")
    assert line(sharded.stdout, "MACs") == line(plain.stdout, "MACs")
    assert "warning" not in sharded.stderr
    # the 4 arguments, the result and the with_sharding_constraint value
    assert line(sharded.stdout, "shardings").split()[1:3] == ["6", "values"]
    assert "shardings" not in plain.stdout
    if form == "sdy":
        assert line(sharded.stdout, "mesh @mesh").endswith('["dp"=2, "tp"=4]')
    else:
        assert "mesh @" not in sharded.stdout


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize(("program", "construct"), [
    ("shard_map", {"sdy": "shard_map body (sdy.manual_computation)",
                   "gspmd": "shard_map/pmap body (custom_call @SPMDFullToShardShape)"}),
    ("pmap", {"sdy": "shard_map body (sdy.manual_computation)",
              "gspmd": "shard_map/pmap body (custom_call @SPMDFullToShardShape)"}),
])
def test_per_device_program_is_a_one_line_refusal(files: Path, program: str, form: str,
                                                  construct: dict[str, str]) -> None:
    path = files / f"{program}_{form}.mlir"
    outcome = run_cli("analyze", path, cwd=files)
    assert_one_line_error(outcome, str(path), "@main: ", construct[form],
                          "per-device SPMD program")


def test_collective_in_a_called_function_names_that_function(tmp_path: Path) -> None:
    path = tmp_path / "body.mlir"
    path.write_text("""
func.func public @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = call @body(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func private @body(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "stablehlo.all_reduce"(%x) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %s = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %s : tensor<f32>
  }) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
""")
    outcome = run_cli("analyze", path, cwd=tmp_path)
    assert_one_line_error(outcome, "@body: cross-device collective stablehlo.all_reduce",
                          "per-device SPMD program")


def test_shardy_without_jaxlib_is_a_one_line_error(files: Path, tmp_path: Path) -> None:
    """A jaxlib that cannot be imported (shadowed on PYTHONPATH) stands for a machine
    without JAX: the Shardy file is refused in one line saying jax is needed."""
    shadow = tmp_path / "shadow" / "jaxlib"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('jaxlib is not installed here')\n")
    path = files / "mlp_sdy.mlir"
    outcome = run_cli("analyze", path, cwd=tmp_path,
                      env={"PYTHONPATH": str(shadow.parent)})
    assert_one_line_error(outcome, str(path), "Shardy (sdy)", "needs jax installed")
    # GSPMD files, and Shardy in MLIR's generic form, need no jaxlib
    for name in ("mlp_gspmd.mlir", "mlp_sdy_generic.mlir"):
        info = run_cli("info", files / name, cwd=tmp_path,
                       env={"PYTHONPATH": str(shadow.parent)})
        assert info.returncode == 0, info.stderr
        assert "(0 opaque)" in info.stdout and "6 values annotated" in info.stdout
    assert '["dp"=2, "tp"=4]' in info.stdout


def test_malformed_shardy_text_is_one_line(files: Path, tmp_path: Path) -> None:
    text = (files / "mlp_sdy.mlir").read_text()
    path = tmp_path / "bad.mlir"
    path.write_text(text.replace('<@mesh, [{"dp"}, {"tp"}]>', '<@nomesh, [{"dp"}, {"tp"}]>'))
    with pytest.raises(FileFormatError) as err:
        import_stablehlo(path)
    message = str(err.value)
    assert "\n" not in message and str(path) in message and "nomesh" in message
    line = text[:text.index("@mesh, [{\"dp\"}, {\"tp\"}]>")].count("\n") + 1
    assert f"line {line}:" in message, message  # the line in the file as written
    assert "'sdy.sharding_constraint' op unknown mesh: @nomesh" in message


@pytest.mark.parametrize(("attr", "first", "second"), [
    ('mhlo.sharding = "{{devices=[2]<=[2]}, {replicated}}"', "{devices=[2]<=[2]}",
     "{replicated}"),
    ('sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"a"}]>, <@mesh, [{}]>]>',
     '#sdy.sharding<@mesh, [{"a"}]>', "#sdy.sharding<@mesh, [{}]>"),
])
def test_sharding_of_an_op_with_two_results_is_split_over_them(
        tmp_path: Path, attr: str, first: str, second: str) -> None:
    """A GSPMD tuple sharding, and Shardy's per-value one in MLIR's generic form (which
    parses without jaxlib), give each result its own annotation; the values are exact."""
    path = tmp_path / "two.mlir"
    path.write_text(f"""
"sdy.mesh"() <{{mesh = #sdy.mesh<["a"=2]>, sym_name = "mesh"}}> : () -> ()
func.func public @main(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {{
  %0:2 = call @two(%x) {{{attr}}} : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  return %0#0, %0#1 : tensor<4xf32>, tensor<4xf32>
}}
func.func private @two(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {{
  %a = stablehlo.negate %x : tensor<4xf32>
  %b = stablehlo.abs %x : tensor<4xf32>
  return %a, %b : tensor<4xf32>, tensor<4xf32>
}}
""")
    model = _import(path)
    outputs = model.graphs[0].outputs
    assert model.metadata[SHARDING_PREFIX + outputs[0].name] == first
    assert model.metadata[SHARDING_PREFIX + outputs[1].name] == second
    assert model.metadata[MESH_PREFIX + "mesh"] == '["a"=2]'
    x = np.array([-1.5, 0.0, 2.0, -3.0], np.float32)
    neg, absolute = run_model(model, [x])
    np.testing.assert_array_equal(neg, -x)
    np.testing.assert_array_equal(absolute, np.abs(x))


def test_importing_keeps_jax_out_of_the_process(files: Path) -> None:
    """jaxlib reads a Shardy file in a child process: neither it nor a GSPMD file brings
    jax or jaxlib into the importing interpreter (its start-up cost, its global state)."""
    script = ("import sys\n"
              "from irbridge.converters.stablehlo import import_stablehlo\n"
              "for path in sys.argv[1:]:\n"
              "    assert not import_stablehlo(path).graphs[0].nodes[0].is_opaque\n"
              "print(sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'jaxlib')))\n")
    proc = subprocess.run([sys.executable, "-c", script, str(files / "mlp_sdy.mlir"),
                           str(files / "mlp_sdy.jaxexport"), str(files / "mlp_gspmd.mlir")],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]"


@pytest.mark.parametrize("damage", ["cut100", "cut-10", "flip0", "flip2", "flip3", "fuzz37"])
def test_corrupt_shardy_artifact_is_one_line(files: Path, tmp_path: Path, damage: str) -> None:
    """Truncated or byte-flipped Shardy artifacts (seeded: some fail in torch-mlir's reader,
    some only in jaxlib's, e.g. flip2 and flip3) are one-line errors naming the file.
    fuzz37 (the fuzz campaign's mutation 37) makes jaxlib's diagnostic text invalid UTF-8:
    the reader's handler failed and its traceback went into the line."""
    data = bytearray((files / "attention_sdy.mlirbc").read_bytes())
    if damage.startswith("cut"):
        data = data[:int(damage[3:])]
    elif damage.startswith("fuzz"):
        sys.path.insert(0, str(HERE.parent / "fuzz"))
        from fuzzlib import mutate

        data = bytearray(mutate("irb", bytes(data), int(damage[4:])))
    else:
        rng = np.random.default_rng(int(damage[4:]))
        for _ in range(3):
            data[int(rng.integers(40, len(data)))] = int(rng.integers(256))
    path = tmp_path / "bad.mlirbc"
    path.write_bytes(bytes(data))
    outcome = run_cli("info", path, cwd=tmp_path)
    line = assert_one_line_error(outcome, str(path))
    if damage in ("flip2", "flip3", "fuzz37"):
        assert "(read with jaxlib)" in line
    assert "Traceback" not in line
