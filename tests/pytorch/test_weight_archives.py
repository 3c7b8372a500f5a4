"""A weights archive that inflates: torch.load reads a zip entry deflated as readily as a
stored one, so a 260 KB `.pt` (or a model folder's `pytorch_model.bin`) held a 256 MB
tensor and a 16 MB one would hold 16 GB. torch.save stores tensors uncompressed; an archive
whose entries would inflate past twice its size is refused in one line before torch.load
opens it. torch.save's own archives, stored, still load (`--weights`, model folders)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from irbridge.cli.main import app
from irbridge.converters.pytorch import zoo
from irbridge.converters.pytorch.zoo import ZooError
from irbridge.converters.pytorch.zoo.common import check_torch_archive

transformers = pytest.importorskip("transformers")


def _deflated(source: Path, target: Path) -> Path:
    """`source` (a torch.save archive) rewritten with every entry deflated."""
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(target, "w") as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info.filename),
                         compress_type=zipfile.ZIP_DEFLATED)
    return target


def test_a_deflated_archive_is_refused_before_torch_reads_it(tmp_path: Path) -> None:
    torch.save({"w": torch.zeros(1 << 22)}, tmp_path / "plain.pt")   # 16 MiB of zeros
    bomb = _deflated(tmp_path / "plain.pt", tmp_path / "bomb.pt")
    assert bomb.stat().st_size < (1 << 22) // 64
    assert torch.load(bomb, weights_only=True)["w"].numel() == 1 << 22   # torch inflates it
    with pytest.raises(ZooError) as exc:
        check_torch_archive(bomb)
    line = str(exc.value)
    assert "\n" not in line and str(bomb) in line and "16,777," in line
    assert "torch.save writes tensors uncompressed" in line
    check_torch_archive(tmp_path / "plain.pt")   # torch.save's own: accepted


def test_weights_option_refuses_an_inflating_archive(tmp_path: Path) -> None:
    model = torch.nn.Linear(4, 4)
    torch.save(model.state_dict(), tmp_path / "w.pt")
    state = torch.load(tmp_path / "w.pt", weights_only=True)
    state["padding"] = torch.zeros(1 << 21)   # deflates to almost nothing
    torch.save(state, tmp_path / "padded.pt")
    bomb = _deflated(tmp_path / "padded.pt", tmp_path / "bomb.pt")
    result = CliRunner().invoke(app, ["convert", "resnet18", "--weights", str(bomb), "-o",
                                      str(tmp_path / "out.irb")])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "bomb.pt" in lines[0]
    assert "would inflate" in lines[0] and not (tmp_path / "out.irb").exists()


def test_a_model_folder_with_an_inflating_bin_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "bert"
    config = transformers.BertConfig(num_hidden_layers=1, hidden_size=32, num_attention_heads=2,
                                     intermediate_size=64, vocab_size=100, num_labels=3)
    model = transformers.BertForSequenceClassification(config).eval()
    model.save_pretrained(folder)
    (folder / "model.safetensors").unlink()   # the .bin form older checkpoints have
    torch.save(model.state_dict(), folder / "pytorch_model.bin")
    built = zoo.build(str(folder))   # the stored archive transformers wrote loads
    assert torch.equal(built.module.state_dict()["classifier.weight"],
                       model.state_dict()["classifier.weight"])
    state = torch.load(folder / "pytorch_model.bin", weights_only=True)
    state["bert.padding"] = torch.zeros(1 << 21)
    torch.save(state, tmp_path / "padded.bin")
    _deflated(tmp_path / "padded.bin", folder / "pytorch_model.bin")
    with pytest.raises(ZooError, match=r"pytorch_model\.bin: its zip entries would inflate"):
        zoo.build(str(folder))
