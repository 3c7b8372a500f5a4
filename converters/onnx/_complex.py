"""Complex values in the ONNX export, as real (real, imag) pairs.

onnxruntime has almost no complex kernels, so the exporter does what torch.onnx does:
in the file every complex64 / complex128 tensor of shape [...] is a float32 / float64
tensor of shape [..., 2] holding (real, imag) -- `view_as_real`'s layout -- and every
neutral node that reads or writes a complex value is written on those pairs here:

* plumbing: `complex`, `polar`, `real`, `imag`, `view_as_real` / `view_as_complex` (an
  Identity: the layout is already the pairs), `cast` to, from and between complex types
  (to a real type: the real part, as numpy and torch; to bool: real != 0 or imag != 0);
* arithmetic: `add`, `sub`, `mul`, `div` and `reciprocal` (Smith's scaled division, as
  c10::complex), `matmul` (four real matmuls of the parts), `neg`, `conj`, `complex_abs`
  (sqrt(re^2 + im^2) in float64 for complex64, the neutral hypot for complex128; inf
  where a part is infinite), `angle` (the neutral atan2); `equal` / `not_equal` (both
  parts), `isnan` / `isinf` (either part);
* data movement (the same neutral op on the pairs, axes / permutation / shape / pads
  shifted past the trailing pair dim: the inferred pair type must be the complex type
  plus [2], else the export is refused): `identity`, `reshape`, `permute`, `slice`,
  `pad` (value 0), `gather`, `squeeze`, `unsqueeze`, `concat`, `split`, `expand`, `tile`,
  `flatten`, `shape_of`, `where`, `reduce_sum`, `reduce_mean`; `constant`, `full` and
  `range` (computed by the IR's reference) as pair constants;
* the FFT family on ONNX `DFT` (the opset 17 form below opset 20, axis as an input from
  20), computed in float64 and rounded once to the output type: `fft_r2c` is a onesided
  (or full) real-input DFT of the last transformed dim, then complex DFTs of the others;
  inverse transforms are written as conj(DFT(conj(x))) (onnxruntime's inverse DFT loses
  digits: measured 2e-8 off numpy in float64, the forward one 5e-15); `fft_c2r` completes
  the Hermitian spectrum of its last dim (bins 0..L//2, the rest mirrored and
  conjugated, as numpy's irfft) and keeps the real part; the normalisation is one Mul
  by 1, 1/sqrt(N) or 1/N.

Any other op on a complex value is refused with one line naming the node.

A complex graph input or output is a float [..., 2] value in the file: its doc_string
says so, and the model's metadata_props entry `irbridge.complex_values` maps each such
name to its complex type (JSON). `complex_values`, `to_pairs` and `from_pairs` let code
that runs an exported file (converters/onnx/verify.py, tools/opinfo_sweep.py) feed
`view_as_real` arrays and read the outputs back with `view_as_complex`; both layouts
hold the same numbers, so that conversion is exact.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from onnx import ModelProto

from irbridge.builder import GraphBuilder
from irbridge.converters.onnx._common import array_to_proto
from irbridge.converters.onnx.export import NodeEmit
from irbridge.dtypes import DType
from irbridge.errors import ExportError, IrbridgeError
from irbridge.ir import Graph, Model, Node, Tensor, TensorType
from irbridge.ops import registry

if TYPE_CHECKING:
    from irbridge.converters.onnx.export import _GraphEmitter

REAL_OF = {DType.COMPLEX64: DType.FLOAT32, DType.COMPLEX128: DType.FLOAT64}
MODEL_META_COMPLEX = "irbridge.complex_values"
"""Model metadata key: JSON {graph input or output name: "complex64" | "complex128"}."""


# -- the layout ---------------------------------------------------------------------------

def is_complex(t: TensorType | None) -> bool:
    return t is not None and t.dtype in REAL_OF


def file_dtype(dtype: DType) -> DType:
    """The element type a value of `dtype` has in the file (complex -> its real type)."""
    return REAL_OF.get(dtype, dtype)


def pair_type(t: TensorType) -> TensorType:
    """The file type of a complex value: its real type, shape [..., 2]."""
    shape = None if t.shape is None else (*t.shape, 2)
    return TensorType(REAL_OF[t.dtype], shape)


def io_doc(t: TensorType) -> str:
    """doc_string of a complex graph input or output."""
    return (f"irbridge: {t.dtype.name.lower()} as {REAL_OF[t.dtype].name.lower()} "
            "[..., 2] (real, imag), torch.view_as_real's layout")


def involves(node: Node) -> bool:
    """Whether a node reads or writes a complex value (or casts to a complex type)."""
    values = [*node.inputs, *node.outputs]
    if any(v is not None and is_complex(v.type) for v in values):
        return True
    return any(isinstance(a, DType) and a in REAL_OF for a in node.attrs.values())


def pair_array(array: np.ndarray) -> np.ndarray:
    """A complex array as its real (real, imag) pairs; other arrays unchanged."""
    array = np.asarray(array)
    if array.dtype.kind != "c":
        return array
    return np.stack([array.real, array.imag], axis=-1)


def complex_values(model: ModelProto | Mapping[str, str]) -> dict[str, DType]:
    """The graph inputs and outputs of an exported file that hold complex values as pairs,
    with their complex type, from the model's `irbridge.complex_values` entry (`model`:
    the ModelProto, or its metadata as onnxruntime's `custom_metadata_map` gives it)."""
    meta = ({p.key: p.value for p in model.metadata_props}
            if isinstance(model, ModelProto) else model)
    text = meta.get(MODEL_META_COMPLEX)
    if not text:
        return {}
    return {name: DType[kind.upper()] for name, kind in json.loads(text).items()}


