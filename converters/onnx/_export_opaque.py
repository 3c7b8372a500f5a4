"""Exact rewrites of opaque ONNX nodes into forms onnxruntime's CPU kernels run.

An opaque node imported from an ONNX file is written back as it was
(`_GraphEmitter.write_opaque`), except where the node as written would fail: then
`REWRITES[op](emitter, node, ins, outs)` writes an equivalent group of default-domain
nodes and returns True (False leaves the node to the ordinary path):

* RNN, GRU, LSTM with `layout=1` (batch-major; onnxruntime refuses it): the op with
  `layout=0` between Transposes. The layout attribute affects X and initial_h /
  initial_c ([batch, seq, ...] and [batch, num_directions, hidden]) and the outputs Y
  ([batch, seq, num_directions, hidden]) and Y_h / Y_c; W, R, B, sequence_lens and P are
  the same in both layouts (ONNX operator spec, RNN-14 / GRU-14 / LSTM-14).
* ConvInteger with a per-output-channel `w_zero_point` (onnxruntime takes a scalar only):
  sum (x - xz)(w - wz[m]) = sum (x - xz) w - wz[m] sum (x - xz), i.e.
  ConvInteger(x, w, xz) - wz[m] * ConvInteger(x, ones, xz) with the same attributes, in
  int32 like the op itself.
* Scan read at opset 8 (with a batch axis, changed by Scan-9) exported at opset 9 or
  later, without sequence_lens: a Loop over the batch whose body runs Scan-9 with the same
  body on one batch element; the Loop stacks each result along a new first axis, which is
  Scan-8's batch axis.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
from onnx import TensorProto, helper

from irbridge.converters.onnx._common import array_to_proto, dtype_to_onnx
from irbridge.dtypes import DType
from irbridge.ir import Graph, Node
from irbridge.ops import registry

if TYPE_CHECKING:
    from irbridge.converters.onnx.export import _GraphEmitter

Rewrite = Callable[["_GraphEmitter", Node, list[str | None], list[str]], bool]


def _temp(ge: _GraphEmitter, node: Node, index: int, base: str) -> str:
    """A fresh name for a value standing for output `index` of `node`, typed as it."""
    name = ge.ex.fresh(base)
    value = node.outputs[index]
    if value.type is not None:
        ge.ex.types[name] = value.type.dtype
    return name


def _batch_major_rnn(ge: _GraphEmitter, node: Node, ins: list[str | None],
                     outs: list[str]) -> bool:
    if node.attrs.get("layout", 0) != 1:
        return False
    where = registry.node_where(node)
    schema = ge.schema_of(node, where)
    states = (5, 6) if node.op == "LSTM" else (5,)  # initial_h (and initial_c)
    ins = list(ins)
    for index in (0, *states):
        name = ins[index] if index < len(ins) else None
        if name:  # X [batch, seq, in] -> [seq, batch, in]; states [batch, dirs, hidden]
            ins[index] = ge.one("Transpose", [name], perm=[1, 0, 2])
    temps = [_temp(ge, node, i, f"{name}_seq_major") if name else ""
             for i, name in enumerate(outs)]
    attrs = {k: v for k, v in node.attrs.items() if k != "layout"}
    ge.write_opaque(node.op, ins, temps, attrs, schema, where)
    for index, (temp, name) in enumerate(zip(temps, outs, strict=True)):
        if name:  # Y [seq, dirs, batch, hidden] -> [batch, seq, dirs, hidden]
            ge.one("Transpose", [temp], name, perm=[2, 0, 1, 3] if index == 0 else [1, 0, 2])
    return True


def _per_channel_conv_integer(ge: _GraphEmitter, node: Node, ins: list[str | None],
                              outs: list[str]) -> bool:
    if len(ins) < 4 or not ins[3] or not outs[0]:
        return False
    zero = node.inputs[3]
    x, w = node.inputs[0], node.inputs[1]
    if zero is None or zero.type is None or zero.type.shape is None:
        return False
    if zero.type.is_static and (zero.type.numel() or 0) <= 1:
        return False  # per tensor: as it is
    if x is None or x.type is None or x.type.shape is None or w is None or w.type is None:
        return False
    where = registry.node_where(node)
    schema = ge.schema_of(node, where)
    attrs = dict(node.attrs)
    data = [ins[0], ins[1], ins[2] or ""]
    plain = _temp(ge, node, 0, f"{outs[0]}_plain")
    ge.write_opaque("ConvInteger", data, [plain], attrs, schema, where)
    one = array_to_proto(np.ones(1, w.type.dtype.numpy), "one")
    ones = ge.one("ConstantOfShape", [ge.one("Shape", [data[1]])], value=one)
    sums = _temp(ge, node, 0, f"{outs[0]}_window_sums")
    ge.write_opaque("ConvInteger", [data[0], ones, data[2]], [sums], attrs, schema, where)
    shape = [1, -1] + [1] * (len(x.type.shape) - 2)
    channel = ge.one("Reshape", [ge.cast(ins[3], zero.type.dtype, DType.INT32),
                                 ge.i64(shape, "zero_point_shape")])
    ge.one("Sub", [plain, ge.one("Mul", [channel, sums])], outs[0])
    return True


def _batched_scan(ge: _GraphEmitter, node: Node, ins: list[str | None],
                  outs: list[str]) -> bool:
    source = ge.ex.source_opsets.get("")
    body = node.attrs.get("body")
    if source is None or source >= 9 or ge.ex.opset < 9 or not isinstance(body, Graph):
        return False
    if ins and ins[0]:
        return False  # sequence_lens: no exact Scan-9 form here (refused as before)
    scans = node.attrs.get("num_scan_inputs", 0)
    carried = [n or "" for n in ins[1:]]
    if not carried or not isinstance(scans, int) or scans <= 0:
        return False
    batch = ge.one("Gather", [ge.one("Shape", [carried[0]]), ge.i64(0, "batch_axis")], axis=0)
    step, cond = ge.ex.fresh("scan8/batch_index"), ge.ex.fresh("scan8/cond")
    sliced = [ge.ex.fresh(f"{name}_one") for name in carried]
    body_nodes = [helper.make_node("Gather", [name, step], [one], axis=0,
                                   name=ge.ex.node_name(f"{ge.label}/Gather"))
                  for name, one in zip(carried, sliced, strict=True)]
    results = [ge.ex.fresh(f"{name or 'unused'}_one") for name in outs]
    scan = helper.make_node("Scan", sliced, results, name=ge.ex.node_name(f"{ge.label}/Scan"),
                            num_scan_inputs=scans, body=ge.subgraph(body))
    directions = node.attrs.get("directions")
    if isinstance(directions, tuple) and directions:
        scan.attribute.append(helper.make_attribute("scan_input_directions",
                                                    [int(d) for d in directions
                                                     if isinstance(d, int)]))
    body_nodes.append(scan)
    cond_out = ge.ex.fresh("scan8/cond_out")
    body_nodes.append(helper.make_node("Identity", [cond], [cond_out],
                                       name=ge.ex.node_name(f"{ge.label}/Identity")))
    outputs = [helper.make_tensor_value_info(cond_out, TensorProto.BOOL, [])]
    for name, value in zip(results, node.outputs, strict=True):
        if value.type is None:
            return False
        outputs.append(helper.make_tensor_value_info(
            name, dtype_to_onnx(value.type.dtype), None))
    loop_body = helper.make_graph(
        body_nodes, f"{body.name or 'scan'}_batch",
        [helper.make_tensor_value_info(step, TensorProto.INT64, []),
         helper.make_tensor_value_info(cond, TensorProto.BOOL, [])], outputs)
    names = [name or ge.ex.fresh("scan8/unused") for name in outs]
    loop = helper.make_node("Loop", [batch, ""], names, name=ge.ex.node_name(ge.label),
                            body=loop_body)
    ge.append(loop)
    return True


REWRITES: dict[str, Rewrite] = {
    "RNN": _batch_major_rnn,
    "GRU": _batch_major_rnn,
    "LSTM": _batch_major_rnn,
    "ConvInteger": _per_channel_conv_integer,
    "Scan": _batched_scan,
}
