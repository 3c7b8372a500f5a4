"""Hostile ONNX files built here, through the real CLI in a child process (timeout and a
2 GiB address-space cap, see hostile_cli): external data that lies about its offset,
length or file, and a 78-byte Tile that asks the executor for 4 GiB. Each one: one
line, exit 2 (or, for compare, a report naming the node), nothing written."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from hostile_cli import assert_one_line_error, run_cli
from onnx import TensorProto, helper
from onnxtools import F, onnx_model, ort_run, tensor

from irbridge.converters.onnx import import_onnx
from irbridge.converters.onnx.importer import OnnxImportWarning
from irbridge.errors import FileFormatError
from irbridge.executor import ExecutionError, run_model


def _external_model(tmp_path: Path, **entries: str) -> Path:
    """A model whose weight w (256 float32, 1 KiB) lives in w.bin, its external-data
    entries overridden by `entries` (an empty value removes the entry)."""
    proto = onnx_model([helper.make_node("Add", ["x", "w"], ["y"])], [tensor("x", F, [256])],
                       [tensor("y", F, [256])], {"w": np.arange(256, dtype=np.float32)})
    path = tmp_path / "ext.onnx"
    onnx.save_model(proto, str(path), save_as_external_data=True, location="w.bin",
                    size_threshold=0)
    proto = onnx.load(str(path), load_external_data=False)
    init = proto.graph.initializer[0]
    info = {e.key: e.value for e in init.external_data} | entries
    del init.external_data[:]
    for key, value in info.items():
        if value:
            init.external_data.add(key=key, value=value)
    path.write_bytes(proto.SerializeToString())
    return path


@pytest.mark.parametrize(("entries", "needle"), [
    ({"offset": "abc"}, "external data offset 'abc' is not a non-negative integer"),
    ({"offset": "-8"}, "external data offset '-8' is not a non-negative integer"),
    ({"offset": "99999999999999999999"}, "is truncated"),
    ({"offset": "1000"}, "is truncated"),
    ({"length": "12"}, "length 12 does not match the 1024 bytes"),
    ({"length": "4096"}, "length 4096 does not match"),
    ({"location": "../w.bin"}, "points outside the model's folder"),
    ({"location": "/etc/passwd"}, "is not a relative path"),
    ({"location": "sub"}, "is not a regular file"),
    ({"location": "fifo"}, "is not a regular file"),
    ({"location": "gone.bin"}, "is missing"),
    # found by hunting: onnx refused the link inside the folder with a ValidationError that
    # reached the CLI as an internal error
    ({"location": "inlink.bin"}, "goes through a symbolic link"),
    ({"location": "linkdir/w.bin"}, "goes through a symbolic link"),
])
def test_lying_external_data_is_one_line(tmp_path: Path, entries: dict[str, str],
                                         needle: str) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    path = _external_model(folder, **entries)
    (folder / "sub").mkdir()
    os.mkfifo(folder / "fifo")  # opening it would block forever
    os.symlink("w.bin", folder / "inlink.bin")  # inside the folder, still a link
    os.symlink(".", folder / "linkdir")
    before = sorted(p.name for p in folder.iterdir())
    out = tmp_path / "out.irb"
    line = assert_one_line_error(run_cli("convert", path, "-o", out, cwd=tmp_path, timeout=60),
                                 str(path), "'w'", needle)
    assert "Traceback" not in line
    assert not out.exists() and sorted(p.name for p in folder.iterdir()) == before


def test_honest_external_data_still_reads(tmp_path: Path) -> None:
    model = import_onnx(_external_model(tmp_path, offset="0", length="1024"))
    data = model.tensors["w"].data
    assert data is not None and np.array_equal(data, np.arange(256, dtype=np.float32))


def _tile_bomb(tmp_path: Path) -> Path:
    """78 bytes: Tile of a 1-element input by 2^30 repeats, a 4 GiB float32 output."""
    graph = helper.make_graph(
        [helper.make_node("Tile", ["x", "r"], ["y"], name="bomb")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])],
        [helper.make_tensor("r", TensorProto.INT64, [1], [1 << 30])])
    path = tmp_path / "tile.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    assert path.stat().st_size < 100
    return path


def test_tile_bomb_is_refused_by_the_executor_before_allocating(tmp_path: Path) -> None:
    model = import_onnx(_tile_bomb(tmp_path))
    with pytest.raises(ExecutionError) as exc:
        run_model(model, [np.ones(1, dtype=np.float32)])
    line = str(exc.value)
    assert "\n" not in line and "node #0 tile" in line and "4.0 GiB" in line
    assert "memory budget of 2.0 GiB" in line and "IRBRIDGE_MAX_MEMORY" in line


def test_compare_of_a_tile_bomb_stays_bounded(tmp_path: Path) -> None:
    # compare used 4.2 GB here; under a 2 GiB cap it reports the refusal, naming the node
    path = _tile_bomb(tmp_path)
    result = run_cli("compare", path, path, cwd=tmp_path, timeout=120)
    assert result.returncode in (0, 1), result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert "node #0 tile" in result.stdout and "memory budget" in result.stdout


def test_memory_budget_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = import_onnx(_tile_bomb(tmp_path))
    monkeypatch.setenv("IRBRIDGE_MAX_MEMORY", "1K")
    with pytest.raises(ExecutionError, match=r"budget of 1\.0 KiB"):
        run_model(model, [np.ones(1, dtype=np.float32)])
    monkeypatch.setenv("IRBRIDGE_MAX_MEMORY", "lots")
    with pytest.raises(ExecutionError, match="IRBRIDGE_MAX_MEMORY='lots' is not"):
        run_model(model, [np.ones(1, dtype=np.float32)])


def _mismatched(tmp_path: Path, kind: str) -> Path:
    """Add of x: f32[2] and a weight that does not fit: f32[3] (shape) or i64[2] (type)."""
    weight = helper.make_tensor("w", TensorProto.FLOAT, [3], [1, 2, 3]) if kind == "shape" \
        else helper.make_tensor("w", TensorProto.INT64, [2], [1, 2])
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"], name="badadd"),
         helper.make_node("Relu", ["y"], ["z"], name="act")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2])], [weight])
    path = tmp_path / f"{kind}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.parametrize(("kind", "needle"), [
    ("shape", "1 node(s) do not type-check and were kept as opaque nodes: 'badadd'"),
    ("type", "the model does not type-check ([ShapeInferenceError] (op_type:Add, node name: "
             "badadd)"),
])
def test_mismatched_models_say_so(tmp_path: Path, kind: str, needle: str) -> None:
    path = _mismatched(tmp_path, kind)
    with pytest.warns(OnnxImportWarning) as record:
        model = import_onnx(path)
    assert any(n.is_opaque for n in model.graph.nodes)
    (warning,) = [str(w.message) for w in record if w.category is OnnxImportWarning]
    assert needle in warning and "\n" not in warning
    # strict: the same line as an error, exit 2, nothing written
    out = tmp_path / "out.irb"
    result = run_cli("convert", path, "-o", out, cwd=tmp_path,
                     env={"IRBRIDGE_STRICT_IMPORT": "1"})
    assert_one_line_error(result, str(path), needle)
    assert not out.exists()


def test_an_unmapped_op_is_not_called_a_mismatch(tmp_path: Path) -> None:
    # a custom-domain op is opaque by design: no type-check warning
    graph = helper.make_graph(
        [helper.make_node("Frob", ["x"], ["y"], domain="my.ops", name="frob")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("my.ops", 1)])
    path = tmp_path / "frob.onnx"
    onnx.save(proto, path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", OnnxImportWarning)
        model = import_onnx(path)
    assert [n.qualified_op for n in model.graph.nodes] == ["my.ops::Frob"]


def test_a_name_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    # found by mutation: onnx.checker raised UnicodeDecodeError (a traceback, exit 1)
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="actname")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]) \
        .SerializeToString()
    assert data.count(b"actname") == 1
    path = tmp_path / "name.onnx"
    path.write_bytes(data.replace(b"actname", b"act\xa9ame"))
    out = tmp_path / "out.irb"
    assert_one_line_error(run_cli("convert", path, "-o", out, cwd=tmp_path), str(path),
                          "model.graph.node[0].name is not valid UTF-8")
    assert not out.exists()


def test_external_data_without_length_must_end_with_the_tensor(tmp_path: Path) -> None:
    # found by hunting: without a length ONNX reads to the end of the file, so an 8 GiB
    # (sparse) data file behind a 1 KiB tensor was read whole (a MemoryError under the cap)
    folder = tmp_path / "m"
    folder.mkdir()
    path = _external_model(folder, offset="", length="")
    os.truncate(folder / "w.bin", 8 << 30)
    out = tmp_path / "out.irb"
    assert_one_line_error(run_cli("convert", path, "-o", out, cwd=tmp_path, timeout=60),
                          str(path), "'w'", "holds 8589934592 bytes from offset 0 but the "
                          "tensor needs 1024 and no length is given")
    assert not out.exists()
    # the file holding exactly the tensor's bytes still reads without a length
    os.truncate(folder / "w.bin", 1024)
    data = import_onnx(path).tensors["w"].data
    assert data is not None and np.array_equal(data, np.arange(256, dtype=np.float32))


def _function_model(functions: list[onnx.FunctionProto], call: str) -> onnx.ModelProto:
    graph = helper.make_graph([helper.make_node(call, ["x"], ["y"], domain="local")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    return helper.make_model(graph, functions=functions, opset_imports=[
        helper.make_opsetid("", 18), helper.make_opsetid("local", 1)])


def test_external_data_inside_a_local_function_is_checked(tmp_path: Path) -> None:
    # found by hunting: a Constant in a model-local function escaped the external-data
    # checks (they walked the graph only); a link out of the folder reached onnx's reader
    folder = tmp_path / "m"
    folder.mkdir()
    (tmp_path / "secret.bin").write_bytes(np.ones(4, np.float32).tobytes())
    os.symlink(tmp_path / "secret.bin", folder / "s.bin")
    weight = helper.make_tensor("w", TensorProto.FLOAT, [4], [0.0] * 4)
    weight.ClearField("float_data")
    weight.data_location = TensorProto.EXTERNAL
    weight.external_data.add(key="location", value="s.bin")
    body = [helper.make_node("Constant", [], ["c"], value=weight),
            helper.make_node("Add", ["a", "c"], ["b"])]
    function = helper.make_function("local", "F", ["a"], ["b"], body,
                                    [helper.make_opsetid("", 18)])
    path = folder / "f.onnx"
    onnx.save(_function_model([function], "F"), path)
    out = tmp_path / "out.irb"
    assert_one_line_error(run_cli("convert", path, "-o", out, cwd=tmp_path), str(path),
                          "'w'", "'s.bin' points outside the model's folder")
    assert not out.exists()


def _doubling_functions(levels: int) -> onnx.ModelProto:
    """F0 is one Relu, F(i) calls F(i-1) twice: F(levels) inlines to 2^levels nodes."""
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid("local", 1)]
    functions = [helper.make_function("local", "F0", ["a"], ["b"],
                                      [helper.make_node("Relu", ["a"], ["b"])], opsets)]
    for i in range(1, levels + 1):
        body = [helper.make_node(f"F{i - 1}", ["a"], ["m"], domain="local"),
                helper.make_node(f"F{i - 1}", ["m"], ["b"], domain="local")]
        functions.append(helper.make_function("local", f"F{i}", ["a"], ["b"], body, opsets))
    return _function_model(functions, f"F{levels}")


def test_exponential_local_functions_are_refused_before_inlining(tmp_path: Path) -> None:
    # found by hunting: 40 such functions (a 2 KB file) made onnx's inliner build 2^40
    # nodes: no exit within 30 s and 1.7 GB resident, then the memory cap
    path = tmp_path / "bomb.onnx"
    onnx.save(_doubling_functions(40), path)
    assert path.stat().st_size < 8000
    out = tmp_path / "out.irb"
    assert_one_line_error(run_cli("convert", path, "-o", out, cwd=tmp_path, timeout=60),
                          str(path), "expands to more than 2,000,000 nodes once its "
                          "model-local functions are inlined", "IRBRIDGE_MAX_INLINED_OPS")
    assert not out.exists()


def test_local_function_budget_is_exact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                        ) -> None:
    path = tmp_path / "f8.onnx"
    onnx.save(_doubling_functions(8), path)  # 256 Relu nodes once inlined
    monkeypatch.setenv("IRBRIDGE_MAX_INLINED_OPS", "256")
    model = import_onnx(path)
    assert [n.op for n in model.graph.nodes] == ["relu"] * 256
    monkeypatch.setenv("IRBRIDGE_MAX_INLINED_OPS", "255")
    with pytest.raises(FileFormatError, match="more than 255 nodes"):
        import_onnx(path)


def test_a_negative_dim_in_a_value_type_reads_as_unknown(tmp_path: Path) -> None:
    # found by hunting: x: f32[-3, 4] imported as is, and analyze reported -48 B of traffic;
    # ONNX's own shape inference writes -1 for unknown dims (AffineGrid's expanded function),
    # so a negative dim is read as unknown rather than refused
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [-3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [-3, 4])])
    path = tmp_path / "neg.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    model = import_onnx(path)
    assert [v.type.shape for v in model.graph.inputs if v.type] == [(None, 4)]
    result = run_cli("analyze", path, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "-48" not in result.stdout


def test_a_model_path_that_is_a_fifo_is_named_as_such(tmp_path: Path) -> None:
    # found by hunting: a FIFO (or /dev/urandom) was reported as "no such ONNX file"
    path = tmp_path / "m.onnx"
    os.mkfifo(path)
    out = tmp_path / "out.irb"
    assert_one_line_error(run_cli("convert", path, "-o", out, cwd=tmp_path, timeout=60),
                          str(path), "not a regular file, not an ONNX model")
    assert not out.exists()


def _int4_model(raw: bytes, count: int) -> onnx.ModelProto:
    weight = TensorProto(name="w", data_type=TensorProto.INT4, dims=[count], raw_data=raw)
    graph = helper.make_graph([helper.make_node("Cast", ["w"], ["y"], to=TensorProto.INT8)],
                              "g", [], [helper.make_tensor_value_info("y", TensorProto.INT8,
                                                                      [count])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model


def test_packed_int4_external_data_reads(tmp_path: Path) -> None:
    # found by hunting: the external-data check counted one byte per int4 element, so an
    # honest model (5 elements packed into 3 bytes, as ONNX stores them) was refused
    packed = bytes([0xE1, 0xC3, 0x05])  # 1, -2, 3, -4, 5
    (want,) = ort_run(_int4_model(packed, 5), {})
    path = tmp_path / "i4.onnx"
    onnx.save_model(_int4_model(packed, 5), str(path), save_as_external_data=True,
                    location="i4.onnx.data", size_threshold=0)
    assert (tmp_path / "i4.onnx.data").stat().st_size == 3
    data = import_onnx(path).tensors["w"].data
    assert data is not None and np.array_equal(data.astype(np.int8), want)


def test_surplus_packed_raw_data_is_one_line(tmp_path: Path) -> None:
    # found by hunting: 64 bytes of raw_data for 4 int4 elements (2 bytes) were accepted,
    # the surplus dropped silently (a float32 tensor with surplus bytes is refused)
    path = tmp_path / "long.onnx"
    path.write_bytes(_int4_model(b"\x11" * 64, 4).SerializeToString())
    out = tmp_path / "out.irb"
    assert_one_line_error(run_cli("convert", path, "-o", out, cwd=tmp_path), str(path),
                          "initializer 'w': raw_data holds 64 bytes, i4[4] needs 2")
    assert not out.exists()
