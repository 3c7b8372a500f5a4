"""A serialized `jax.export` Exported (`exported.serialize()`, what JAX users save) imports
like the portable artifact it wraps, through the API and the CLI; corrupt or foreign blobs
are one-line errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from irbridge.cli.main import app
from irbridge.converters.stablehlo import import_stablehlo
from irbridge.converters.stablehlo._jax_exported import NotExported, read_exported
from irbridge.errors import FileFormatError
from irbridge.executor import run_model

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
from jax import export  # noqa: E402

W = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
X = np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)


def _fn(x: object) -> object:
    return jax.nn.gelu(jnp.asarray(x) @ W, approximate=False).sum(-1)


@pytest.fixture(scope="module")
def blob() -> bytes:
    return bytes(export.export(jax.jit(_fn))(X).serialize())


def test_serialized_exported_imports_and_runs(blob: bytes, tmp_path: Path) -> None:
    module, name, version = read_exported(blob)
    assert module.startswith(b"ML\xefR") and version >= 1 and name
    path = tmp_path / "f.jaxexport"
    path.write_bytes(blob)
    model = import_stablehlo(path)
    assert not [n for n in model.graphs[0].nodes if n.domain]
    got = run_model(model, [X])[0]
    np.testing.assert_allclose(got, np.asarray(_fn(X)), rtol=1e-5, atol=1e-5)
    out = tmp_path / "f.irb"
    result = CliRunner().invoke(app, ["convert", str(path), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.is_file()


@pytest.mark.parametrize("cut", [8, 40, 200, -100])
def test_truncated_blob_is_one_line(blob: bytes, tmp_path: Path, cut: int) -> None:
    path = tmp_path / "bad.jaxexport"
    path.write_bytes(blob[:cut])
    with pytest.raises(FileFormatError) as err:
        import_stablehlo(path)
    assert "\n" not in str(err.value) and str(path) in str(err.value)


def test_foreign_bytes_are_not_an_exported() -> None:
    for data in (b"", b"\x00" * 64, b"func.func @main() { return }", bytes(range(256))):
        with pytest.raises(NotExported):
            read_exported(data)


def test_a_name_that_is_not_utf8_reads_with_replacement(blob: bytes, tmp_path: Path) -> None:
    """MLIR bytecode can hold string attributes that are not UTF-8 (a mutated .jaxexport
    renamed the module `jit_\\xffn`): the bindings' `.value` raised a RuntimeError, an
    internal error; the name now reads with a replacement character."""
    assert blob.count(b"jit__fn") >= 1
    path = tmp_path / "odd.jaxexport"
    path.write_bytes(blob.replace(b"jit__fn", b"jit__\xffn"))
    model = import_stablehlo(path)
    assert model.name == "jit__\ufffdn"
    result = CliRunner().invoke(app, ["info", str(path)])
    assert result.exit_code == 0, result.output
