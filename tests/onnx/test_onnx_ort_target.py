"""`export_onnx(..., target="onnxruntime")` (converters/onnx/_ort_fusions.py): the file
runs in onnxruntime, agrees with eager torch and with the default file, and onnxruntime's
optimised graph of it keeps the forms the rewrites aim at.

Tolerances: the rewrites keep every ONNX operation, so against the default file in the
same runtime the difference is the rounding of another onnxruntime kernel for the same
operation (its LayerNormalization instead of its SkipLayerNormalization): atol 1e-5 on
O(1) outputs, far above float32 rounding (~1e-7 per op here) and far below a wrong
operation (O(0.1)). Against eager torch (other kernels throughout), 1e-4 + 1e-3 relative,
as tools/bench_onnx.py checks the benchmark models."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import transformers
from torch import nn

from irbridge.converters.onnx import export_onnx, to_onnx
from irbridge.converters.pytorch import capture
from irbridge.errors import ExportError

ATOL_FILE = 1e-5
ATOL_EAGER, RTOL_EAGER = 1e-4, 1e-3


def _optimized_ops(path: Path, tmp_path: Path) -> Counter[str]:
    """Node types of the graph onnxruntime runs (default session, CPU, one thread)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 4
    out = tmp_path / f"{path.stem}.ort.onnx"
    options.optimized_model_filepath = str(out)
    ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return Counter(n.op_type for n in onnx.load(str(out)).graph.node)


