"""Integer and boolean tensor code: bitwise ops, shifts and integer reductions.

Quantised models unpack packed weights with shifts and masks (`(w >> 4) & 0xF`), masks
are combined with `&` / `|`, hashes use `^`. Every front-end captured those ops on
integers as opaque nodes (only their boolean forms were lowered), and a product of
booleans or a logsumexp of integers was typed as its input (torch: int64, float32), and
`any` / `all` of uint8 as bool (torch: uint8).
Each case here captures through fx, export and Dynamo with no opaque node and no type
mismatch, and the IR executor, onnxruntime (the ONNX export) and the StableHLO reference
interpreter (the StableHLO export) give eager torch's values exactly (integer results:
no tolerance), on inputs that include each type's extremes and shift amounts that are
negative or past the bit width (torch gives 0 for a left shift and the sign for a right
shift; uint8 shifts right logically).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torchtools import assert_outputs_match, backend_outputs

from irbridge.converters.pytorch import capture
from irbridge.executor import run_graphs

INTEGERS = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]


class Bits(torch.nn.Module):
    """Every bitwise spelling: operators, in-place operators, torch functions, methods."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        z = x.clone()
        z &= y
        w = x.clone()
        w ^= 5
        return (x & y, x | y, x ^ y, ~x, x & 0x3C, z, w,
                torch.bitwise_or(x, y), x.bitwise_xor(y), torch.bitwise_not(y))


class Shifts(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        z = x.clone()
        z >>= 1
        return (x << y, x >> y, x << 3, x >> 2, torch.bitwise_left_shift(x, y),
                torch.bitwise_right_shift(x, 1), z,
                torch.stack([(x >> 4) & 0xF, x & 0xF], -1))  # nibble unpacking


class Reductions(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        small = x & 3  # products that stay in range
        return ((x > 0).prod(), (x > 0).sum(), small.prod(0), small.prod(),
                torch.logsumexp(small, 1), small.sum(1), x.max(), x.amin(0),
                small.any(), small.all(1))  # uint8: uint8 0 / 1, else bool


def _inputs(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    info = torch.iinfo(dtype)
    signed = info.min < 0
    x = torch.tensor([[info.min, -5 if signed else 5, 7, info.max],
                      [0, 100, info.max - 1, 1]], dtype=dtype)
    amounts = [1, 3, 0, info.bits + 1, -1 if signed else 200, 8, info.bits - 1, 2]
    y = torch.tensor(amounts, dtype=dtype).reshape(2, 4)
    return x, y


def _check(module: torch.nn.Module, args: tuple[torch.Tensor, ...], frontend: str,
           backends: bool) -> None:
    result = capture(module, args, frontend=frontend)
    assert result.opaque_count == 0, result.model.metadata.get("lowering.opaque")
    assert not result.stats.type_mismatches, result.stats.type_mismatches
    with torch.no_grad():
        want = module(*args)
    if not backends:
        feeds = {n: t.numpy() for n, t in result.inputs.items()}
        # floats (the logsumexp): 1e-6 of the value, a few float32 ulps of summation order
        assert_outputs_match("executor", run_graphs(result.model, feeds)[-1], want, result,
                             rtol=1e-6)
        return
    for backend, got in backend_outputs(result, args).items():
        assert_outputs_match(backend, got, want, result)


@pytest.mark.parametrize("dtype", INTEGERS, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("build", [Bits, Shifts], ids=["bits", "shifts"])
def test_bitwise_ops_on_integers_in_every_front_end(build: Callable[[], torch.nn.Module],
                                                     dtype: torch.dtype) -> None:
    args = _inputs(dtype)
    for frontend in ("fx", "export", "dynamo"):
        # the exports once per case (export's graph): the other front-ends give the same ops
        _check(build(), args, frontend, backends=frontend == "export")


class BoolBits(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        z = x.clone()
        z |= y
        return x & y, x | y, x ^ y, ~x, z, torch.bitwise_and(x, y)


def test_bitwise_ops_on_booleans_stay_logical() -> None:
    x = torch.tensor([True, False, True, False])
    y = torch.tensor([True, True, False, False])
    for frontend in ("fx", "export", "dynamo"):
        _check(BoolBits(), (x, y), frontend, backends=frontend == "export")
        ir = capture(BoolBits(), (x, y), frontend=frontend).model
        ops = {n.op for _, n in ir.all_nodes()}
        assert not ops & {"bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not"}, ops
        assert {"logical_and", "logical_or", "logical_xor", "logical_not"} <= ops


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8],
                         ids=lambda d: str(d).removeprefix("torch."))
def test_integer_reductions_take_torch_result_types(dtype: torch.dtype) -> None:
    x = _inputs(dtype)[0]
    for frontend in ("fx", "export", "dynamo"):
        _check(Reductions(), (x,), frontend, backends=False)


class Resize(torch.nn.Module):
    def __init__(self, mode: str, size: tuple[int, int]) -> None:
        super().__init__()
        self.mode, self.size = mode, size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.interpolate(x, size=self.size, mode=self.mode,
                                               antialias=True)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_antialiased_resize_of_uint8_images(mode: str) -> None:
    """torchvision resizes uint8 image tensors with `antialias=True`. The lowering weighed
    the pixels in uint8 (the float weights cast to uint8): 206 off on a 9x11 image. Each
    pass now weighs in float32 and rounds into 0..255; ATen's uint8 kernel uses int16
    fixed-point weights, so a pixel may round the other way: at most 1 apart, on few
    pixels (measured 0.4% and 3% of them at the two shrinking sizes below)."""
    torch.manual_seed(0)
    x = torch.randint(0, 256, (2, 3, 64, 48), dtype=torch.uint8)
    for size in ((17, 13), (32, 24), (100, 70)):
        module = Resize(mode, size)
        result = capture(module, (x,), frontend="export")
        assert result.opaque_count == 0
        got = run_graphs(result.model, {n: t.numpy() for n, t in result.inputs.items()})
        out = got[-1][0]
        want = module(x).numpy()
        assert out.dtype == want.dtype and out.shape == want.shape
        off = abs(out.astype(int) - want.astype(int))
        assert off.max() <= 1 and (off > 0).mean() <= 0.05, (size, off.max(), off.mean())


class FloatOfInts(torch.nn.Module):
    """Float functions of integer tensors: torch promotes the input to float32 first."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (torch.expm1(x), torch.exp(x), torch.log1p(x), torch.sqrt(x),
                torch.sigmoid(x), torch.special.expm1(x), torch.log2(x + 1))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8],
                         ids=lambda d: str(d).removeprefix("torch."))
def test_float_functions_of_integers(dtype: torch.dtype) -> None:
    """expm1 ran exp in the integer type before promoting (exp(1) -> 2; 4.9e8 off at
    uint8 20 by wrapping). Within 1e-6 of the value: the IR computes in float64 and
    rounds once, torch in float32 (one float32 ulp is 6e-8 of the value)."""
    x = torch.tensor([0, 1, 5, 9, 20], dtype=dtype)
    for frontend in ("fx", "export", "dynamo"):
        _check(FloatOfInts(), (x,), frontend, backends=False)
