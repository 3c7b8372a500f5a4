"""`verify` compares the IR (IEEE float32) with an eager reference computed in IEEE float32,
whatever reduced-precision float32 mode the user's process runs torch in: TF32 convolutions
(cuDNN's default on GPUs, seen on an H100: a torchvision resnet18 on CUDA failed verify
with max abs error 1.8e-3 before this), or `torch.set_float32_matmul_precision("medium")`,
which on CPUs with AMX runs float32 matmuls in bfloat16. The user's settings are restored."""

from __future__ import annotations

import torch

from irbridge.converters.pytorch import capture, verify


def test_verify_uses_ieee_float32_and_restores_the_settings() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 64)).eval()
    x = torch.randn(8, 256)
    result = capture(model, (x,), frontend="fx")
    cudnn_before = torch.backends.cudnn.allow_tf32
    torch.set_float32_matmul_precision("medium")
    try:
        with torch.no_grad():
            reduced = model(x)
        with torch.no_grad():
            exact = model.double()(x.double()).float()
            model.float()
        report = verify(result, model)
        assert report.passed, report.summary()
        assert torch.get_float32_matmul_precision() == "medium"
        assert torch.backends.cudnn.allow_tf32 == cudnn_before
        # Where the CPU has a bfloat16 matmul path (AMX), "medium" really changes eager
        # results by far more than verify's float32 tolerance: the check above then shows
        # that verify did not use them.
        print("eager 'medium' max abs error vs float64:",
              float((reduced - exact).abs().max()))
    finally:
        torch.set_float32_matmul_precision("highest")