def to_pairs(array: np.ndarray) -> np.ndarray:
    """What a complex graph input of an exported file is fed: view_as_real of the array."""
    return np.ascontiguousarray(pair_array(array))


def from_pairs(array: np.ndarray, dtype: DType) -> np.ndarray:
    """A complex graph output of an exported file, read back as `dtype` (view_as_complex)."""
    array = np.asarray(array)
    if array.ndim == 0 or array.shape[-1] != 2:
        raise ExportError(f"a complex output must end in a dim of 2 (real, imag), got shape "
                          f"{list(array.shape)}")
    out = np.empty(array.shape[:-1], dtype.numpy)
    out.real, out.imag = array[..., 0], array[..., 1]
    return out


# -- lowering one node --------------------------------------------------------------------

class _Lowering(NodeEmit):
    """One complex node being written on pairs: ONNX nodes through the graph emitter
    (`one`), real neutral ops through the exporter's own emitters (`neutral`)."""

    def fail(self, why: str) -> ExportError:
        return ExportError(f"{self.where}: cannot export to ONNX on (real, imag) pairs: {why}")

    # types ----------------------------------------------------------------------------------
    def in_type(self, index: int) -> TensorType:
        t = super().in_type(index)
        if t is None or not self.has(index):
            raise self.fail(f"input {index} is missing or untyped")
        return t

    def out_type(self, index: int = 0) -> TensorType:
        t = super().out_type(index)
        if t is None:
            raise self.fail(f"output {index} has no type")
        return t

    def out_real(self) -> DType:
        """The real type of the (complex) output."""
        return file_dtype(self.out_type().dtype)

    # emitting -------------------------------------------------------------------------------
    def cast(self, name: str, source: DType, target: DType) -> str:
        return self.ge.cast(name, source, target)

    def finish(self, names: Sequence[str]) -> None:
        for name, out in zip(names, self.outs, strict=True):
            if out:
                self.ge.one("Identity", [name], out)

    def neutral(self, op: str, inputs: Sequence[tuple[str, TensorType] | None],
                attrs: dict[str, Any], count: int = 1) -> list[tuple[str, TensorType]]:
        """A real neutral op on file values, written by the exporter's emitter (or its
        registry decomposition); the results with their inferred types."""
        scratch = Graph(f"complex_{op}")
        stand = [None if item is None else scratch.add_input(f"in{k}", item[1])
                 for k, item in enumerate(inputs)]
        try:
            results = GraphBuilder(scratch).op_multi(op, stand, attrs, num_outputs=count)
        except IrbridgeError as exc:
            raise self.fail(f"{op} on the (real, imag) pairs: {exc.message}") from exc
        names = []
        for value in results:
            assert value.type is not None
            name = self.ge.ex.fresh(f"{self.ge.label}/{op}_pairs")
            self.ge.ex.types[name] = value.type.dtype
            names.append(name)
        self.ge.emit_node(scratch.nodes[-1], [None if item is None else item[0]
                                              for item in inputs], names, nested=True)
        return [(name, v.type) for name, v in zip(names, results, strict=True)
                if v.type is not None]

    # pairs ----------------------------------------------------------------------------------
    def parts(self, pair: str) -> tuple[str, str]:
        """(real, imag) of a pair value, each keeping a trailing dim of 1."""
        axis = self.i64([-1])
        re = self.one("Slice", [pair, self.i64([0]), self.i64([1]), axis])
        im = self.one("Slice", [pair, self.i64([1]), self.i64([2]), axis])
        return re, im

    def pack(self, re: str, im: str) -> str:
        """A pair value from (real, imag) parts that each end in a dim of 1."""
        return self.one("Concat", [re, im], axis=-1)

    def part(self, pair: str, index: int) -> str:
        """The real (0) or imaginary (1) part of a pair value, without the pair dim."""
        return self.one("Gather", [pair, self.i64(index)], axis=-1)

    def from_real(self, name: str, real: DType) -> str:
        """A real value (already of type `real`) as a pair value with imaginary part 0."""
        re = self.one("Unsqueeze", [name, self.i64([-1])])
        zeros = self.one("ConstantOfShape", [self.one("Shape", [re])],
                         value=_tensor(np.zeros(1, real.numpy)))
        return self.pack(re, zeros)

    def pair(self, index: int, real: DType | None = None) -> str:
        """Input `index` as a pair value of real type `real` (the output's by default): a
        real input becomes (x, 0), as type promotion makes it."""
        t = self.in_type(index)
        name = self.ins[index]
        assert name is not None
        target = real or self.out_real()
        if is_complex(t):
            return self.cast(name, REAL_OF[t.dtype], target)
        return self.from_real(self.cast(name, t.dtype, target), target)

    def conj(self, pair: str, real: DType) -> str:
        return self.one("Mul", [pair, self.ge.const(np.asarray([1, -1], real.numpy))])