def _run(path: Path, arrays: list[np.ndarray]) -> list[np.ndarray]:
    """The file's outputs in onnxruntime, `arrays` fed to its inputs in order."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 4
    s = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    feeds = {i.name: a for i, a in zip(s.get_inputs(), arrays, strict=True)}
    return [np.asarray(x) for x in s.run(None, feeds)]


def _both(module: nn.Module, args: tuple[torch.Tensor, ...], tmp_path: Path
          ) -> tuple[Path, Path, list[np.ndarray]]:
    module.eval()
    with torch.no_grad():
        eager = module(*args)
    eager_list = [eager] if isinstance(eager, torch.Tensor) else list(eager)
    ir = capture(module, args, weights=True).model
    plain = export_onnx(ir, tmp_path / "plain.onnx", opset=20)
    tuned = export_onnx(ir, tmp_path / "tuned.onnx", opset=20, target="onnxruntime")
    return plain, tuned, [t.detach().numpy() for t in eager_list]


def _close(got: np.ndarray, want: np.ndarray, atol: float, rtol: float = 0.0) -> None:
    scale = float(np.max(np.abs(want)))
    assert float(np.max(np.abs(got - want))) <= atol + rtol * scale


class _Residual(nn.Module):
    """Post-norm residual block (BERT's): LayerNorm(x + Linear(x)), twice."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(32, 32), nn.Linear(32, 32)
        self.ln1, self.ln2 = nn.LayerNorm(32), nn.LayerNorm(32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.ln1(x + self.fc1(x))
        return self.ln2(self.fc2(x) + x)


def test_residual_add_before_layer_norm_is_sum(tmp_path: Path) -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 8, 32)
    plain, tuned, eager = _both(_Residual(), (x,), tmp_path)
    ops = Counter(n.op_type for n in onnx.load(str(tuned)).graph.node)
    assert ops["Sum"] == 2 and ops["LayerNormalization"] == 2, ops
    # what onnxruntime runs: its slow SkipLayerNormalization for the plain file only
    assert _optimized_ops(plain, tmp_path)["SkipLayerNormalization"] == 2
    ran = _optimized_ops(tuned, tmp_path)
    assert ran["SkipLayerNormalization"] == 0 and ran["LayerNormalization"] == 2, ran
    feeds = [x.numpy()]
    got, base = _run(tuned, feeds), _run(plain, feeds)
    _close(got[0], base[0], ATOL_FILE)
    _close(got[0], eager[0], ATOL_EAGER, RTOL_EAGER)


class _SoftmaxAxis(nn.Module):
    """yolov8's DFL head: a view, a transpose, softmax over dim 1 (not the last)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, a = x.shape
        return x.view(b, 4, 16, a).transpose(2, 1).softmax(1) * 2.0


def test_softmax_over_inner_axis_runs_over_the_last(tmp_path: Path) -> None:
    torch.manual_seed(0)
    x = torch.randn(1, 64, 40) * 3
    plain, tuned, eager = _both(_SoftmaxAxis(), (x,), tmp_path)
    nodes = list(onnx.load(str(tuned)).graph.node)
    softmax = [n for n in nodes if n.op_type == "Softmax"]
    assert len(softmax) == 1 and softmax[0].attribute[0].i == 3
    # the transpose before was composed with the new one: two Transposes in all
    assert sum(n.op_type == "Transpose" for n in nodes) == 2
    feeds = [x.numpy()]
    got, base = _run(tuned, feeds), _run(plain, feeds)
    np.testing.assert_array_equal(got[0], base[0])  # same kernels, same order: bit-equal
    _close(got[0], eager[0], ATOL_EAGER, RTOL_EAGER)


def test_softmax_on_a_graph_input_gets_its_own_transpose(tmp_path: Path) -> None:
    """No Transpose to compose with (a graph input, rank from shape inference)."""
    torch.manual_seed(0)
    x = torch.randn(3, 5, 7)
    plain, tuned, eager = _both(nn.Softmax(dim=0), (x,), tmp_path)
    ops = [n.op_type for n in onnx.load(str(tuned)).graph.node]
    assert ops == ["Transpose", "Softmax", "Transpose"], ops
    got = _run(tuned, [x.numpy()])
    np.testing.assert_array_equal(got[0], _run(plain, [x.numpy()])[0])
    _close(got[0], eager[0], ATOL_EAGER, RTOL_EAGER)


def _tiny_bert() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    config = transformers.BertConfig(hidden_size=64, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=128,
                                     vocab_size=500, max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.BertModel(config).eval()
    ids = torch.randint(0, 500, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, 10:] = 0  # padding in the second row
    return model, (ids, mask)


def test_tiny_bert_against_eager_and_the_default_file(tmp_path: Path) -> None:
    model, (ids, mask) = _tiny_bert()
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask)
    eager = [out.last_hidden_state.numpy(), out.pooler_output.numpy()]
    ir = capture(model, (), {"input_ids": ids, "attention_mask": mask}, weights=True).model
    plain = export_onnx(ir, tmp_path / "plain.onnx", opset=20)
    tuned = export_onnx(ir, tmp_path / "tuned.onnx", opset=20, target="onnxruntime")
    # 2 layers x 2 residual norms + the embeddings' Add before its norm; 2 attentions
    ops = Counter(n.op_type for n in onnx.load(str(tuned)).graph.node)
    assert ops["Sum"] == 5 and ops["MultiHeadAttention"] == 2, ops
    assert _optimized_ops(tuned, tmp_path)["SkipLayerNormalization"] == 0
    feeds = [ids.numpy(), mask.numpy()]
    got, base = _run(tuned, feeds), _run(plain, feeds)
    assert len(got) == len(eager) == 2
    for g, b, e in zip(got, base, eager, strict=True):
        _close(g, b, ATOL_FILE)
        _close(g, e, ATOL_EAGER, RTOL_EAGER)


def test_default_target_is_unchanged_and_bad_target_refused() -> None:
    ir = capture(_Residual().eval(), (torch.randn(1, 4, 32),), weights=True).model
    default = to_onnx(ir, opset=20)
    assert to_onnx(ir, opset=20, target="onnx") == default
    assert "Sum" not in {n.op_type for n in default.graph.node}
    with pytest.raises(ExportError, match="target 'tensorrt': expected one of onnx, "
                                          "onnxruntime"):
        to_onnx(ir, target="tensorrt")


class _Attention(nn.Module):
    """Self-attention through F.scaled_dot_product_attention with a boolean mask."""

    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v = (nn.Linear(dim, dim) for _ in range(3))
        self.o = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.view(b, s, self.heads, d // self.heads).transpose(1, 2)

        y = nn.functional.scaled_dot_product_attention(
            split(self.q(x)), split(self.k(x)), split(self.v(x)), attn_mask=mask)
        return self.o(y.transpose(1, 2).reshape(b, s, d))


def test_sdpa_becomes_multi_head_attention(tmp_path: Path) -> None:
    """A boolean mask with a row that masks every key: the NaN guard keeps that row 0."""
    torch.manual_seed(0)
    x = torch.randn(2, 6, 32)
    mask = torch.rand(2, 1, 6, 6) > 0.3
    mask[:, :, :, 0] = True
    mask[1, 0, 2, :] = False  # query 2 of batch 1 sees no key
    plain, tuned, eager = _both(_Attention(), (x, mask), tmp_path)
    ops = Counter(n.op_type for n in onnx.load(str(tuned)).graph.node)
    assert ops["MultiHeadAttention"] == 1 and ops["Softmax"] == 0, ops
    assert ops["Transpose"] == 0, ops
    got, base = _run(tuned, [x.numpy(), mask.numpy()]), _run(plain, [x.numpy(), mask.numpy()])
    assert np.isfinite(got[0]).all()
    _close(got[0], base[0], ATOL_FILE)
    _close(got[0], eager[0], ATOL_EAGER, RTOL_EAGER)


def test_tiny_gpt2_causal_attention(tmp_path: Path) -> None:
    """GPT-2: fused q/k/v projection split three ways, a causal and padding mask, and the
    attention's output viewed as 2-D for the next projection (that Reshape stays)."""
    config = transformers.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=500,
                                     n_positions=64, use_cache=False)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()
    ids = torch.randint(0, 500, (1, 16))
    mask = torch.ones(1, 16, dtype=torch.long)
    mask[0, :3] = 0  # left padding
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits.numpy()
    ir = capture(model, (), {"input_ids": ids, "attention_mask": mask}, weights=True).model
    plain = export_onnx(ir, tmp_path / "plain.onnx", opset=20)
    tuned = export_onnx(ir, tmp_path / "tuned.onnx", opset=20, target="onnxruntime")
    ops = Counter(n.op_type for n in onnx.load(str(tuned)).graph.node)
    assert ops["MultiHeadAttention"] == 2 and ops["Softmax"] == 0, ops
    feeds = [ids.numpy(), mask.numpy()]
    got, base = _run(tuned, feeds), _run(plain, feeds)
    _close(got[0], base[0], ATOL_FILE)
    # positions 0-2 are padding whose every key is masked: torch and both files give
    # numbers there too (0 attention output); all positions compared
    _close(got[0], logits, ATOL_EAGER, RTOL_EAGER)


