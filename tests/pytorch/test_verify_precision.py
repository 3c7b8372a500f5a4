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


def test_a_pass_against_constant_outputs_is_called_weak() -> None:
    """HF EfficientNet built from its config outputs zeros everywhere (a zero-initialised
    last norm): any graph of the right shape would match it. verify still passes, and says
    that the check is weak; one varying output makes it an ordinary pass."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Linear(4, 4)).eval()
    torch.nn.init.zeros_(model[1].weight)
    torch.nn.init.zeros_(model[1].bias)
    x = torch.randn(2, 8)
    report = verify(capture(model, (x,), frontend="fx"), model)
    assert report.passed and report.weak
    assert "weak check: every reference output is one value repeated" in report.summary()
    assert report.outputs[0].note == "the reference is one value repeated (0)"

    torch.nn.init.ones_(model[1].bias)
    torch.nn.init.normal_(model[1].weight)
    report = verify(capture(model, (x,), frontend="fx"), model)
    assert report.passed and not report.weak and "weak" not in report.summary()