def _tensor(array: np.ndarray) -> Any:
    return array_to_proto(array, "value")


Lower = Callable[[_Lowering], None]
LOWERINGS: dict[str, Lower] = {}


def _lowers(*ops: str) -> Callable[[Lower], Lower]:
    def wrap(fn: Lower) -> Lower:
        for op in ops:
            LOWERINGS[op] = fn
        return fn
    return wrap


def emit(ge: _GraphEmitter, node: Node, attrs: dict[str, Any], ins: list[str | None],
         outs: list[str]) -> None:
    """Write a neutral node that reads or writes complex values on (real, imag) pairs, or
    refuse it with one line naming it."""
    where = registry.node_where(node)
    if node.is_opaque:
        raise ExportError(f"{where}: opaque op {node.qualified_op} on complex values has no "
                          "ONNX lowering (complex values are written as (real, imag) pairs)")
    low = _Lowering(ge, node, attrs, ins, outs)
    if node.outputs and all(v.type is not None and v.type.is_static and v.type.numel() == 0
                            for v in node.outputs):
        for value, name in zip(node.outputs, outs, strict=True):
            assert value.type is not None
            t = pair_type(value.type) if is_complex(value.type) else value.type
            if name:
                ge.ex.types[name] = t.dtype
                low.ge.emit("Constant", [], [name], value=_tensor(
                    np.zeros(t.static_shape(), t.dtype.numpy)))
        return
    lower = LOWERINGS.get(node.op)
    if lower is None:
        raise ExportError(f"{where}: neutral op {node.op!r} on complex values has no ONNX "
                          f"mapping (complex values are written as real (real, imag) pairs, "
                          f"and {node.op} is not mapped on them)")
    lower(low)


