"""One worked example per neutral op: input types, attributes and (where random data would
be invalid) input values. docs/ops.md shows each example's inferred output and cost, and
tests/ops/test_registry.py requires an example for every registered op and runs it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from irbridge.dtypes import DType
from irbridge.ir import Graph, Tensor, TensorType, Value


@dataclass
class OpExample:
    inputs: list[TensorType | None]
    attrs: dict[str, Any] = field(default_factory=dict)
    values: dict[int, np.ndarray] = field(default_factory=dict)  # fixed input data by index


def t(shape: tuple[int, ...], dtype: DType = DType.FLOAT32) -> TensorType:
    return TensorType(dtype, shape)


F, I64, B = DType.FLOAT32, DType.INT64, DType.BOOL
X = t((2, 3, 4))


def _unary(**attrs: Any) -> OpExample:
    return OpExample([X], attrs)


def _binary() -> OpExample:
    return OpExample([t((2, 3, 4)), t((3, 1))])


def _body(builder: Callable[[Graph], None], name: str) -> Graph:
    graph = Graph(name)
    builder(graph)
    return graph


def _if_branch(op: str) -> Graph:
    """A branch graph that reads no outer value: relu / neg of a constant."""
    from irbridge.builder import GraphBuilder

    graph = Graph(op)
    graph.reserve_ids(1000 if op == "relu" else 2000)
    b = GraphBuilder(graph)
    c = b.constant(np.array([-1.0, 2.0], np.float32), name="c")
    graph.set_outputs([b.op(op, [c])])
    return graph


def _loop_body() -> Graph:
    """(i, cond, acc) -> (cond, acc + 1, acc): counts up, scanning the running value."""
    from irbridge.builder import GraphBuilder

    graph = Graph("body")
    graph.reserve_ids(3000)
    graph.add_input("i", t((), I64))
    cond = graph.add_input("cond_in", t((), B))
    acc = graph.add_input("acc", t((2,)))
    b = GraphBuilder(graph)
    one = b.constant(np.ones(2, np.float32), name="one")
    nxt = b.op("add", [acc, one])
    keep = b.op("identity", [cond])
    graph.set_outputs([keep, nxt, b.op("identity", [acc])])
    return graph


def examples() -> dict[str, OpExample]:
    unary = ["neg", "abs", "exp", "sqrt", "rsqrt", "reciprocal", "sin", "cos", "tan", "erf",
             "floor", "ceil", "round", "sign", "isnan", "isinf", "tanh", "sigmoid", "relu",
             "silu", "mish", "hardswish", "hardsigmoid", "leaky_relu", "elu", "softplus",
             "identity", "log"]
    binary = ["add", "sub", "mul", "div", "pow", "maximum", "minimum", "prelu", "equal",
              "not_equal", "less", "less_equal", "greater", "greater_equal"]
    ex: dict[str, OpExample] = {name: _unary() for name in unary}
    ex |= {name: _binary() for name in binary}
    ex["floor_div"] = OpExample([t((2, 3)), t((3,))], values={1: np.array([1.5, 2.0, 3.0], np.float32)})
    ex["mod"] = OpExample([t((2, 3)), t((3,))], values={1: np.array([1.5, 2.0, 3.0], np.float32)})
    ex |= {name: OpExample([t((2, 3), B), t((3,), B)])
           for name in ("logical_and", "logical_or", "logical_xor")}
    ex["logical_not"] = OpExample([t((2, 3), B)])
    ex["gelu"] = _unary(approximate="tanh")
    ex["clip"] = _unary(min=0.0, max=6.0)
    ex["where"] = OpExample([t((2, 3), B), t((2, 3)), t((3,))])
    ex["index_put"] = OpExample([t((2, 3, 4)), t((4,)), t((2,), I64)], {"index_axes": [1]},
                                values={2: np.array([0, 2], np.int64)})
    ex["cast"] = OpExample([t((2, 3))], {"dtype": DType.FLOAT16})
    # elementwise math and special functions (issue 13)
    ex |= {name: _unary() for name in (
        "acos", "asin", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "trunc", "signbit",
        "erfc", "erfinv", "erfcx", "lgamma", "digamma", "ndtri", "i0", "i0e", "i1", "i1e",
        "k0", "k1", "k0e", "k1e", "bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1",
        "spherical_bessel_j0", "airy_ai")}
    ex["polygamma"] = _unary(n=1)
    ex["frexp"] = _unary()
    ex |= {name: _binary() for name in ("atan2", "copysign", "fmod", "fmin", "fmax", "hypot",
                                        "nextafter", "zeta")}
    positive = np.array([[0.5], [1.5], [4.0]], np.float32)  # a > 0: the defined range
    ex |= {name: OpExample([t((3, 1)), t((2, 3, 4))], values={0: positive})
           for name in ("igamma", "igammac")}
    # degrees 0 (constant), 3 (recurrence) and 9 (closed form inside (-1, 1))
    ex["orthogonal_polynomial"] = OpExample([t((2, 3)), t((3,))], {"kind": "chebyshev_u"},
                                            values={1: np.array([0.0, 3.0, 9.0])})
    # nn
    ex["matmul"] = OpExample([t((4, 2, 8, 16)), t((16, 32))])
    ex["gemm"] = OpExample([t((16, 8)), t((32, 16)), t((32,))],
                           {"trans_a": True, "trans_b": True, "alpha": 0.5})
    ex["linear"] = OpExample([t((2, 10, 64)), t((128, 64)), t((128,))])
    # group 1 empty, row 5 past offs[-1] (zero)
    ex["grouped_matmul"] = OpExample([t((6, 8)), t((3, 8, 4)), t((3,), DType.INT32)],
                                     values={2: np.array([2, 2, 5], np.int32)})
    ex["conv"] = OpExample([t((1, 3, 32, 32)), t((8, 3, 3, 3)), t((8,))],
                           {"strides": (1, 1), "pads": (1, 1, 1, 1)})
    ex["conv_transpose"] = OpExample([t((1, 8, 16, 16)), t((8, 4, 2, 2))],
                                     {"strides": (2, 2)})
    ex["attention"] = OpExample([t((1, 8, 16, 32)), t((1, 2, 16, 32)), t((1, 2, 16, 32))],
                                {"causal": True})
    ex["batch_norm"] = OpExample([t((2, 4, 5, 5)), t((4,)), t((4,)), t((4,)), t((4,))],
                                 values={4: np.array([1.0, 0.5, 2.0, 0.25], np.float32)})
    ex["layer_norm"] = OpExample([t((2, 10, 64)), t((64,)), t((64,))])
    ex["group_norm"] = OpExample([t((2, 8, 4, 4)), t((8,)), t((8,))], {"num_groups": 4})
    ex["rms_norm"] = OpExample([t((2, 10, 64)), t((64,))], {"epsilon": 1e-6})
    ex["max_pool"] = OpExample([t((1, 4, 8, 8))], {"kernel": (3, 3), "strides": (2, 2),
                                                  "pads": (1, 1, 1, 1)})
    ex["avg_pool"] = OpExample([t((1, 4, 8, 8))], {"kernel": (2, 2)})
    ex["adaptive_avg_pool"] = OpExample([t((1, 4, 7, 7))], {"output_size": (1, 1)})
    ex["adaptive_max_pool"] = OpExample([t((1, 4, 7, 7))], {"output_size": (3, 3)})
    ex["embedding"] = OpExample([t((100, 16)), t((2, 5), I64)],
                                values={1: np.array([[0, 1, 2, 3, 99], [5, 6, 7, 8, 9]])})
    ex["resize"] = OpExample([t((1, 3, 4, 4))], {"mode": "nearest", "scales": (2.0, 2.0),
                                                "coordinate_mode": "asymmetric"})
    # tensor
    ex["constant"] = OpExample([], {"value": Tensor.from_array(
        "value", np.arange(6, dtype=np.float32).reshape(2, 3))})
    ex["full"] = OpExample([], {"shape": (2, 3), "value": 1.5})
    # the ONNX form: bounds as one-element inputs (their dtype is the output's)
    ex["range"] = OpExample([t((), I64), t((), I64), t((), I64)],
                            values={0: np.array(0), 1: np.array(10), 2: np.array(3)})
    ex["shape_of"] = OpExample([X])
    ex["reshape"] = OpExample([X], {"shape": (0, -1)})
    ex["permute"] = OpExample([X], {"perm": (2, 0, 1)})
    ex["slice"] = OpExample([X], {"starts": (1,), "ends": (4,), "axes": (2,), "steps": (2,)})
    # -- bitwise ops (interop) -------------------------------------------------------------
    I32 = DType.INT32
    for name in ("bitwise_and", "bitwise_or", "bitwise_xor"):
        ex[name] = OpExample([t((2, 3), I32), t((3,), I32)])
    for name in ("shift_left", "shift_right_logical", "shift_right_arithmetic"):
        ex[name] = OpExample([t((2, 3), I32), t((3,), I32)],
                             values={1: np.array([1, 31, 40])})  # 40: past the bit width
    for name in ("bitwise_not", "popcnt", "count_leading_zeros"):
        ex[name] = OpExample([t((2, 3), I32)])
    ex["bitcast"] = OpExample([t((2, 3))], {"dtype": DType.INT16})  # each f32 -> 2 x i16
    ex["reduce_precision"] = OpExample([t((2, 3))], {"exponent_bits": 5, "mantissa_bits": 3})
    # -- dynamic_slice / dynamic_update_slice (interop): run-time starts, clamped ----------
    ex["dynamic_slice"] = OpExample([t((4, 5)), t((), I64), t((), I64)], {"sizes": (2, 3)},
                                    {1: np.array(1), 2: np.array(4)})  # 4 clamps to 2
    ex["dynamic_update_slice"] = OpExample([t((4, 5)), t((2, 2)), t((), I64), t((), I64)],
                                           values={2: np.array(-1), 3: np.array(2)})
    ex["concat"] = OpExample([t((2, 3)), t((2, 5))], {"axis": 1})
    ex["split"] = OpExample([t((2, 8))], {"axis": 1, "sizes": (3, 5)})
    idx = np.array([[0, 2], [1, 0]])
    ex["gather"] = OpExample([t((3, 4)), t((2, 2), I64)], {"axis": 0}, {1: idx})
    ex["gather_elements"] = OpExample([t((3, 4)), t((2, 2), I64)], {"axis": 1}, {1: idx})
    ex["scatter_elements"] = OpExample([t((3, 4)), t((2, 2), I64), t((2, 2))],
                                       {"axis": 1, "reduction": "add"}, {1: idx})
    ex["pad"] = OpExample([t((2, 3))], {"pads": (0, 1, 0, 2), "mode": "reflect"})
    ex["expand"] = OpExample([t((3, 1))], {"shape": (2, 3, 4)})
    ex["squeeze"] = OpExample([t((2, 1, 3))], {"axes": (1,)})
    ex["unsqueeze"] = OpExample([t((2, 3))], {"axes": (0, -1)})
    ex["flatten"] = OpExample([X], {"start_axis": 1})
    ex["tile"] = OpExample([t((2, 3))], {"repeats": (2, 1)})
    ex["trilu"] = OpExample([t((4, 4)), t((), I64)], {"upper": False},
                            values={1: np.array(-1)})  # k as an input (ONNX Trilu)
    for name in ("reduce_mean", "reduce_max", "reduce_min", "reduce_prod", "reduce_l2",
                 "reduce_log_sum_exp"):
        ex[name] = OpExample([X], {"axes": (1,), "keepdims": True})
    # axes as an input (ONNX ReduceSum 13+), known here: the output type follows from it
    ex["reduce_sum"] = OpExample([X, t((2,), I64)], {"keepdims": False},
                                 values={1: np.array([0, -1])})
    ex["argmax"] = OpExample([X], {"axis": 2})
    ex["argmin"] = OpExample([X], {"axis": 1, "keepdims": True})
    ex["softmax"] = OpExample([X], {"axis": -1})
    ex["log_softmax"] = OpExample([X], {"axis": -1})
    ex["cumsum"] = OpExample([X], {"axis": 2})
    ex["cumprod"] = OpExample([X], {"axis": 1, "reverse": True})
    ex["logcumsumexp"] = OpExample([X], {"axis": -1})
    ex["cummax"] = OpExample([X], {"axis": 1})
    ex["cummin"] = OpExample([X], {"axis": -1})
    spd = np.eye(3, dtype=np.float32) * 4 + 1  # symmetric positive definite
    ex["inverse"] = OpExample([t((2, 3, 3))], values={0: np.stack([spd, spd * 2])})
    ex["det"] = OpExample([t((2, 3, 3))], values={0: np.stack([spd, spd * 2])})
    ex["cholesky"] = OpExample([t((3, 3))], {"upper": True}, values={0: spd})
    ex["solve"] = OpExample([t((3, 3)), t((3, 2))], values={0: spd})
    ex["slogdet"] = OpExample([t((2, 3, 3))])
    ex["svd"] = OpExample([t((4, 3))])
    ex["svdvals"] = OpExample([t((2, 3, 4))])
    ex["eigh"] = OpExample([t((3, 3))], {"upper": True})
    ex["eigvalsh"] = OpExample([t((2, 3, 3))])
    ex["qr"] = OpExample([t((4, 3))])
    ex["lu_factor"] = OpExample([t((3, 4))])
    lu = np.array([[4, 1, 2], [0.5, 3, 1], [0.25, -0.5, 2]], np.float32)  # unit L below, U on
    ex["lu_unpack"] = OpExample([t((3, 4)), t((3,), DType.INT32)],
                                values={1: np.array([2, 3, 3], np.int32)})
    ex["lu_solve"] = OpExample([t((3, 3)), t((3,), DType.INT32), t((3, 2))],
                               {"adjoint": True}, values={0: lu, 1: np.array([3, 2, 3])})
    # one matrix: StableHLO's reference interpreter aborts on batched triangular_solve
    ex["triangular_solve"] = OpExample([t((3, 3)), t((3, 2))],
                                       {"lower": False, "transpose_a": "TRANSPOSE"},
                                       values={0: lu})
    ex["matrix_exp"] = OpExample([t((2, 3, 3))])
    ex["geqrf"] = OpExample([t((2, 4, 3))])
    ex["ldl_factor"] = OpExample([t((2, 4, 4))])
    # ldl_factor of [[1, 2, 0], [2, 1, 1], [0, 1, 3]] (indefinite: one 2 x 2 pivot)
    ex["ldl_solve"] = OpExample([t((3, 3)), t((3,), DType.INT32), t((3, 2))],
                                values={0: np.array([[1, 0, 0], [2, 1, 0], [2 / 3, -1 / 3, 10 / 3]],
                                                    np.float32),
                                        1: np.array([-2, -2, 3], np.int32)})
    ex["householder_product"] = OpExample([t((4, 3)), t((2,))])
    ex["ormqr"] = OpExample([t((2, 4, 3)), t((2, 3)), t((2, 2, 4))], {"left": False,
                                                                       "transpose": True})
    ex["topk"] = OpExample([X, t((1,), I64)], values={1: np.array([2])})  # k as an input
    ex["sort"] = OpExample([X], {"descending": True})
    ex["one_hot"] = OpExample([t((4,), I64)], {"depth": 5}, {0: np.array([0, 4, 2, 1])})
    ex["non_zero"] = OpExample([t((2, 3))], values={0: np.array([[0, 1, 0], [2, 0, 3]],
                                                                 np.float32)})
    ex["masked_select"] = OpExample([t((2, 3)), t((3,), B)],
                                    values={1: np.array([True, False, True])})
    ex["unique"] = OpExample([t((2, 3))], values={0: np.array([[3, 1, 3], [0, 1, 5]],
                                                               np.float32)})
    ex["unique_consecutive"] = OpExample([t((2, 3))], values={
        0: np.array([[3, 3, 1], [1, 2, 2]], np.float32)})
    ex["if"] = OpExample([t((), B)], {"then_branch": _if_branch("relu"),
                                      "else_branch": _if_branch("neg")},
                         {0: np.array(True)})
    ex["loop"] = OpExample([t((), I64), t((), B), t((2,))], {"body": _loop_body()},
                           {0: np.array(3), 1: np.array(True)})
    ex.update(_complex_examples())
    return ex


def _complex_examples() -> dict[str, OpExample]:
    """Complex plumbing and FFTs (irbridge/ops/complex.py)."""
    c = t((2, 3, 4), DType.COMPLEX64)
    return {
        "complex": OpExample([t((2, 3)), t((3,))]),
        "polar": OpExample([t((2, 3)), t((2, 3))]),
        "real": OpExample([c]), "imag": OpExample([c]), "conj": OpExample([c]),
        "complex_abs": OpExample([c]), "angle": OpExample([c]),
        "view_as_real": OpExample([c]),
        "view_as_complex": OpExample([t((2, 3, 2))]),
        "fft_r2c": OpExample([t((2, 8))], {"dims": (1,), "normalization": "by_root_n"}),
        "fft_c2c": OpExample([t((4, 8), DType.COMPLEX64)],
                             {"dims": (0, 1), "forward": False, "normalization": "by_n"}),
        "fft_c2r": OpExample([t((2, 5), DType.COMPLEX64)],
                             {"dims": (1,), "last_dim_size": 8}),
    }


@dataclass
class BuiltExample:
    graph: Graph
    outputs: list[Value]
    feeds: dict[str, np.ndarray]  # random data for the graph inputs


def build_example(name: str, seed: int = 0) -> BuiltExample:
    """A one-node graph running op `name` on its example: inputs with fixed values become
    model tensors (so type inference sees them as constants), the rest graph inputs with
    random data."""
    from irbridge.builder import GraphBuilder
    from irbridge.ir import Model
    from irbridge.ops import registry

    ex = examples()[name]
    rng = np.random.default_rng(seed)
    graph = Graph()
    b = GraphBuilder(graph, Model())
    operands: list[Value | None] = []
    feeds: dict[str, np.ndarray] = {}
    for index, ty in enumerate(ex.inputs):
        if ty is None:
            operands.append(None)
        elif index in ex.values:
            data = np.asarray(ex.values[index]).astype(ty.dtype.numpy)
            operands.append(b.parameter(Tensor.from_array(f"in{index}", data)))
        else:
            value = graph.add_input(f"in{index}", ty)
            shape = ty.static_shape()
            if ty.dtype.is_float:
                feeds[value.name] = rng.standard_normal(shape).astype(ty.dtype.numpy)
            elif ty.dtype.numpy.kind == "c":
                feeds[value.name] = (rng.standard_normal(shape)
                                     + 1j * rng.standard_normal(shape)).astype(ty.dtype.numpy)
            elif ty.dtype.is_integer:
                feeds[value.name] = rng.integers(0, 3, shape).astype(ty.dtype.numpy)
            else:
                feeds[value.name] = rng.integers(0, 2, shape).astype(bool)
            operands.append(value)
    schema = registry.get(name)
    count = None
    if schema.variadic_outputs:
        counts = {"split": lambda: len(ex.values[1]) if 1 in ex.values
                  else len(ex.attrs["sizes"]),
                  "if": lambda: len(ex.attrs["then_branch"].outputs),
                  "loop": lambda: len(ex.attrs["body"].outputs) - 1}
        if name not in counts:
            raise KeyError(f"add the output count of variadic op {name} to build_example")
        count = counts[name]()
    outputs = b.op_multi(name, operands, ex.attrs, num_outputs=count)
    graph.set_outputs(outputs)
    return BuiltExample(graph, outputs, feeds)
