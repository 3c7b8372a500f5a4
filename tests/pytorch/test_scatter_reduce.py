"""scatter_reduce.two and index_reduce (issue 13): every reduction with and without
`include_self` lowers to neutral scatter_elements (no opaque node) and matches eager torch
in the IR executor, in onnxruntime (ONNX ScatterElements with reduction add/mul/max/min)
and in the StableHLO reference interpreter, on the example input and on a perturbed one.
The indices repeat (several updates land on one element) and leave elements untouched.

Tolerance: a sum or product of up to four float32 values accumulated in another order
than torch's: rtol 1e-5, atol 1e-6. Integer means (floor division) are compared exactly.
"""

from __future__ import annotations

import torch
from torchtools import FnModule, assert_matches_eager_everywhere

SCATTER = [(r, s) for r in ("sum", "prod", "mean", "amax", "amin") for s in (True, False)]
INDEX = [(r, s) for r in ("prod", "mean", "amax", "amin") for s in (True, False)]
TOL = {"rtol": 1e-5, "atol": 1e-6}


class Reductions(torch.nn.Module):
    def forward(self, x: torch.Tensor, src: torch.Tensor, y: torch.Tensor,
                source: torch.Tensor, xi: torch.Tensor,
                srci: torch.Tensor) -> tuple[torch.Tensor, ...]:
        index = torch.tensor([[0, 2, 2, 4], [1, 1, 1, 0], [4, 4, 0, 2]])
        rows = torch.tensor([3, 0, 3, 1, 3])
        outs = [x.scatter_reduce(0, index, src, r, include_self=s) for r, s in SCATTER]
        outs += [y.index_reduce(1, rows, source, r, include_self=s) for r, s in INDEX]
        outs.append(xi.scatter_reduce(1, index, srci, "mean", include_self=False))
        outs.append(xi.scatter_reduce(1, index, srci, "mean", include_self=True))
        return tuple(outs)


def _inputs(perturb: bool) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(11 + perturb)
    return (torch.randn(5, 4, generator=gen), torch.randn(3, 4, generator=gen),
            torch.randn(3, 4, generator=gen), torch.randn(3, 5, generator=gen),
            torch.randint(-20, 20, (3, 5), generator=gen),
            torch.randint(-20, 20, (3, 4), generator=gen))


def test_every_backend_matches_eager() -> None:
    assert_matches_eager_everywhere(Reductions(), _inputs, **TOL)


def test_index_reduce_of_0d_tensors() -> None:
    """OpInfo's index_reduce sample: 0-d self and source, a one-element index."""
    def fn(x: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, ...]:
        index = torch.tensor([0])
        return tuple(x.index_reduce(0, index, s, r, include_self=True)
                     for r in ("prod", "mean", "amax", "amin"))

    def inputs(perturb: bool) -> tuple[torch.Tensor, ...]:
        return torch.tensor(-4.25 * (0.9 if perturb else 1.0)), torch.tensor(-1.75)

    assert_matches_eager_everywhere(FnModule(fn), inputs, **TOL)


class Segments(torch.nn.Module):
    """segment_reduce by lengths (with empty segments) and by offsets, every reduction with
    and without `initial`."""

    def forward(self, data: torch.Tensor) -> tuple[torch.Tensor, ...]:
        lengths = torch.tensor([0, 2, 1, 0, 3])
        offsets = torch.tensor([0, 1, 1, 4, 6])
        outs = []
        for reduce in ("sum", "prod", "mean", "max", "min"):
            outs += [torch.segment_reduce(data, reduce, lengths=lengths),
                     torch.segment_reduce(data, reduce, lengths=lengths, initial=0.5),
                     torch.segment_reduce(data, reduce, offsets=offsets)]
        return tuple(outs)


def test_segment_reduce_matches_eager_everywhere() -> None:
    def inputs(perturb: bool) -> tuple[torch.Tensor, ...]:
        return (torch.randn(6, 3, generator=torch.Generator().manual_seed(31 + perturb)),)

    assert_matches_eager_everywhere(Segments(), inputs, **TOL)