# -- plumbing -----------------------------------------------------------------------------

@_lowers("constant")
def _constant(low: _Lowering) -> None:
    value = low.attrs["value"]
    assert isinstance(value, Tensor)
    if value.data is None:
        raise low.fail("the constant has no data")
    low.finish([low.ge.const(pair_array(value.data.reshape(value.shape)), "pairs")])


@_lowers("full", "range")
def _generated(low: _Lowering) -> None:
    """A complex tensor generated from attributes alone (full, an iota): the IR's own
    reference computes it once, written as a pair constant."""
    from irbridge.executor import run_graphs

    t = low.out_type()
    if not t.is_static or any(v is not None for v in low.node.inputs):
        raise low.fail(f"a generated complex {low.node.op} needs a static shape and no "
                       f"tensor inputs, got {t}")
    scratch = Graph(f"complex_{low.node.op}")
    scratch.set_outputs([GraphBuilder(scratch).op(low.node.op, [], low.attrs)])
    (data,) = run_graphs(Model(graphs=[scratch]), {})[-1]
    low.finish([low.ge.const(pair_array(np.asarray(data, t.dtype.numpy)), "pairs")])


@_lowers("cast")
def _cast(low: _Lowering) -> None:
    source, target = low.in_type(0), low.out_type()
    name = low.ins[0]
    assert name is not None
    if is_complex(target):
        low.finish([low.pair(0)])
        return
    assert is_complex(source)
    real = REAL_OF[source.dtype]
    if target.dtype == DType.BOOL:  # nonzero: either part
        nonzero = low.one("Not", [low.one("Equal", [name, low.scalar(0, real)])])
        low.finish([low.one("Or", [low.part(nonzero, 0), low.part(nonzero, 1)])])
        return
    low.finish([low.cast(low.part(name, 0), real, target.dtype)])


@_lowers("view_as_real", "view_as_complex", "identity")
def _same_numbers(low: _Lowering) -> None:
    name = low.ins[0]
    assert name is not None
    low.finish([name])


@_lowers("real", "imag")
def _component(low: _Lowering) -> None:
    name = low.ins[0]
    assert name is not None
    low.finish([low.part(name, 0 if low.node.op == "real" else 1)])


@_lowers("complex")
def _complex(low: _Lowering) -> None:
    re, im = low.ins[0], low.ins[1]
    assert re is not None and im is not None
    # Expand is bidirectional: each part to the broadcast shape of both
    re_b = low.one("Expand", [re, low.one("Shape", [im])])
    im_b = low.one("Expand", [im, low.one("Shape", [re])])
    axis = low.i64([-1])
    low.finish([low.pack(low.one("Unsqueeze", [re_b, axis]),
                         low.one("Unsqueeze", [im_b, axis]))])


@_lowers("polar")
def _polar(low: _Lowering) -> None:
    real = low.out_real()
    wide = DType.FLOAT64  # products rounded once to float32
    r = low.cast(low.ins[0] or "", real, wide)
    theta = low.cast(low.ins[1] or "", real, wide)
    re = low.one("Mul", [r, low.one("Cos", [theta])])
    im = low.one("Mul", [r, low.one("Sin", [theta])])
    axis = low.i64([-1])
    low.finish([low.cast(low.pack(low.one("Unsqueeze", [re, axis]),
                                  low.one("Unsqueeze", [im, axis])), wide, real)])


# -- arithmetic ---------------------------------------------------------------------------

@_lowers("neg")
def _neg(low: _Lowering) -> None:
    low.finish([low.one("Neg", [low.pair(0)])])


@_lowers("conj")
def _conj(low: _Lowering) -> None:
    low.finish([low.conj(low.pair(0), low.out_real())])


@_lowers("add", "sub")
def _add_sub(low: _Lowering) -> None:
    op = "Add" if low.node.op == "add" else "Sub"
    low.finish([low.one(op, [low.pair(0), low.pair(1)])])


