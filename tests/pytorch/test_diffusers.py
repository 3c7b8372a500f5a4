"""Hugging Face diffusers models through the zoo (`diffusers:ClassName[:config.json]`, model
folders): small configs of a Stable Diffusion UNet, its VAE and diffusion transformers are
built with random weights, captured, exported to ONNX and run in onnxruntime against the
eager model; the CLI path; the one-line errors. Nothing is downloaded."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from irbridge.cli.main import app
from irbridge.converters.onnx.export import to_onnx
from irbridge.converters.pytorch import capture, verify, zoo
from irbridge.converters.pytorch._util import tensor_leaves
from irbridge.converters.pytorch.zoo import ZooError
from irbridge.errors import IrbridgeError

diffusers = pytest.importorskip("diffusers")
ort = pytest.importorskip("onnxruntime")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

from diffusers_sweep import SMALL  # noqa: E402  (the sweep's small configs)

# float32 onnxruntime against eager float32 on configs a few layers deep: the same math
# with other kernels (summation order, fused GEMMs), so errors of a few float32 ulps of the
# outputs' scale per layer; 1e-4 of the scale bounds that with room and is far below the
# error of a wrong op (of the outputs' own size).
ATOL_REL, RTOL = 1e-4, 1e-3


def _config_file(tmp_path: Path, name: str, extra: dict[str, Any] | None = None) -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({**SMALL[name], **(extra or {})}))
    return str(path)


def _onnx_matches_eager(built: zoo.BuiltModel) -> None:
    result = capture(built.module, built.args, built.kwargs)
    assert len(result.model.graphs) == 1 and result.opaque_count == 0
    session = ort.InferenceSession(to_onnx(result.model).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    feeds = {name: t.numpy() for name, t in result.inputs.items()}
    got = session.run(None, feeds)
    with torch.no_grad():
        want = [t.numpy() for t in tensor_leaves(built.module(*built.args, **built.kwargs))]
    assert len(want) == len(result.outputs)
    for where, expected in zip(result.outputs, want, strict=True):
        assert where is not None
        actual = got[where[1]]
        assert actual.shape == expected.shape
        scale = max(1.0, float(np.abs(expected).max()))
        np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=ATOL_REL * scale)


@pytest.mark.parametrize("name", ["UNet2DConditionModel", "AutoencoderKL",
                                  "SD3Transformer2DModel", "FluxTransformer2DModel"])
def test_small_config_to_onnx_matches_eager(tmp_path: Path, name: str) -> None:
    built = zoo.build(f"diffusers:{name}:{_config_file(tmp_path, name)}")
    assert type(built.module).__name__ == name
    assert built.weights == "random (seed 0)" and built.family == "diffusers"
    _onnx_matches_eager(built)


def test_inputs_come_from_the_config(tmp_path: Path) -> None:
    unet = zoo.build(f"diffusers:UNet2DConditionModel:{_config_file(tmp_path, 'UNet2DConditionModel')}")
    assert unet.input_desc == ("sample: float32[1, 4, 16, 16], timestep: int64[1] all 1, "
                               "encoder_hidden_states: float32[1, 77, 32]")
    flux = zoo.build(f"diffusers:FluxTransformer2DModel:"
                     f"{_config_file(tmp_path, 'FluxTransformer2DModel')}", seq_len=16)
    # packed 2x2 latent tokens of a 64x64 latent (no sample_size in Flux's config), the
    # text length from --seq-len, one rope column per axes_dims_rope entry
    assert flux.input_desc == (
        "hidden_states: float32[1, 1024, 16], encoder_hidden_states=float32[1, 16, 32], "
        "pooled_projections=float32[1, 24], timestep=int64[1] all 1, "
        "img_ids=float32[1024, 3], txt_ids=float32[16, 3]")


def test_sdxl_added_conditions_are_a_dict_argument(tmp_path: Path) -> None:
    """SDXL's text_time conditions: `added_cond_kwargs={"text_embeds", "time_ids"}`, sized
    from projection_class_embeddings_input_dim - 6 * addition_time_embed_dim."""
    config = _config_file(tmp_path, "UNet2DConditionModel", {
        "addition_embed_type": "text_time", "addition_time_embed_dim": 8,
        "projection_class_embeddings_input_dim": 80})
    built = zoo.build(f"diffusers:UNet2DConditionModel:{config}")
    assert sorted(built.kwargs["added_cond_kwargs"]) == ["text_embeds", "time_ids"]
    assert built.kwargs["added_cond_kwargs"]["text_embeds"].shape == (1, 32)
    _onnx_matches_eager(built)


def test_a_diffusers_folder_builds_with_its_weights(tmp_path: Path) -> None:
    torch.manual_seed(3)
    saved = diffusers.AutoencoderKL.from_config(SMALL["AutoencoderKL"]).eval()
    saved.save_pretrained(tmp_path / "vae")
    built = zoo.build(str(tmp_path / "vae"))
    assert built.weights == f"file {tmp_path / 'vae'}"
    ours, theirs = built.module.state_dict(), saved.state_dict()
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)  # not seed-0 weights
    result = capture(built.module, built.args, built.kwargs)
    assert verify(result, saved).passed


def test_a_pickled_folder_needs_trust(tmp_path: Path) -> None:
    saved = diffusers.AutoencoderKL.from_config(SMALL["AutoencoderKL"])
    saved.save_pretrained(tmp_path / "vae", safe_serialization=False)
    with pytest.raises(ZooError, match=r"refusing to load .*diffusion_pytorch_model\.bin"):
        zoo.build(str(tmp_path / "vae"))


def test_a_folder_with_a_fifo_or_an_outside_shard_is_refused(tmp_path: Path) -> None:
    """As for Hugging Face folders (tests/pytorch/test_hf_folder.py): diffusers opens the
    folder's files by name, so a FIFO is refused before anything is read (a read would
    block forever), and a sharded index naming a file outside the folder is refused."""
    saved = diffusers.AutoencoderKL.from_config(SMALL["AutoencoderKL"])
    saved.save_pretrained(tmp_path / "vae", max_shard_size="100KB")
    index = tmp_path / "vae" / "diffusion_pytorch_model.safetensors.index.json"
    assert index.is_file()
    forged = json.loads(index.read_text())
    forged["weight_map"] = {k: "../elsewhere.safetensors" for k in forged["weight_map"]}
    index.write_text(json.dumps(forged))
    with pytest.raises(ZooError, match="is not a relative path inside the model folder"):
        zoo.build(str(tmp_path / "vae"))
    os.mkfifo(tmp_path / "vae" / "notes")
    with pytest.raises(IrbridgeError, match=r"vae/notes: not a regular file \(a FIFO\); "
                                            "refusing to read the model folder"):
        zoo.build(str(tmp_path / "vae"))


def test_cli_export_and_analyze(tmp_path: Path) -> None:
    runner = CliRunner()
    config = _config_file(tmp_path, "AutoencoderKL")
    out = tmp_path / "vae.onnx"
    result = runner.invoke(app, ["export", f"diffusers:AutoencoderKL:{config}", "--to", "onnx",
                                 "-o", str(out), "--verify"])
    assert result.exit_code == 0, result.output
    assert out.is_file() and "verify: PASS" in result.output
    result = runner.invoke(app, ["analyze", f"diffusers:AutoencoderKL:{config}",
                                 "--format", "json"])
    assert result.exit_code == 0, result.output
    total = json.loads(result.output)["runs"][0]["total"]
    assert total["macs"] > 0


@pytest.mark.parametrize(("spec", "message"), [
    ("diffusers:UNet2DConditionModle",
     r"^unknown diffusers model class 'UNet2DConditionModle'; did you mean: "
     r"UNet2DConditionModel"),
    ("diffusers:", r"^bad diffusers spec 'diffusers:'"),
    ("diffusers:DualTransformer2DModel",
     r"^diffusers' DualTransformer2DModel is a building block \(a plain nn.Module\)"),
    ("diffusers:AutoencoderKL:/no/such/config.json", r"^/no/such/config.json: no such config"),
    ("diffusers:AutoencoderKL:{bad}", r"not a readable JSON config"),
    ("diffusers:AutoencoderKL:{cfg}",
     r"^could not build diffusers:AutoencoderKL:.*: diffusers' AutoencoderKL fails on the "
     r"given config: "),
])
def test_errors_are_one_line(tmp_path: Path, spec: str, message: str) -> None:
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "cfg.json").write_text(json.dumps({"block_out_channels": [32, 64],
                                                   "norm_num_groups": 7}))
    spec = spec.format(bad=tmp_path / "bad.json", cfg=tmp_path / "cfg.json")
    with pytest.raises(ZooError, match=message) as info:
        zoo.build(spec)
    assert "\n" not in str(info.value)


def test_cli_error_line_for_an_unknown_class() -> None:
    result = CliRunner().invoke(app, ["convert", "diffusers:NoSuchModel"])
    assert result.exit_code != 0
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: unknown diffusers model class")


def test_diffusers_missing_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    # None in sys.modules is how Python marks a module that cannot be imported
    monkeypatch.setitem(sys.modules, "diffusers", None)
    with pytest.raises(ZooError, match=r"^diffusers is not installed .*irbridge\[diffusers\]"):
        zoo.build("diffusers:UNet2DConditionModel")


def _hand_count(module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    """MACs counted independently of irbridge: every Conv / Linear from its output size and
    kernel (forward hooks on the eager model), plus each attention's score and value matmuls,
    2 * batch * query_len * key_len * inner_dim (the hooks cannot see them: functional)."""
    from diffusers.models.attention_processor import Attention

    total = 0

    def layer(mod: torch.nn.Module, inputs: Any, out: torch.Tensor) -> None:
        nonlocal total
        if isinstance(mod, torch.nn.Conv2d):
            kh, kw = mod.kernel_size
            total += out.numel() * (mod.in_channels // mod.groups) * kh * kw
        else:
            total += out.numel() * mod.in_features

    def attention(mod: Any, inputs: Any, kw: dict[str, Any], out: Any) -> None:
        nonlocal total
        hidden = inputs[0] if inputs else kw["hidden_states"]
        context = kw.get("encoder_hidden_states")
        keys = (context if context is not None else hidden).shape[1]
        total += 2 * hidden.shape[0] * hidden.shape[1] * keys * mod.to_q.out_features

    hooks = [m.register_forward_hook(layer) for m in module.modules()
             if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    hooks += [m.register_forward_hook(attention, with_kwargs=True) for m in module.modules()
              if isinstance(m, Attention)]
    try:
        with torch.no_grad():
            module(*args, **kwargs)
    finally:
        for hook in hooks:
            hook.remove()
    return total


def test_unet_macs_match_a_hand_count(tmp_path: Path) -> None:
    from irbridge.summary import summarize

    built = zoo.build(f"diffusers:UNet2DConditionModel:{_config_file(tmp_path, 'UNet2DConditionModel')}")
    result = capture(built.module, built.args, built.kwargs)
    assert summarize(result.model).cost.macs == _hand_count(built.module, built.args,
                                                            built.kwargs)


@pytest.mark.slow
def test_sd15_unet_macs_at_64x64_latents() -> None:
    """SD 1.5's UNet (the class defaults) at 64x64 latents, 77 text tokens, batch 1, built on
    the meta device: 402.62 GMACs, the hand count (339.59 G of convolutions and linear
    layers, BK-SDM's published 339 G for this UNet, plus 63.03 G of attention matmuls)."""
    from irbridge.summary import summarize

    built = zoo.build("diffusers:UNet2DConditionModel", device="meta")
    result = capture(built.module, built.args, built.kwargs, weights=False)
    macs = summarize(result.model).cost.macs
    assert macs == _hand_count(built.module, built.args, built.kwargs)
    assert abs(macs - 402.62e9) < 0.01e9
