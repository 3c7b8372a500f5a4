"""Small ATen ops that captured as opaque nodes (issue 13) and now lower to neutral ops:
addmv, addbmm (matmul + add), elu with scales (selu, and input_scale), angle of real
tensors, narrow_copy, index_select of a 0-d tensor, Tensor.unfold, put, masked_scatter.
Each matches eager torch in the IR executor, in onnxruntime and in the StableHLO reference
interpreter, on the example input and on a perturbed one.

Tolerance: the matmul sums (up to five float32 products, added in another order than
torch's BLAS) and exp: rtol 1e-5, atol 1e-5; the copies are exact within that.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torchtools import assert_matches_eager_everywhere, capture_neutral

TOL = {"rtol": 1e-5, "atol": 1e-5}


class Small(torch.nn.Module):
    def forward(self, v: torch.Tensor, m: torch.Tensor, w: torch.Tensor, s: torch.Tensor,
                b1: torch.Tensor, b2: torch.Tensor, x: torch.Tensor, z: torch.Tensor,
                src: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        rows = torch.tensor([4, 0, 7, 2])
        return (torch.addmv(v, m, w, beta=0.5, alpha=2.0), torch.addbmm(s, b1, b2),
                F.selu(x), torch.ops.aten.elu(x, 1.5, 2.0, 0.5), torch.angle(x),
                torch.narrow_copy(x, 1, 1, 2), torch.index_select(z, 0, rows[1:2]),
                torch.index_select(x, 2, rows[1:] % 5), x.unfold(1, 2, 1), x.unfold(2, 3, 2),
                torch.put(x, rows, src), torch.put(x, rows.remainder(3), src, accumulate=True),
                x.masked_scatter(mask, x.flip(2) * 2))


def _inputs(perturb: bool) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(3 + perturb)

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen)

    x = r(2, 3, 5)
    x[0, 0, :3] = torch.tensor([0.0, -0.0, float("nan")])  # angle: 0 for both zeros, NaN
    mask = torch.rand(3, 5, generator=gen) > 0.5  # broadcast over dim 0
    return (r(5), r(5, 4), r(4), r(3, 6), r(4, 3, 5), r(4, 5, 6), x, r(()), r(4), mask)


def test_every_backend_matches_eager() -> None:
    assert_matches_eager_everywhere(Small(), _inputs, **TOL)


def test_frexp_matches_eager_in_every_backend() -> None:
    """Mantissa and exponent exactly as torch (zeros, subnormals, inf, NaN included) in the
    executor, and exported (the registry decomposition's exact power-of-two scaling, no bit
    cast) in onnxruntime and the StableHLO interpreter."""
    from torchtools import FnModule, assert_backends_match_eager

    x = torch.tensor([0.0, -0.0, 1.0, 0.5, -3.0, float("inf"), -float("inf"), float("nan"),
                      1e-40, 7.25, -1e30])
    module = FnModule(torch.frexp)
    result = capture_neutral(module, (x,))
    for args in ((x,), (x * 0.9,)):
        assert_backends_match_eager(module, result, args)


class Bags(torch.nn.Module):
    """bilinear, combinations, nonzero_static (cut short and padded) and embedding_bag
    (sum with per-sample weights, mean with a padding index and an empty bag;
    include_last_offset, where torch's max runs the last bag to the end of the indices and
    sum stops at the last offset)."""

    def forward(self, x1: torch.Tensor, x2: torch.Tensor, w: torch.Tensor, b: torch.Tensor,
                table: torch.Tensor, weights: torch.Tensor,
                v: torch.Tensor) -> tuple[torch.Tensor, ...]:
        index = torch.tensor([1, 2, 4, 5, 4, 3, 0, 9])
        offsets = torch.tensor([0, 2, 2, 5])
        return (F.bilinear(x1, x2, w, b), F.bilinear(x1, x2, w),
                torch.combinations(v), torch.combinations(v, 3),
                torch.combinations(v, 2, with_replacement=True),
                F.embedding_bag(index, table, offsets, mode="sum", per_sample_weights=weights),
                F.embedding_bag(index, table, offsets, mode="mean", padding_idx=4),
                F.embedding_bag(index, table, offsets, mode="max", include_last_offset=True),
                F.embedding_bag(index, table, offsets, mode="sum", include_last_offset=True),
                torch.nonzero_static(table > 0.5, size=4),
                torch.nonzero_static(table > 0.5, size=40, fill_value=-7))


def _bag_inputs(perturb: bool) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(23 + perturb)
    return tuple(torch.randn(*shape, generator=gen)
                 for shape in ((2, 3), (2, 4), (5, 3, 4), (5,), (10, 3), (8,), (4,)))


def test_bags_match_eager_in_every_backend() -> None:
    assert_matches_eager_everywhere(Bags(), _bag_inputs, **TOL)


class Sampling(torch.nn.Module):
    """grid_sample: bilinear and nearest, zeros and border padding, both corner modes; the
    grid reaches past [-1, 1] so that some points fall outside the input."""

    def forward(self, image: torch.Tensor, grid: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(F.grid_sample(image, grid, mode=mode, padding_mode=padding,
                                   align_corners=align)
                     for mode in ("bilinear", "nearest") for padding in ("zeros", "border")
                     for align in (False, True))


def test_grid_sample_matches_eager_everywhere() -> None:
    def inputs(perturb: bool) -> tuple[torch.Tensor, ...]:
        gen = torch.Generator().manual_seed(41 + perturb)
        return (torch.randn(2, 3, 5, 6, generator=gen),
                torch.rand(2, 4, 7, 2, generator=gen) * 2.4 - 1.2)

    assert_matches_eager_everywhere(Sampling(), inputs, **TOL)


class BatchNormWithUpdate(torch.nn.Module):
    """aten._batch_norm_with_update (export shows its functional form): the output, batch
    mean and rstd, and the updated running statistics."""

    def forward(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, mean: torch.Tensor,
                var: torch.Tensor) -> tuple[torch.Tensor, ...]:
        mean, var = mean.clone(), var.clone()
        out, saved_mean, saved_rstd, _ = torch.ops.aten._batch_norm_with_update(
            x, w, b, mean, var, 0.2, 1e-5)
        return out, saved_mean, saved_rstd, mean, var


def test_batch_norm_with_update_matches_eager_everywhere() -> None:
    def inputs(perturb: bool) -> tuple[torch.Tensor, ...]:
        gen = torch.Generator().manual_seed(43 + perturb)
        return (torch.randn(4, 3, 5, generator=gen), torch.randn(3, generator=gen),
                torch.randn(3, generator=gen), torch.randn(3, generator=gen),
                torch.rand(3, generator=gen) + 0.5)

    assert_matches_eager_everywhere(BatchNormWithUpdate(), inputs, **TOL)


class Antialiased(torch.nn.Module):
    """Antialiased bilinear resizes: down by non-integer factors, up, both corner modes."""

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (F.interpolate(image, size=(3, 5), mode="bilinear", antialias=True),
                F.interpolate(image, size=(4, 2), mode="bilinear", antialias=True,
                              align_corners=True),
                F.interpolate(image, size=(11, 17), mode="bilinear", antialias=True))


def test_antialiased_resize_matches_eager_everywhere() -> None:
    def inputs(perturb: bool) -> tuple[torch.Tensor, ...]:
        return (torch.randn(2, 3, 7, 12, generator=torch.Generator().manual_seed(47 + perturb)),)

    assert_matches_eager_everywhere(Antialiased(), inputs, **TOL)


class Strided(torch.nn.Module):
    """as_strided views of a contiguous input (overlapping windows, a storage offset),
    as_strided_copy and as_strided_scatter."""

    def forward(self, x: torch.Tensor, src: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (torch.as_strided(x, (3, 4), (2, 1)), torch.as_strided(x, (2, 2, 2), (5, 1, 3), 2),
                torch.as_strided_copy(x, (4,), (3,), 1),
                torch.as_strided_scatter(x, src, (2, 3), (4, 1), 1))


def test_as_strided_matches_eager_everywhere() -> None:
    def inputs(perturb: bool) -> tuple[torch.Tensor, ...]:
        gen = torch.Generator().manual_seed(53 + perturb)
        return torch.randn(3, 4, generator=gen), torch.randn(2, 3, generator=gen)

    assert_matches_eager_everywhere(Strided(), inputs, **TOL)


class WidePools(torch.nn.Module):
    """Ceil-mode pools whose window is wider than the (padded) input, as HF EfficientNet's
    pooler (AvgPool2d(1280, ceil_mode=True) over 7 x 7): one window, averaged over the
    elements it covers."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (F.avg_pool2d(x, 9, ceil_mode=True),
                F.avg_pool2d(x, (12, 3), stride=(12, 2), padding=(0, 1), ceil_mode=True,
                             count_include_pad=False),
                F.max_pool2d(x, 9, ceil_mode=True),
                F.avg_pool1d(x[:, :, 0], 20, ceil_mode=True))