@_lowers("mul")
def _mul(low: _Lowering) -> None:
    a, b = low.parts(low.pair(0)), low.parts(low.pair(1))
    re = low.one("Sub", [low.one("Mul", [a[0], b[0]]), low.one("Mul", [a[1], b[1]])])
    im = low.one("Add", [low.one("Mul", [a[0], b[1]]), low.one("Mul", [a[1], b[0]])])
    low.finish([low.pack(re, im)])


def _smith(low: _Lowering, a: str, b: str, c: str, d: str, real: DType) -> str:
    """(a + bi) / (c + di) by Smith's division, as c10::complex's operator/: scaled by
    the larger of |c|, |d|, and (a / |c|, b / |d|) for a zero divisor (inf or nan)."""
    one = low.scalar(1.0, real)
    abs_c, abs_d = low.one("Abs", [c]), low.one("Abs", [d])
    c_big = low.one("GreaterOrEqual", [abs_c, abs_d])
    # |c| >= |d|: rat = d / c, scl = 1 / (c + d rat): ((a + b rat) scl, (b - a rat) scl)
    rat1 = low.one("Div", [d, c])
    scl1 = low.one("Div", [one, low.one("Add", [c, low.one("Mul", [d, rat1])])])
    re1 = low.one("Mul", [low.one("Add", [a, low.one("Mul", [b, rat1])]), scl1])
    im1 = low.one("Mul", [low.one("Sub", [b, low.one("Mul", [a, rat1])]), scl1])
    # else: rat = c / d, scl = 1 / (d + c rat): ((a rat + b) scl, (b rat - a) scl)
    rat2 = low.one("Div", [c, d])
    scl2 = low.one("Div", [one, low.one("Add", [d, low.one("Mul", [c, rat2])])])
    re2 = low.one("Mul", [low.one("Add", [low.one("Mul", [a, rat2]), b]), scl2])
    im2 = low.one("Mul", [low.one("Sub", [low.one("Mul", [b, rat2]), a]), scl2])
    zero = low.one("And", [low.one("Equal", [abs_c, low.scalar(0, real)]),
                           low.one("Equal", [abs_d, low.scalar(0, real)])])
    re0, im0 = low.one("Div", [a, abs_c]), low.one("Div", [b, abs_d])
    re = low.one("Where", [zero, re0, low.one("Where", [c_big, re1, re2])])
    im = low.one("Where", [zero, im0, low.one("Where", [c_big, im1, im2])])
    return low.pack(re, im)


@_lowers("div")
def _div(low: _Lowering) -> None:
    (a, b), (c, d) = low.parts(low.pair(0)), low.parts(low.pair(1))
    low.finish([_smith(low, a, b, c, d, low.out_real())])


@_lowers("reciprocal")
def _reciprocal(low: _Lowering) -> None:
    """1 / z as c10's scalar / complex: (1 + 0i) / z."""
    real = low.out_real()
    c, d = low.parts(low.pair(0))
    low.finish([_smith(low, low.scalar(1.0, real), low.scalar(0.0, real), c, d, real)])


@_lowers("matmul")
def _matmul(low: _Lowering) -> None:
    """(A + iB)(C + iD) = (AC - BD) + i(AD + BC): four real matmuls of the parts."""
    real = low.out_real()
    a, b = low.pair(0), low.pair(1)
    ta, tb = low.in_type(0), low.in_type(1)
    ra, rb = TensorType(real, ta.shape), TensorType(real, tb.shape)
    ar, ai = (low.part(a, 0), ra), (low.part(a, 1), ra)
    br, bi = (low.part(b, 0), rb), (low.part(b, 1), rb)

    def mm(x: tuple[str, TensorType], y: tuple[str, TensorType]) -> str:
        return low.neutral("matmul", [x, y], {})[0][0]

    re = low.one("Sub", [mm(ar, br), mm(ai, bi)])
    im = low.one("Add", [mm(ar, bi), mm(ai, br)])
    axis = low.i64([-1])
    low.finish([low.pack(low.one("Unsqueeze", [re, axis]), low.one("Unsqueeze", [im, axis]))])


