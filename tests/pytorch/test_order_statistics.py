"""median, nanmedian (whole tensor and along a dim), kthvalue and mode (issue 13) lower to
neutral sort / gather_elements / comparisons (no opaque node) and match eager torch in the
IR executor, in onnxruntime and in the StableHLO reference interpreter, on the example
input and on a perturbed one.

What is pinned down: torch's lower median ((n - 1) // 2 of the sorted row); median of a
row with NaN is NaN at the first NaN's index; nanmedian skips NaN (lower median of the
rest; of an all-NaN row, NaN at an index torch leaves unspecified); kthvalue counts NaN as the largest; mode is the smallest of the most frequent values
at the last index holding it. Rows of distinct values make every index unique (torch's
selection leaves an unspecified index among equal values, see handlers/reduction.py); mode
runs on a row with repeated values, where torch's index rule is the one above.

Values and indices are picked, not computed: compared exactly.
"""

from __future__ import annotations

import math

import torch
from torchtools import assert_matches_eager_everywhere

NAN = float("nan")


class Orders(torch.nn.Module):
    def forward(self, x: torch.Tensor, w: torch.Tensor,
                r: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (torch.median(x), torch.nanmedian(w), torch.median(w),
                *torch.median(w, 1), *torch.nanmedian(w, 1, keepdim=True),
                *torch.kthvalue(x, 3, 0), *torch.kthvalue(w, 1, 1, keepdim=True),
                *torch.mode(r, 1), *torch.mode(r, 0, keepdim=True))


def _inputs(perturb: bool) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(5 + perturb)
    x = torch.randn(5, 6, generator=gen)
    w = torch.randn(4, 7, generator=gen)
    w[1, 2] = w[1, 5] = NAN  # median -> NaN (index 2); nanmedian of the other five
    w[2, :6] = NAN  # one value left
    w[3, 1], w[3, 3] = math.inf, NAN  # NaN sorts after +inf
    r = torch.randint(0, 4, (6, 9), generator=gen).float()  # repeated values
    return x, w, r


def test_every_backend_matches_eager() -> None:
    assert_matches_eager_everywhere(Orders(), _inputs)