def test_pools_wider_than_their_input_match_eager_everywhere() -> None:
    def inputs(perturb: bool) -> tuple[torch.Tensor, ...]:
        return (torch.randn(1, 2, 7, 7, generator=torch.Generator().manual_seed(3 + perturb)),)

    assert_matches_eager_everywhere(WidePools(), inputs, **TOL)


def test_a_wide_pool_costs_the_taps_it_reads() -> None:
    """A kernel of 1280 x 1280 over 7 x 7 reads 49 elements per window, not 1.6 M."""
    from irbridge.analysis.cost import cost_model

    result = capture_neutral(torch.nn.AvgPool2d(1280, ceil_mode=True), (torch.randn(1, 8, 7, 7),))
    assert cost_model(result.model).total.other_flops == 8 * 49


class StridedViews(torch.nn.Module):
    """as_strided of views whose storage is not their row-major data: a transposed view,
    Longformer's chunking (heads moved ahead of the sequence by a view, then overlapping
    chunks read by halving a stride), and as_strided_scatter into a transposed view."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a = torch.as_strided(x.t(), (3, 4), (1, 3))
        q = y.transpose(1, 2).reshape(2 * 3, 8, 4).view(6, 2, 4, 4)  # views, seq-major
        size, stride = list(q.size()), list(q.stride())
        size[1], stride[1] = size[1] * 2 - 1, stride[1] // 2
        b = q.as_strided(size=size, stride=stride)
        c = torch.as_strided_scatter(x.t(), torch.ones(2, 2), (2, 2), (1, 6), 1)
        return a * 2, b * 2, c * 2


def _strided_inputs(perturb: bool) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(61 + perturb)
    return torch.randn(4, 6, generator=gen), torch.randn(2, 8, 3, 4, generator=gen)


@pytest.mark.parametrize("frontend", ["export", "dynamo"])
def test_as_strided_of_views_matches_eager(frontend: str) -> None:
    """Every front-end (Dynamo's re-trace of as_strided once ran it on a contiguous stand-in
    of the view and read the wrong elements: Longformer's outputs off by 0.14)."""
    from irbridge.converters.pytorch import capture, verify

    module = StridedViews()
    result = capture(module, _strided_inputs(False), frontend=frontend)
    assert result.opaque_count == 0, result.stats.notes
    report = verify(result, module)
    assert report.passed, report.summary()


def test_as_strided_of_views_matches_eager_everywhere() -> None:
    assert_matches_eager_everywhere(StridedViews(), _strided_inputs, **TOL)


class _OutsideTheSlice(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.as_strided(x[1:], (2, 3), (1, 2), 1) * 2


@pytest.mark.parametrize("frontend", ["fx", "export", "dynamo"])
def test_as_strided_outside_a_view_is_never_silently_wrong(frontend: str) -> None:
    """A view that is not its whole storage (a slice: an offset, elements around it) has
    no IR for what as_strided reads outside it: opaque, never a reading of the view's own
    elements."""
    from irbridge.converters.pytorch import capture

    x = torch.randn(3, 4)
    result = capture(_OutsideTheSlice(), (x,), frontend=frontend)
    assert result.opaque_count > 0, "read as if the slice were its storage"


class Quantiles(torch.nn.Module):
    """quantile / nanquantile, whose ATen form reshapes through the in-place as_strided_."""

    def forward(self, x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
        q = torch.tensor([0.1, 0.5, 0.9])
        return (torch.quantile(x, 0.3), torch.quantile(x, q, dim=1, keepdim=True),
                torch.quantile(x, 0.75, dim=0, interpolation="nearest"),
                torch.nanquantile(w, q, dim=1), torch.nanquantile(w, 0.4))


def _quantile_inputs(perturb: bool, nan: bool = False) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(59 + perturb)
    w = torch.randn(3, 6, generator=gen)
    if nan:
        w[0, 2] = w[2, 5] = float("nan")
    return torch.randn(4, 5, generator=gen), w


def test_quantiles_match_eager_everywhere() -> None:
    assert_matches_eager_everywhere(Quantiles(), _quantile_inputs, **TOL)


def test_nanquantile_skips_nan_in_the_executor() -> None:
    """With NaN in the data only the executor is compared: the ONNX export of `sort` (TopK)
    leaves the place of NaN unspecified, which nanquantile's ATen form relies on."""
    import numpy as np

    from irbridge.executor import run_graphs

    module = Quantiles()
    result = capture_neutral(module, _quantile_inputs(False, nan=True))
    for perturb in (False, True):
        args = _quantile_inputs(perturb, nan=True)
        feeds = {v.name: t.numpy() for v, t in zip(result.model.graphs[0].inputs, args,
                                                    strict=True)}
        got = run_graphs(result.model, feeds)[-1]
        for output, expected in zip(result.outputs, module(*args), strict=True):
            assert output is not None
            np.testing.assert_allclose(np.asarray(got[output[1]]), expected.numpy(), **TOL)
