"""Regression (issue 13 item 3): dim-taking reductions, softmax, scans and sorts of a 0-d
tensor. torch treats a 0-d tensor as a 1-element vector along dim 0 / -1 and returns 0-d
results even with keepdim=True; irbridge gave `logsumexp` shape [1], and with
decompose=True the executor failed (reduce_max over axis 0 of a scalar). Every op of the
family is captured at once, with and without decompose, and run against eager torch.
Tolerance: float32 results of one or two roundings, rtol 1e-6."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from irbridge.converters.pytorch import capture, verify


class ZeroDim(torch.nn.Module):
    def __init__(self, dim: int, keep: bool) -> None:
        super().__init__()
        self.dim, self.keep = dim, keep

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        d, k = self.dim, self.keep
        return (torch.logsumexp(x, d, keepdim=k), torch.sum(x, d, keepdim=k),
                torch.mean(x, d, keepdim=k), torch.amax(x, d, keepdim=k),
                torch.amin(x, d, keepdim=k), torch.prod(x, d, keepdim=k),
                *torch.max(x, d, keepdim=k), *torch.min(x, d, keepdim=k),
                torch.argmax(x, d, keepdim=k), torch.var(x, d, keepdim=k, correction=0),
                torch.linalg.vector_norm(x, 2, d, keepdim=k), torch.softmax(x, d),
                torch.log_softmax(x, d), torch.cumsum(x, d), torch.any(x > 0, d, keepdim=k),
                torch.sort(x, d)[0], torch.topk(x, 1, d)[0], torch.argsort(x, d))


@pytest.mark.parametrize("decompose", [False, True], ids=["aten", "decomposed"])
@pytest.mark.parametrize(("dim", "keep"), [(0, True), (-1, False)])
def test_zero_dim_inputs_give_zero_dim_results(dim: int, keep: bool, decompose: bool) -> None:
    module = ZeroDim(dim, keep)
    result = capture(module, (torch.tensor(0.7),), frontend="export", decompose=decompose)
    assert result.opaque_count == 0, result.stats.notes
    report = verify(result, module, tolerances=None)
    assert report.passed, report.summary()
    # a second value: nothing baked in
    from irbridge.executor import run_graphs

    x = torch.tensor(-1.3)
    got = run_graphs(result.model, {result.model.graphs[0].inputs[0].name: x.numpy()})[-1]
    with torch.no_grad():
        want = module(x)
    for index, expected in enumerate(want):
        where = result.outputs[index]
        assert where is not None
        actual = np.asarray(got[where[1]])
        assert actual.shape == () and actual.dtype == expected.numpy().dtype
        np.testing.assert_allclose(actual, expected.numpy(), rtol=1e-6)


class AllTrue(torch.nn.Module):
    """aten._is_all_true / _is_any_true: a bool tensor's all / any as a 0-d bool (what a
    `torch._check` on a tensor condition traces to; Grounding DINO's deformable attention
    has one), opaque before."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        every = torch.ops.aten._is_all_true(x > -1.0)
        some = torch.ops.aten._is_any_true(x > 1.0)
        return x * every.float() + some.float() * 2


@pytest.mark.parametrize("frontend", ["export", "dynamo"])
def test_is_all_true_and_is_any_true(frontend: str) -> None:
    from irbridge.executor import run_graphs

    module = AllTrue()
    example = torch.tensor([[0.5, -0.2], [0.3, 0.1]])
    result = capture(module, (example,), frontend=frontend)
    assert result.opaque_count == 0, result.stats.notes
    assert verify(result, module).passed
    name = result.model.graphs[0].inputs[0].name
    # both conditions false, then both true: the flags are computed, not baked in
    for x in (example, torch.tensor([[2.0, -3.0], [0.3, 0.1]])):
        got = np.asarray(run_graphs(result.model, {name: x.numpy()})[-1][0])
        np.testing.assert_array_equal(got, module(x).numpy())
