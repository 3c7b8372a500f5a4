"""dist, cdist (direct and ATen's matmul form), pdist, bucketize, searchsorted, histc,
histogram (edges from the data or a range, weights, density),
avg_pool with divisor_override and a view to an empty shape (nn.functional.unfold of an
empty batch) lower to neutral ops (issue 13) and match eager torch in the IR executor, in
onnxruntime and in the StableHLO reference interpreter, on the example input and on a
perturbed one.

Tolerance: rtol 1e-4, atol 1e-4. The distances sum up to eight float32 terms in another
order than torch; cdist's matmul form (|a|^2 + |b|^2 - 2 a.b, as torch computes it for
p = 2 with compute_mode use_mm_for_euclid_dist or more than 25 rows) cancels terms of
size ~10, leaving absolute errors of a few 1e-6 that the square root can raise to ~1e-4
near zero distance. Bucket indices and histogram counts are integers: compared exactly
(the float32 bin arithmetic is the same expression as torch's).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torchtools import assert_matches_eager_everywhere

TOL = {"rtol": 1e-4, "atol": 1e-4}


class Metrics(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor,
                big: torch.Tensor, rows: torch.Tensor, v: torch.Tensor, edges: torch.Tensor,
                seq: torch.Tensor, h: torch.Tensor, img: torch.Tensor,
                empty: torch.Tensor) -> tuple[torch.Tensor, ...]:
        scramble = torch.tensor([[2, 0, 4, 1, 3], [1, 4, 0, 3, 2]])  # sorter: its inverse
        return (torch.dist(a, b), torch.dist(a, b, 3.0), torch.dist(a, b, float("inf")),
                torch.dist(a, b, 0.0),
                torch.cdist(x1, x2), torch.cdist(x1, x2, p=1.0),
                torch.cdist(x1, x2, compute_mode="use_mm_for_euclid_dist"),
                torch.cdist(big, x2[0]), F.pdist(rows), F.pdist(rows, p=1.0),
                torch.bucketize(v, edges), torch.bucketize(v, edges, right=True, out_int32=True),
                torch.searchsorted(seq, v[:, :3].contiguous()),
                torch.searchsorted(seq, v[:, :3].contiguous(), side="right"),
                torch.searchsorted(seq.gather(-1, scramble), v[:, :3].contiguous(),
                                  sorter=torch.argsort(scramble)),
                torch.histc(h, bins=7, min=-2.0, max=2.0), torch.histc(h, bins=5),
                *torch.histogram(h, 6),
                *torch.histogram(h, 5, range=(-1.0, 2.0), weight=h.abs(), density=True),
                F.avg_pool2d(img, 3, 1, 1, ceil_mode=True, count_include_pad=False,
                             divisor_override=2),
                F.avg_pool2d(img, 2, 2, 0, ceil_mode=True, divisor_override=3),
                F.unfold(empty, 2))


def _inputs(perturb: bool) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(17 + perturb)

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen)

    a = r(3, 4)
    a[0, 0] = 0.0  # p = 0 counts nonzero differences
    edges = torch.tensor([-1.0, -0.25, 0.0, 0.5, 1.5])
    v = r(2, 6)
    v[0, :2] = torch.tensor([0.5, float("nan")])  # on an edge (right decides), NaN
    seq = torch.sort(r(2, 5), dim=-1).values
    return (a, r(4), r(2, 5, 3), r(2, 4, 3), r(30, 3), r(4, 6), v, edges, seq,
            r(40) * 1.5, r(1, 2, 7, 6), torch.zeros(0, 1, 5, 5))


def test_every_backend_matches_eager() -> None:
    assert_matches_eager_everywhere(Metrics(), _inputs, **TOL)