class _ZeroBias(nn.Module):
    """Freshly initialised layers whose biases are zero (as the benchmark's random-weight
    transformers'), next to one whose bias is not."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc, self.kept = nn.Linear(8, 8), nn.Linear(8, 8)
        for zeroed in (self.conv, self.fc):
            nn.init.zeros_(zeroed.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x).mean(dim=(2, 3))
        return self.kept(self.fc(y).unsqueeze(1))


def test_all_zero_biases_are_dropped(tmp_path: Path) -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 3, 6, 6)
    plain, tuned, eager = _both(_ZeroBias(), (x,), tmp_path)
    model = onnx.load(str(tuned))
    inits = {t.name for t in model.graph.initializer}
    conv = next(n for n in model.graph.node if n.op_type == "Conv")
    assert len(conv.input) == 2
    # fc's bias Add is gone; kept's (nonzero) bias stays, as an Add or a Gemm's C
    biases = [i for n in model.graph.node for i in n.input if i in inits and "bias" in i]
    assert len(biases) == 1 and "kept" in biases[0], biases
    got, base = _run(tuned, [x.numpy()]), _run(plain, [x.numpy()])
    np.testing.assert_array_equal(got[0], base[0])  # x + 0 == x
    _close(got[0], eager[0], ATOL_EAGER, RTOL_EAGER)


def test_cli_target_option(tmp_path: Path) -> None:
    """`irbridge export --to onnx --target onnxruntime`; refused for other formats and
    unknown targets with one line."""
    from typer.testing import CliRunner

    from irbridge import serde
    from irbridge.cli.main import app

    torch.manual_seed(0)
    x = torch.randn(2, 8, 32)
    module = _Residual().eval()
    irb = serde.save(capture(module, (x,), weights=True).model, tmp_path / "m.irb")
    runner = CliRunner()
    out = tmp_path / "m.onnx"
    result = runner.invoke(app, ["export", str(irb), "--to", "onnx", "-o", str(out),
                                 "--target", "onnxruntime"])
    assert result.exit_code == 0, result.output
    assert Counter(n.op_type for n in onnx.load(str(out)).graph.node)["Sum"] == 2
    with torch.no_grad():
        _close(_run(out, [x.numpy()])[0], module(x).numpy(), ATOL_EAGER, RTOL_EAGER)
    for flags, message in ((["--to", "irb", "-o", str(tmp_path / "x.irb"), "--target",
                             "onnxruntime"], "--target onnxruntime applies to ONNX output"),
                           (["--to", "onnx", "-o", str(out), "--target", "tensorrt"],
                            "--target 'tensorrt': choose one of onnx, onnxruntime")):
        result = runner.invoke(app, ["export", str(irb), *flags])
        assert result.exit_code != 0 and message in result.output + result.stderr, \
            result.output


def test_nn_transformer_encoder_layer(tmp_path: Path) -> None:
    """nn.MultiheadAttention's path (ViT's): packed in-projection, no mask."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, dropout=0.0)
    x = torch.randn(2, 10, 32)
    plain, tuned, eager = _both(layer, (x,), tmp_path)
    ops = Counter(n.op_type for n in onnx.load(str(tuned)).graph.node)
    assert ops["MultiHeadAttention"] == 1 and ops["Sum"] == 2 and ops["Softmax"] == 0, ops
    got, base = _run(tuned, [x.numpy()]), _run(plain, [x.numpy()])
    _close(got[0], base[0], ATOL_FILE)
    _close(got[0], eager[0], ATOL_EAGER, RTOL_EAGER)