@_lowers("equal", "not_equal")
def _equal(low: _Lowering) -> None:
    """Equal where both parts are (nan never equal); not_equal its negation, as torch."""
    real = REAL_OF[next(low.in_type(i).dtype for i in (0, 1) if is_complex(low.in_type(i)))]
    same = low.one("Equal", [low.pair(0, real), low.pair(1, real)])
    both = low.one("And", [low.part(same, 0), low.part(same, 1)])
    low.finish([both if low.node.op == "equal" else low.one("Not", [both])])


@_lowers("isnan", "isinf")
def _isnan(low: _Lowering) -> None:
    """True where either part is nan (isinf: infinite), as torch."""
    name = low.ins[0]
    assert name is not None
    test = low.one("IsNaN" if low.node.op == "isnan" else "IsInf", [name])
    low.finish([low.one("Or", [low.part(test, 0), low.part(test, 1)])])


@_lowers("complex_abs")
def _abs(low: _Lowering) -> None:
    source = low.in_type(0)
    name = low.ins[0]
    assert name is not None
    real = REAL_OF[source.dtype]
    if real == DType.FLOAT32:  # squares exact in float64, one rounding at the end
        wide = low.cast(name, real, DType.FLOAT64)
        total = low.one("ReduceSum", [low.one("Mul", [wide, wide]), low.i64([-1])],
                        keepdims=0)
        out = low.cast(low.one("Sqrt", [total]), DType.FLOAT64, real)
    else:
        parts = TensorType(real, source.shape)
        (out, _), = low.neutral("hypot", [(low.part(name, 0), parts),
                                          (low.part(name, 1), parts)], {})
    # hypot's rule: an infinite part gives inf, even beside a nan
    inf = low.one("IsInf", [name])
    infinite = low.one("Or", [low.part(inf, 0), low.part(inf, 1)])
    low.finish([low.one("Where", [infinite, low.scalar(np.inf, real), out])])


@_lowers("angle")
def _angle(low: _Lowering) -> None:
    source = low.in_type(0)
    name = low.ins[0]
    assert name is not None
    parts = TensorType(REAL_OF[source.dtype], source.shape)
    (out, _), = low.neutral("atan2", [(low.part(name, 1), parts), (low.part(name, 0), parts)],
                            {})
    low.finish([out])


# -- data movement: the same op on the pairs ----------------------------------------------

PARAMS: dict[str, tuple[str, ...]] = {
    # neutral ops whose optional inputs after the data are attributes given as tensors
    "reshape": ("shape",), "slice": ("starts", "ends", "axes", "steps"),
    "pad": ("pads", "value"), "squeeze": ("axes",), "unsqueeze": ("axes",),
    "expand": ("shape",), "tile": ("repeats",), "reduce_sum": ("axes",),
    "reduce_mean": ("axes",), "split": ("sizes",)}


def _folded(low: _Lowering) -> dict[str, Any]:
    """The node's attributes with its parameter inputs (constants) folded in."""
    attrs = dict(low.attrs)
    for offset, key in enumerate(PARAMS.get(low.node.op, ()), start=1):
        if offset < len(low.node.inputs) and low.node.inputs[offset] is not None:
            value = registry.constant_value(low.node.inputs[offset])
            if value is None:
                raise low.fail(f"its {key} must be a constant (a computed {key} is not "
                               "mapped on the pairs)")
            flat = np.asarray(value).reshape(-1)
            attrs[key] = float(flat[0]) if key == "value" else tuple(int(v) for v in flat)
    return attrs


def _axes(axes: Sequence[int], rank: int) -> tuple[int, ...]:
    return tuple(int(a) % rank if rank else int(a) for a in axes)


