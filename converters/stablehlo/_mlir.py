"""Pieces shared by the StableHLO exporter, importer and evaluator: the MLIR context,
element types, dense attributes, portable-artifact versions, locations and error lines.

Everything MLIR comes from the bindings in torch-mlir's wheel (`torch_mlir.ir` plus the
`_stablehlo` extension with the dialect, the VHLO serializer and the reference
interpreter); no other module of irbridge imports them.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
from torch_mlir import ir
from torch_mlir._mlir_libs import _stablehlo

from irbridge.dtypes import DType

BYTECODE_MAGIC = b"ML\xefR"
"""First bytes of MLIR bytecode (portable artifacts are MLIR bytecode of the VHLO dialect)."""

PRODUCER_PREFIX = "StableHLO_v"
"""Portable artifacts name their producer "StableHLO_v<target version>"."""


# -- context ---------------------------------------------------------------------------------

def new_context(*, allow_unregistered: bool = False,
                diagnostics: list[str] | None = None) -> ir.Context:
    """A context with the func and stablehlo dialects (and the interpreter's) registered.

    With a `diagnostics` list, every diagnostic MLIR emits outside a call that collects
    its own (parse errors do) is appended to it as 'LOCATION: message' instead of being
    printed to stderr: callers fold the first into their one-line error."""
    ctx = ir.Context()
    _stablehlo.register_dialect(ctx)
    _stablehlo.register_interpreter_dialect(ctx)
    ctx.allow_unregistered_dialects = allow_unregistered
    if diagnostics is not None:
        def collect(diagnostic: ir.Diagnostic) -> bool:
            try:  # the bindings raise on messages that are not UTF-8 (corrupt bytecode)
                message = one_line(diagnostic.message)
            except Exception:
                message = "(a diagnostic that is not valid UTF-8)"
            try:
                loc = parse_location(str(diagnostic.location))
            except Exception:
                loc = parse_location("")
            where = f"line {loc.line}:{loc.col}: " if loc.line else ""
            diagnostics.append(where + message)
            return True  # handled: MLIR prints nothing

        ctx.attach_diagnostic_handler(collect)
    return ctx


# -- nesting ---------------------------------------------------------------------------------

MAX_BRACKET_DEPTH = 256
"""Deepest nesting of (), [] and {} the text pre-scan lets through to MLIR's parser, which
recurses once per level (it crashed with SIGSEGV near 10,000 levels). Real programs stay
far below: a region costs two levels, a rank-N dense literal N."""

_TOKENS = re.compile(r'"(?:[^"\\\n]|\\.)*"|//[^\n]*|[(\[{]|[)\]}]')


_COMPLEX_LITERAL = re.compile(r'dense<\s*\([^<>"]*>\s*:\s*tensor<([^<>]*(?:<[^<>]*>)?)>')


def complex_literal_mismatch(text: str) -> tuple[int, str] | None:
    """(line, type) of a `dense<(re, im)>` literal whose tensor type is not complex, or
    None. MLIR's parser accepts it for a scalar type and the bindings then crash (SIGSEGV)
    on any read or print of the attribute, so such text must not reach them."""
    for match in _COMPLEX_LITERAL.finditer(text):
        if "complex<" not in match[1]:
            return text.count("\n", 0, match.start()) + 1, f"tensor<{match[1]}>"
    return None


_DENSE_OR_STRING = re.compile(r'dense<[^<>]*>|"(?:[^"\\\n]|\\.)*"')
_HUGE_IN_LIST = re.compile(r"\[[^\[\]]*?(?<![\w.])(\d{10,})(?![\w.])[^\[\]]*\]")


def huge_list_index(text: str) -> tuple[int, str] | None:
    """(line, number) of an integer of ten or more digits in a bracketed list outside dense
    literals and strings (dimension numbers, `dims = [...]`, window attributes), or None.
    No such list holds a dimension or index past 2^31 in a real program, and MLIR's parser
    allocates by the number before it checks it (an LLVM fatal error, the process gone,
    for `dim_numbers = [b, f, 1099511627776, 1]`)."""
    blanked = _DENSE_OR_STRING.sub(lambda m: " " * len(m.group()), text)
    match = _HUGE_IN_LIST.search(blanked)
    if match is None:
        return None
    return text.count("\n", 0, match.start(1)) + 1, match.group(1)


def text_too_deep(text: str, limit: int = MAX_BRACKET_DEPTH) -> int | None:
    """The line (1-based) where brackets outside strings and comments first nest deeper
    than `limit`, or None. Linear in the text; nothing is parsed."""
    depth = 0
    for match in _TOKENS.finditer(text):
        ch = match.group()
        if ch in "([{":
            depth += 1
            if depth > limit:
                return text.count("\n", 0, match.start()) + 1
        elif ch in ")]}":
            depth = max(depth - 1, 0)
    return None


# -- versions --------------------------------------------------------------------------------

def current_version() -> str:
    return str(_stablehlo.get_current_version())


def minimum_version() -> str:
    return str(_stablehlo.get_minimum_version())


def version_tuple(text: str, what: str = "version") -> tuple[int, int, int]:
    match = re.fullmatch(r"v?(\d+)\.(\d+)\.(\d+)", text.strip())
    if match is None:
        raise ValueError(f"{what} {text!r} is not of the form MAJOR.MINOR.PATCH (e.g. "
                         f"{current_version()})")
    return int(match[1]), int(match[2]), int(match[3])


def artifact_version(data: bytes) -> str | None:
    """The target version written in a portable artifact's bytecode header, if any.

    The header is the magic, a varint bytecode version, then the producer string
    (NUL-terminated)."""
    if not data.startswith(BYTECODE_MAGIC):
        return None
    pos = len(BYTECODE_MAGIC)
    # varint (MLIR's prefix varint: the count of trailing zero bits of the first byte + 1
    # gives the byte length); skip it
    if pos >= len(data):
        return None
    first = data[pos]
    length = 9 if first == 0 else ((first & -first).bit_length())
    pos += length
    end = data.find(b"\0", pos, pos + 256)
    if end < 0:
        return None
    producer = data[pos:end].decode("utf-8", "replace")
    if producer.startswith(PRODUCER_PREFIX):
        return producer[len(PRODUCER_PREFIX):]
    return None


# -- nesting in bytecode --------------------------------------------------------------------

MAX_BYTECODE_DEPTH = 128
"""Deepest region nesting the bytecode pre-scan lets through to MLIR's deserialiser, which
recurses per level and takes time quadratic in the depth (20,000 levels: 50 s)."""


class _Malformed(Exception):
    pass


class _Bytes:
    """A cursor over MLIR bytecode: bytes, prefix varints, sections."""

    def __init__(self, data: bytes, pos: int = 0, end: int | None = None) -> None:
        self.data, self.pos, self.end = data, pos, len(data) if end is None else end

    def byte(self) -> int:
        if self.pos >= self.end:
            raise _Malformed("unexpected end")
        value = self.data[self.pos]
        self.pos += 1
        return value

    def varint(self) -> int:
        """MLIR's prefix varint: the first byte's trailing zeros + 1 give its length."""
        first = self.byte()
        if first & 1:
            return first >> 1
        size = 9 if first == 0 else (first & -first).bit_length()
        if self.pos + size - 1 > self.end:
            raise _Malformed("unexpected end")
        raw = bytes([first]) + self.data[self.pos:self.pos + size - 1]
        self.pos += size - 1
        value = int.from_bytes(raw, "little")
        return value >> 8 if size == 9 else value >> size

    def flagged(self) -> tuple[int, bool]:
        value = self.varint()
        return value >> 1, bool(value & 1)

    def section(self) -> tuple[int, int, int]:
        head = self.byte()
        length = self.varint()
        if head & 0x80:  # aligned: padding bytes 0xCB up to the alignment
            align = self.varint()
            if align == 0 or align & (align - 1) or align > 1 << 16:
                raise _Malformed("bad alignment")
            while self.pos % align:
                if self.byte() != 0xCB:
                    raise _Malformed("bad padding")
        start = self.pos
        if start + length > self.end:
            raise _Malformed("section past the end")
        self.pos = start + length
        return head & 0x7F, start, start + length


_IR_SECTION = 4
_HAS_ATTRS, _HAS_RESULTS, _HAS_OPERANDS, _HAS_SUCCESSORS = 0x01, 0x02, 0x04, 0x08
_HAS_REGIONS, _HAS_USELISTS, _HAS_PROPERTIES = 0x10, 0x20, 0x40


def _skip_uselist(r: _Bytes) -> None:
    count, pairs = r.flagged()
    for _ in range(count * (2 if pairs else 1)):
        r.varint()


def _block_header(r: _Bytes, version: int) -> int:
    """Skip a block's header (arguments, use-list orders); return its op count."""
    ops, has_args = r.flagged()
    if has_args:
        for _ in range(r.varint()):
            if version >= 4:
                _, has_loc = r.flagged()
                if has_loc:
                    r.varint()
            else:
                r.varint()
                r.varint()
        if version >= 3 and r.byte():
            for _ in range(r.varint()):
                r.varint()
                _skip_uselist(r)
    return ops


def _skip_op(r: _Bytes) -> tuple[int, bool]:
    """Skip an op's fields; return its region count and whether they are isolated."""
    r.varint()  # name
    mask = r.byte()
    r.varint()  # location
    if mask & _HAS_ATTRS:
        r.varint()
    if mask & _HAS_PROPERTIES:
        r.varint()
    results = 0
    if mask & _HAS_RESULTS:
        results = r.varint()
        for _ in range(results):
            r.varint()
    for flag in (_HAS_OPERANDS, _HAS_SUCCESSORS):
        if mask & flag:
            for _ in range(r.varint()):
                r.varint()
    if mask & _HAS_USELISTS:
        for _ in range(r.varint() if results > 1 else 1):
            if results > 1:
                r.varint()
            _skip_uselist(r)
    if mask & _HAS_REGIONS:
        return r.flagged()
    return 0, False


def bytecode_depth(data: bytes, limit: int) -> int | None:
    """The deepest region nesting of MLIR bytecode (the top-level block is level 1, the
    module's body 2), stopping once past `limit`; None when the bytes do not read as
    bytecode this scan understands (MLIR's reader then says what is wrong). Linear in the
    IR section, iterative, nothing is built."""
    try:
        r = _Bytes(data, len(BYTECODE_MAGIC))
        version = r.varint()
        r.pos = data.index(b"\0", r.pos) + 1  # producer
        ir_section = None
        while r.pos < r.end:
            ident, start, end = r.section()
            if ident == _IR_SECTION:
                ir_section = (start, end)
        if ir_section is None:
            return None
        top = _Bytes(data, *ir_section)
        # per open region: [cursor, regions left, blocks left, ops left]
        stack: list[list[Any]] = [[top, 0, 0, _block_header(top, version)]]
        deepest = 1
        while stack:
            frame = stack[-1]
            cursor = frame[0]
            if frame[3] > 0:
                frame[3] -= 1
                regions, isolated = _skip_op(cursor)
                if regions:
                    inner = cursor
                    if isolated and version >= 2:  # lazily loadable: its own IR section
                        ident, start, end = cursor.section()
                        if ident != _IR_SECTION:
                            raise _Malformed("isolated region outside an IR section")
                        inner = _Bytes(data, start, end)
                    stack.append([inner, regions, 0, 0])
                    deepest = max(deepest, len(stack))
                    if deepest > limit:
                        return deepest
            elif frame[2] > 0:
                frame[2] -= 1
                frame[3] = _block_header(cursor, version)
            elif frame[1] > 0:
                frame[1] -= 1
                blocks = cursor.varint()
                if blocks:
                    cursor.varint()  # value count
                    frame[2] = blocks - 1
                    frame[3] = _block_header(cursor, version)
            else:
                stack.pop()
                if stack and cursor is not stack[-1][0] and cursor.pos != cursor.end:
                    raise _Malformed("nested section not consumed")
        return deepest if top.pos == top.end else None
    except (_Malformed, ValueError, IndexError):
        return None


# -- element types ---------------------------------------------------------------------------

ELEMENT_TYPES: dict[DType, str] = {
    DType.FLOAT32: "f32", DType.FLOAT16: "f16", DType.BFLOAT16: "bf16", DType.FLOAT64: "f64",
    DType.FLOAT8_E4M3FN: "f8E4M3FN", DType.FLOAT8_E5M2: "f8E5M2",
    DType.INT8: "i8", DType.INT16: "i16", DType.INT32: "i32", DType.INT64: "i64",
    DType.UINT8: "ui8", DType.UINT16: "ui16", DType.UINT32: "ui32", DType.UINT64: "ui64",
    DType.BOOL: "i1", DType.COMPLEX64: "complex<f32>", DType.COMPLEX128: "complex<f64>",
    DType.INT4: "i4", DType.UINT4: "ui4", DType.INT2: "i2", DType.UINT2: "ui2",
    DType.FLOAT8_E4M3FNUZ: "f8E4M3FNUZ", DType.FLOAT8_E5M2FNUZ: "f8E5M2FNUZ",
    DType.FLOAT8_E8M0FNU: "f8E8M0FNU", DType.FLOAT4_E2M1FN: "f4E2M1FN",
    DType.FLOAT6_E2M3FN: "f6E2M3FN", DType.FLOAT6_E3M2FN: "f6E3M2FN",
    DType.FLOAT8_E3M4: "f8E3M4", DType.FLOAT8_E4M3: "f8E4M3",
    DType.FLOAT8_E4M3B11FNUZ: "f8E4M3B11FNUZ",
}
_FROM_ELEMENT = {v: k for k, v in ELEMENT_TYPES.items()}
_FROM_ELEMENT |= {"si8": DType.INT8, "si16": DType.INT16, "si32": DType.INT32,
                  "si64": DType.INT64, "si4": DType.INT4, "si2": DType.INT2}


def element_type(dtype: DType) -> str:
    return ELEMENT_TYPES[dtype]


def tensor_type(dtype: DType, shape: tuple[int, ...]) -> str:
    dims = "".join(f"{d}x" for d in shape)
    return f"tensor<{dims}{ELEMENT_TYPES[dtype]}>"


def dtype_of_element(text: str) -> DType | None:
    return _FROM_ELEMENT.get(text)


@dataclass(frozen=True)
class RankedType:
    """An MLIR ranked tensor type read back: element dtype (None if irbridge has none),
    dims (None for a dynamic dim) and the element type's text."""

    dtype: DType | None
    shape: tuple[int | None, ...]
    element: str

    @property
    def is_static(self) -> bool:
        return all(d is not None for d in self.shape)

    def static_shape(self) -> tuple[int, ...]:
        return tuple(d for d in self.shape if d is not None)


def ranked_type(t: ir.Type) -> RankedType | None:
    """A tensor type as (dtype, dims), or None for a non-tensor or unranked type."""
    if not isinstance(t, ir.RankedTensorType):
        return None
    rt = t
    dims = tuple(None if rt.is_dynamic_dim(i) else int(rt.get_dim_size(i))
                 for i in range(rt.rank))
    element = str(rt.element_type)
    return RankedType(dtype_of_element(element), dims, element)


# -- literals and dense attributes ---------------------------------------------------------

_UINT_OF_SIZE = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def splat_literal(value: object, dtype: DType) -> str:
    """The MLIR literal of one element (hex bits for floats: exact, inf and nan included)."""
    if dtype is DType.BOOL:
        return "true" if bool(value) else "false"
    if dtype.is_integer:
        return str(int(value))  # type: ignore[call-overload]
    if dtype in (DType.COMPLEX64, DType.COMPLEX128):  # each part as hex bits
        c = complex(value)  # type: ignore[call-overload]
        part = DType.FLOAT32 if dtype is DType.COMPLEX64 else DType.FLOAT64
        return f"({splat_literal(c.real, part)}, {splat_literal(c.imag, part)})"
    array = np.asarray(value).astype(dtype.numpy)
    bits = int(array.view(_UINT_OF_SIZE[dtype.itemsize]))
    return f"0x{bits:0{2 * dtype.itemsize}X}"


def float_literal(value: float) -> str:
    """A decimal float literal MLIR accepts (always with a '.' or exponent)."""
    text = repr(float(value))
    if text in ("inf", "-inf", "nan"):
        raise ValueError(f"no decimal literal for {text}")
    return text if ("." in text or "e" in text) else text + ".0"


def float_attr(value: float, element: str = "f32") -> str:
    """A FloatAttr in hex form (exact for any value)."""
    dtype = {"f32": DType.FLOAT32, "f64": DType.FLOAT64, "f16": DType.FLOAT16,
             "bf16": DType.BFLOAT16}[element]
    return f"{splat_literal(value, dtype)} : {element}"


def dense_attr(array: np.ndarray, dtype: DType) -> ir.DenseElementsAttr:
    """A DenseElementsAttr of `array` (in the current context); a 0-d array gives a
    0-d tensor (`tensor<f32>`)."""
    shape = np.shape(array)
    array = np.ascontiguousarray(array).reshape(shape)  # ascontiguousarray makes 0-d 1-d
    if dtype in (DType.FLOAT32, DType.FLOAT64, DType.FLOAT16, DType.INT8, DType.INT16,
                 DType.INT32, DType.INT64, DType.BOOL):
        if array.size == 1:  # the binding makes one-element buffers splats: say the shape
            return ir.DenseElementsAttr.get(array.reshape(-1), type=_element(dtype),
                                            shape=list(array.shape))
        return ir.DenseElementsAttr.get(array)
    if dtype in (DType.COMPLEX64, DType.COMPLEX128):  # the binding reads no complex buffer:
        parts = array.reshape(-1).view(np.float32 if dtype is DType.COMPLEX64 else np.float64)
        return ir.DenseElementsAttr.get(parts, type=_element(dtype),
                                        shape=list(array.shape))
    bits = array.view(_UINT_OF_SIZE[dtype.itemsize]) if dtype.itemsize in _UINT_OF_SIZE \
        else array
    return ir.DenseElementsAttr.get(bits.reshape(-1) if array.size == 1 else bits,
                                    type=_element(dtype), shape=list(array.shape))


def _element(dtype: DType) -> ir.Type:
    return ir.Type.parse(ELEMENT_TYPES[dtype])


def attr_to_array(attr: ir.Attribute, rt: RankedType, *, lazy_splat: bool = False
                  ) -> np.ndarray:
    """The data of a dense elements attribute as a numpy array of the irbridge dtype.

    With `lazy_splat`, a splat (`dense<1.0> : tensor<1000000000xf32>`) comes back as a
    read-only broadcast view of its one element: no memory for the declared shape."""
    if rt.dtype is None:
        raise ValueError(f"element type {rt.element} has no irbridge dtype")
    dtype = rt.dtype
    shape = rt.static_shape()
    if dtype in (DType.COMPLEX64, DType.COMPLEX128):
        return _array_from_text(str(attr), dtype, shape, lazy_splat)
    dense = ir.DenseElementsAttr(attr)
    if dense.is_splat:
        one = np.asarray(_scalar(dense.get_splat_value(), dtype), dtype=dtype.numpy)
        if lazy_splat:
            return np.broadcast_to(one, shape)
        return np.full(shape, one, dtype=dtype.numpy)
    if dtype in (DType.FLOAT32, DType.FLOAT64, DType.FLOAT16):
        return np.array(ir.DenseFPElementsAttr(attr)).astype(dtype.numpy).reshape(shape)
    if (dtype.is_integer or dtype is DType.BOOL) and dtype.bits >= 8:
        return np.array(ir.DenseIntElementsAttr(attr)).astype(dtype.numpy).reshape(shape)
    return _array_from_text(str(attr), dtype, shape, lazy_splat)  # bf16, fp8, i4: no buffer


def _array_from_text(text: str, dtype: DType, shape: tuple[int, ...],
                     lazy_splat: bool = False) -> np.ndarray:
    """Read a printed dense attribute: dense<"0xHEX"> (raw little-endian data) or nested
    lists of literals (hex literals are bit patterns)."""
    begin = text.index("dense<") + len("dense<")
    body = text[begin:text.index(">", begin)]
    hexed = re.match(r'\s*"0x([0-9A-Fa-f]*)"', body)
    if hexed:
        raw = bytes.fromhex(hexed[1])
        return np.frombuffer(raw, dtype=dtype.numpy).reshape(shape).copy()
    tokens = re.findall(r"0x[0-9A-Fa-f]+|[-+]?(?:inf|nan|\d+\.?\d*(?:[eE][-+]?\d+)?)", body)
    complex_ = dtype in (DType.COMPLEX64, DType.COMPLEX128)
    part = (np.dtype(np.float32) if dtype is DType.COMPLEX64 else np.dtype(np.float64)) \
        if complex_ else dtype.numpy
    values = []
    for token in tokens:
        if token.startswith("0x"):  # a bit pattern of the (part) element type
            bits = np.array(int(token, 16), dtype=_UINT_OF_SIZE[part.itemsize])
            values.append(float(bits.view(part).astype(np.float64)))
        else:
            values.append(float(token))
    if complex_:
        pairs = np.array(values, dtype=np.float64).reshape(-1, 2)
        array = np.empty(len(pairs), dtype=np.complex128)  # parts set one by one: re + 1j *
        array.real, array.imag = pairs[:, 0], pairs[:, 1]  # im makes (inf, 0) (inf, nan)
    else:
        array = np.array(values, dtype=np.float64)
    if array.size == 1 and int(np.prod(shape)) != 1:  # a splat
        one = array[0].astype(dtype.numpy)
        return np.broadcast_to(one, shape) if lazy_splat else np.full(shape, one)
    return array.astype(dtype.numpy).reshape(shape)


def op_constant_array(op_text: str, rt: RankedType, *, lazy_splat: bool = False
                      ) -> np.ndarray:
    """The value of a constant op read from its printed text (`str(op)`), for element
    types whose attributes the bindings cannot hand to Python (complex: reading
    `op.attributes["value"]` raises TypeError). MLIR prints each element so that it reads
    back exactly (hex bit patterns for inf and nan, raw hex data for large constants)."""
    if rt.dtype is None:
        raise ValueError(f"element type {rt.element} has no irbridge dtype")
    if "dense<" not in op_text:
        raise ValueError("the constant's value is not a dense literal")
    return _array_from_text(op_text, rt.dtype, rt.static_shape(), lazy_splat)


def _scalar(attr: ir.Attribute, dtype: DType) -> object:
    if isinstance(attr, ir.IntegerAttr):
        value = attr.value
        if dtype is DType.BOOL:
            return bool(value)
        if dtype.name.startswith("UINT") and value < 0:
            return value + (1 << dtype.bits)
        return value
    if isinstance(attr, ir.FloatAttr):
        return attr.value
    if isinstance(attr, ir.BoolAttr):
        return attr.value
    text = str(attr)  # complex: (re, im) : complex<f32>
    match = re.match(r"\(([^,]+),\s*([^)]+)\)", text)
    if match:
        return complex(float(match[1]), float(match[2]))
    raise ValueError(f"cannot read element {text}")


# -- locations -------------------------------------------------------------------------------

def escape(text: str) -> str:
    """An MLIR string literal body: quotes, backslashes and control characters escaped."""
    out: list[str] = []
    for ch in text:
        if ch in ('"', "\\") or ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.extend(f"\\{b:02X}" for b in ch.encode("utf-8"))
        else:
            out.append(ch)
    return "".join(out)


def _unescape(text: str) -> str:
    data = bytearray()
    i = 0
    raw = text.encode("utf-8")
    while i < len(raw):
        if raw[i:i + 1] == b"\\" and i + 1 < len(raw):
            nxt = raw[i + 1:i + 3]
            if re.fullmatch(rb"[0-9A-Fa-f]{2}", nxt):
                data.append(int(nxt, 16))
                i += 3
                continue
            data.append({ord("n"): 10, ord("t"): 9}.get(raw[i + 1], raw[i + 1]))
            i += 2
            continue
        data.append(raw[i])
        i += 1
    return data.decode("utf-8", "replace")


@dataclass
class LocInfo:
    """What a location says: the NameLoc names from the outside in, and the first
    file:line found (file "" when none)."""

    names: list[str]
    file: str = ""
    line: int = 0
    col: int = 0


def parse_location(text: str) -> LocInfo:
    """Read `str(location)`: nested NameLocs, FileLineColLocs, callsite and fused locs.

    Names are collected depth-first through name children (callee first for call sites,
    every member of a fused location); the file position is the first one met."""
    info = LocInfo([])
    body = text.strip()
    if body.startswith("loc(") and body.endswith(")"):
        body = body[4:-1]
    _LocParser(body, info).parse()
    return info


class _LocParser:
    _STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')
    _POS = re.compile(r":(\d+):(\d+)(?:\s+to\s+(?:\d+)?:?\d+)?")

    def __init__(self, text: str, info: LocInfo) -> None:
        self.text, self.pos, self.info = text, 0, info

    def parse(self) -> None:
        with contextlib.suppress(IndexError, ValueError):  # an unreadable location only
            self._loc()                                     # loses provenance

    def _skip(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in " \t\n":
            self.pos += 1

    def _loc(self) -> None:
        self._skip()
        text = self.text
        if text.startswith("callsite(", self.pos):
            self.pos += len("callsite(")
            self._loc()
            self._skip()
            if text.startswith("at", self.pos):
                self.pos += 2
                names = len(self.info.names)
                self._loc()
                del self.info.names[names:]  # the caller's names are not this op's path
            self._expect(")")
        elif text.startswith("fused", self.pos):
            self.pos += len("fused")
            if text.startswith("<", self.pos):  # fused<metadata>[...]
                depth = 0
                while True:
                    ch = text[self.pos]
                    depth += ch == "<"
                    depth -= ch == ">"
                    self.pos += 1
                    if depth == 0:
                        break
            self._expect("[")
            while True:
                self._loc()
                self._skip()
                if text.startswith(",", self.pos):
                    self.pos += 1
                    continue
                break
            self._expect("]")
        elif text.startswith("unknown", self.pos):
            self.pos += len("unknown")
        elif text.startswith('"', self.pos):
            match = self._STRING.match(text, self.pos)
            if match is None:
                raise ValueError("bad string")
            self.pos = match.end()
            value = _unescape(match[1])
            pos = self._POS.match(text, self.pos)
            if pos is not None:  # file:line:col
                self.pos = pos.end()
                if not self.info.file:
                    self.info.file, self.info.line, self.info.col = value, int(pos[1]), \
                        int(pos[2])
                return
            self.info.names.append(value)
            self._skip()
            if text.startswith("(", self.pos):
                self.pos += 1
                self._loc()
                self._expect(")")
        elif text.startswith("#", self.pos):  # an alias we cannot resolve here
            while self.pos < len(text) and text[self.pos] not in "),]":
                self.pos += 1
        else:
            raise ValueError("unexpected location syntax")

    def _expect(self, ch: str) -> None:
        self._skip()
        if not self.text.startswith(ch, self.pos):
            raise ValueError(f"expected {ch!r}")
        self.pos += 1


# -- error lines -----------------------------------------------------------------------------

def one_line(text: str, limit: int = 300) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[:limit - 3] + "..."


def diagnostics_line(exc: BaseException, collected: list[str] | None = None) -> str:
    """The first diagnostic of an MLIRError as 'LOCATION: message', else the first
    diagnostic `collected` by the context's handler (with the exception's text), else the
    exception's text."""
    if collected:
        text = one_line(str(exc))
        return f"{collected[0]} ({text})" if text and text not in collected[0] else collected[0]
    diags = getattr(exc, "error_diagnostics", None)
    if diags:
        first = diags[0]
        loc = parse_location(str(first.location))
        where = f"line {loc.line}:{loc.col}" if loc.line else ""
        message = one_line(first.message)
        return f"{where}: {message}" if where else message
    text = str(exc)
    match = re.search(r'error: "-":(\d+):(\d+): ([^\n]*)', text)
    if match:
        return f"line {match[1]}:{match[2]}: {one_line(match[3])}"
    return one_line(text)


__all__ = [
    "BYTECODE_MAGIC",
    "ELEMENT_TYPES",
    "MAX_BRACKET_DEPTH",
    "MAX_BYTECODE_DEPTH",
    "LocInfo",
    "RankedType",
    "artifact_version",
    "attr_to_array",
    "bytecode_depth",
    "complex_literal_mismatch",
    "current_version",
    "dense_attr",
    "diagnostics_line",
    "dtype_of_element",
    "element_type",
    "escape",
    "float_attr",
    "minimum_version",
    "new_context",
    "one_line",
    "op_constant_array",
    "parse_location",
    "ranked_type",
    "splat_literal",
    "tensor_type",
    "text_too_deep",
    "version_tuple",
]


def string_value(attr: Any) -> str:
    """The text of a StringAttr or FlatSymbolRefAttr. Bytecode can hold bytes that are not
    UTF-8, which the bindings' `.value` refuses with a RuntimeError (found by mutating a
    `.jaxexport`): those decode with replacement characters instead."""
    try:
        return str(attr.value)
    except (RuntimeError, UnicodeDecodeError):
        try:
            return bytes(ir.StringAttr(attr).value_bytes).decode("utf-8", "replace")
        except (RuntimeError, ValueError, TypeError):
            return "\ufffd"