def _pair_attrs(low: _Lowering, attrs: dict[str, Any]) -> dict[str, Any]:
    """The attributes of the same op on the pairs (the pair dim is the last, untouched)."""
    op = low.node.op
    rank = low.rank(0)
    out = low.out_type()
    if op == "reshape":
        shape = out.static_shape() if out.is_static else tuple(attrs["shape"])
        return {"shape": (*shape, 2)}
    if op == "permute":
        return {"perm": (*attrs["perm"], rank)}
    if op == "slice":
        axes = attrs["axes"] or tuple(range(len(attrs["starts"])))
        return {**attrs, "axes": _axes(axes, rank)}
    if op == "pad":
        if attrs["mode"] == "constant" and attrs["value"] != 0:
            raise low.fail(f"pad value {attrs['value']} (only 0 is mapped on the pairs)")
        pads = tuple(attrs["pads"])
        half = len(pads) // 2
        return {**attrs, "pads": (*pads[:half], 0, *pads[half:], 0)}
    if op == "flatten":
        return {"start_axis": int(attrs["start_axis"]) % rank,
                "end_axis": int(attrs["end_axis"]) % rank}
    if op == "shape_of":
        end = int(attrs["end"]) or rank
        lo, hi = (min(max(b + rank if b < 0 else b, 0), rank) for b in (attrs["start"], end))
        return {"start": lo, "end": max(hi, lo)}
    if op in ("gather", "concat", "split"):
        return {**attrs, "axis": int(attrs["axis"]) % rank}
    if op == "squeeze":
        axes = attrs["axes"]
        if not axes:
            t = low.in_type(0)
            assert t.shape is not None
            axes = tuple(i for i, d in enumerate(t.shape) if d == 1)
            if any(not isinstance(d, int) for d in t.shape):
                raise low.fail(f"squeeze of every unit dim needs a static shape, got {t}")
        return {"axes": _axes(axes, rank)}
    if op == "unsqueeze":
        return {"axes": _axes(attrs["axes"], len(out.shape or ()))}
    if op == "expand":
        return {"shape": (*attrs["shape"], 2)}
    if op == "tile":
        return {"repeats": (*attrs["repeats"], 1)}
    if op in ("reduce_sum", "reduce_mean"):
        axes = attrs["axes"]
        if not axes:
            if attrs.get("noop_with_empty_axes"):
                return {**attrs}
            axes = tuple(range(rank))
        return {**attrs, "axes": _axes(axes, rank), "noop_with_empty_axes": False}
    return dict(attrs)  # where: no attributes


@_lowers("reshape", "permute", "slice", "pad", "gather", "squeeze", "unsqueeze", "concat",
         "split", "expand", "tile", "where", "reduce_sum", "reduce_mean", "flatten", "shape_of")
def _movement(low: _Lowering) -> None:
    """The op itself on the pairs; its inferred types must be the complex ones plus [2]."""
    attrs = _pair_attrs(low, _folded(low))
    op = low.node.op
    inputs: list[tuple[str, TensorType] | None] = []
    data = range(1, 3) if op == "where" else (
        range(len(low.node.inputs)) if op == "concat" else range(1))
    out = low.out_type()  # complex, but for shape_of (of a complex input)
    real = file_dtype(out.dtype if is_complex(out) else low.in_type(0).dtype)
    for index in range(len(low.node.inputs)):
        if index in data:
            t = low.in_type(index)
            shape = None if t.shape is None else (*t.shape, 2)
            inputs.append((low.pair(index, real), TensorType(real, shape)))
        elif op in ("gather", "where") and index < (3 if op == "where" else 2):
            t = low.in_type(index)
            name = low.ins[index]
            assert name is not None
            if op == "where":  # the condition broadcasts over the pair dim
                shape = None if t.shape is None else (*t.shape, 1)
                name = low.one("Unsqueeze", [name, low.i64([-1])])
                t = TensorType(t.dtype, shape)
            inputs.append((name, t))
        else:
            break  # parameter inputs: folded into the attributes
    results = low.neutral(op, inputs, attrs, count=len(low.node.outputs))
    for index, (_, got) in enumerate(results):
        want = low.out_type(index)
        want = pair_type(want) if is_complex(want) else want
        if want.shape is not None and got != want:
            raise low.fail(f"the pairs came out as {got}, not {want}")
    low.finish([name for name, _ in results])


# -- FFTs on ONNX DFT ---------------------------------------------------------------------

WIDE = DType.FLOAT64


def _dims(low: _Lowering, rank: int) -> list[int]:
    return [int(d) % rank for d in low.attrs["dims"]]


def _dft(low: _Lowering, x: str, axis: int, onesided: bool = False) -> str:
    """A forward DFT of `x` ([..., 1] real or [..., 2] complex, float64) along `axis`
    (non-negative; onnxruntime mis-reads negative axes), no scaling."""
    flag = int(onesided)
    low.need_opset(17, "ONNX DFT")
    if low.opset >= 20:
        return low.one("DFT", [x, "", low.i64(axis)], inverse=0, onesided=flag)
    return low.one("DFT", [x], axis=axis, inverse=0, onesided=flag)


def _scaled(low: _Lowering, x: str, n: int) -> str:
    mode = low.attrs["normalization"]
    if mode == "none" or n == 1:
        return x
    factor = 1.0 / math.sqrt(n) if mode == "by_root_n" else 1.0 / n
    return low.one("Mul", [x, low.scalar(factor, WIDE)])


def _sizes(low: _Lowering, dims: Sequence[int]) -> list[int]:
    shape = low.in_type(0).shape
    assert shape is not None
    sizes = [n for n in (shape[d] for d in dims) if isinstance(n, int)]
    if len(sizes) != len(dims):
        raise low.fail(f"transformed dims {list(dims)} need static sizes")
    return sizes


@_lowers("fft_r2c")
def _fft_r2c(low: _Lowering) -> None:
    rank = low.rank(0)
    dims = _dims(low, rank)
    source = low.in_type(0).dtype
    x = low.one("Unsqueeze", [low.cast(low.ins[0] or "", source, WIDE), low.i64([-1])])
    y = _dft(low, x, dims[-1], onesided=bool(low.attrs["onesided"]))
    for d in dims[:-1]:
        y = _dft(low, y, d)
    y = _scaled(low, y, math.prod(_sizes(low, dims)))
    low.finish([low.cast(y, WIDE, low.out_real())])


@_lowers("fft_c2c")
def _fft_c2c(low: _Lowering) -> None:
    rank = low.rank(0)
    dims = _dims(low, rank)
    real = low.out_real()
    x = low.pair(0, WIDE)
    forward = bool(low.attrs["forward"])
    if not forward:  # inverse DFT = conj(DFT(conj(x)))
        x = low.conj(x, WIDE)
    for d in dims:
        x = _dft(low, x, d)
    if not forward:
        x = low.conj(x, WIDE)
    x = _scaled(low, x, math.prod(_sizes(low, dims)))
    low.finish([low.cast(x, WIDE, real)])


@_lowers("fft_c2r")
def _fft_c2r(low: _Lowering) -> None:
    """Inverse DFTs of dims[:-1], then numpy's irfft of the last dim (length L): bins
    0..L//2 (cut or zero-padded), bins L//2+1..L-1 the conjugates of bins L-k; the real
    part of the inverse DFT of that full spectrum. All inverse DFTs as conj(DFT(conj)),
    the last conj dropped (the real part does not see it)."""
    rank = low.rank(0)
    dims = _dims(low, rank)
    length = int(low.attrs["last_dim_size"])
    last = dims[-1]
    bins = _sizes(low, [last])[0]
    x = low.conj(low.pair(0, WIDE), WIDE)
    for d in dims[:-1]:
        x = _dft(low, x, d)
    keep = length // 2 + 1
    if bins >= keep:
        x = low.one("Slice", [x, low.i64([0]), low.i64([keep]), low.i64([last])])
    else:
        pads = [0] * (2 * (rank + 1))
        pads[rank + 1 + last] = keep - bins
        x = low.one("Pad", [x, low.i64(pads)], mode="constant")
    mirror = [length - k for k in range(keep, length)]
    if mirror:
        tail = low.one("Gather", [x, low.i64(mirror)], axis=last)
        x = low.one("Concat", [x, low.conj(tail, WIDE)], axis=last)
    x = low.part(_dft(low, x, last), 0)
    n = math.prod(_sizes(low, dims[:-1])) * length
    low.finish([low.cast(_scaled(low, x, n), WIDE, low.out_type().dtype)])
