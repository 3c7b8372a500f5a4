"""`irbridge convert`, `export` and `models` end to end on a small user model."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from irbridge import serde
from irbridge.cli.main import app

runner = CliRunner()

NET = '''
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        return self.head(y.mean(dim=(2, 3)))
'''


@pytest.fixture
def net(tmp_path: Path) -> str:
    (tmp_path / "net.py").write_text(NET)
    return f"{tmp_path / 'net.py'}:Net"


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_convert_verify_writes_ir_with_provenance(net: str, tmp_path: Path) -> None:
    out = tmp_path / "net.irb"
    code, stdout, stderr = invoke("convert", net, "--input-shape", "2,3,16,16", "--verify",
                                  "-o", str(out))
    assert code == 0, stderr
    assert "verify: PASS" in stdout and "wrote" in stdout
    model = serde.load(out)
    ops = [n.op for n in model.graph.nodes]
    assert "conv" in ops and "batch_norm" in ops and "linear" in ops
    conv = next(n for n in model.graph.nodes if n.op == "conv")
    assert conv.provenance.module_path == "conv"
    assert model.graph.inputs[0].type is not None
    assert model.graph.inputs[0].type.shape == (2, 3, 16, 16)


def test_convert_shape_only_and_each_frontend(net: str, tmp_path: Path) -> None:
    for frontend in ("fx", "export", "dynamo"):
        out = tmp_path / f"{frontend}.irb"
        code, _stdout, stderr = invoke("convert", net, "--input-shape", "1,3,8,8", "--frontend",
                                      frontend, "--no-weights", "-o", str(out))
        assert code == 0, stderr
        model = serde.load(out)
        assert model.is_shape_only and model.metadata["capture.method"] == frontend


def test_dynamic_batch_is_symbolic_and_left_out_of_totals(net: str, tmp_path: Path) -> None:
    """An example batch of 1 would be specialised by torch; the CLI traces with 2 instead.
    The summary shows the symbolic shape (not eaten as markup) and counts the nodes it
    cannot cost instead of printing their cost as zero silently."""
    out = tmp_path / "dyn.irb"
    code, stdout, stderr = invoke("convert", net, "--input-shape", "1,3,8,8", "--dynamic",
                                  "batch", "--frontend", "export", "--no-weights",
                                  "-o", str(out))
    assert code == 0, stderr
    assert "[batch,3,8,8]" in stdout
    assert "uncosted" in stdout
    first = serde.load(out).graph.inputs[0].type
    assert first is not None and str(first.shape[0]) == "batch", first


def test_onnx_one_step_import_and_export(net: str, tmp_path: Path) -> None:
    onnx_file = tmp_path / "net.onnx"
    code, _, stderr = invoke("convert", net, "--input-shape", "1,3,8,8", "--to", "onnx",
                             "-o", str(onnx_file))
    assert code == 0, stderr
    irb = tmp_path / "from_onnx.irb"
    code, stdout, stderr = invoke("convert", str(onnx_file), "-o", str(irb))
    assert code == 0, stderr
    assert "read as onnx" in stdout
    assert serde.load(irb).source_format == "onnx"
    code, stdout, stderr = invoke("export", str(irb), "--to", "onnx", "-o",
                                  str(tmp_path / "again.onnx"), "--opset", "20")
    assert code == 0, stderr
    import onnx

    assert onnx.load(str(tmp_path / "again.onnx")).opset_import[0].version == 20


@pytest.mark.parametrize("args, message", [
    (["convert", "resnet19"], "unknown model 'resnet19'; did you mean: resnet18"),
    (["convert", "/nowhere/net.py:Net"], "/nowhere/net.py: no such model file"),
    (["convert", "{net}", "--input-shape", "1,3"], "the example inputs do not run"),
    (["convert", "{net}", "--input-shape", "a,b"], "expected integers like 1,3,224,224"),
    (["convert", "{net}", "--dynamic", "batch=9:1"], "MIN <= MAX"),
    (["convert", "{net}", "-o", "{tmp}/x.weird"], "cannot tell the format from suffix"),
    (["convert", "{net}", "--to", "onnx", "-o", "{tmp}/y.irb"],
     "the suffix .irb is for irb files, but --to onnx writes onnx (hint: name it y.onnx)"),
    (["convert", "{net}", "-o", "-"], "-o -: irbridge writes files, not standard output"),
    (["convert", "{net}", "--no-weights", "--verify", "-o", "{tmp}/x.irb"],
     "--verify needs real weights; drop --no-weights"),
    (["export", "{tmp}/missing.irb", "--to", "onnx", "-o", "{tmp}/x.onnx"], "no such file"),
    (["models", "--family", "nope"], "unknown family 'nope'"),
])
def test_errors_are_one_line_and_write_nothing(net: str, tmp_path: Path, args: list[str],
                                               message: str) -> None:
    before = set(tmp_path.iterdir())
    code, _, stderr = invoke(*[a.replace("{net}", net).replace("{tmp}", str(tmp_path))
                               for a in args])
    assert code == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], stderr
    assert set(tmp_path.iterdir()) == before


def test_models_lists_families_and_json() -> None:
    code, stdout, _ = invoke("models", "--family", "transformers", "--json")
    assert code == 0
    import json

    names = [e["name"] for e in json.loads(stdout)["transformers"]]
    assert {"bert-base-uncased", "gpt2", "t5-small", "llama-3-70b"} <= set(names)


NOISY = '''
import torch
from torch import nn

class Noisy(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x) + torch.rand_like(x)
'''


def test_a_failed_verify_writes_nothing(tmp_path: Path) -> None:
    """rand_like has no reference implementation, so verification cannot pass."""
    (tmp_path / "noisy.py").write_text(NOISY)
    out = tmp_path / "noisy.irb"
    code, stdout, _ = invoke("convert", f"{tmp_path / 'noisy.py'}:Noisy", "--input-shape",
                             "2,4", "--verify", "-o", str(out))
    assert code == 1
    assert "verify: FAIL" in stdout and "wrote" not in stdout
    assert f"not written: {out} (verification failed" in stdout
    assert not out.exists() and list(tmp_path.iterdir()) == [tmp_path / "noisy.py"]
    # Without --verify the same capture is written (the user did not ask for the check).
    code, stdout, _ = invoke("convert", f"{tmp_path / 'noisy.py'}:Noisy", "--input-shape",
                             "2,4", "-o", str(out))
    assert code == 0 and out.exists()


@pytest.mark.parametrize("args, message", [
    (["--batch", "99999999999999999999"], "--batch 99999999999999999999: must be between 1 and"),
    (["--seq-len", "0"], "--seq-len 0: must be between 1 and"),
    (["--input-shape", "1,3,99999999999999999999,4"], "more than a tensor can hold"),
    (["--input-shape", "4294967296,4294967296,4"], "more than a tensor can hold"),
    (["--opset", "5", "-o", "{tmp}/x.onnx"], "--opset 5 is outside the supported range 13.."),
    (["--opset", "18", "-o", "{tmp}/x.irb"], "--opset applies to ONNX output"),
    (["--opset", "18"], "--opset applies to ONNX output"),
    (["--to", "onnx"], "--to onnx needs -o FILE"),
    (["--to", "pdf", "-o", "{tmp}/x"], "unknown output format 'pdf'"),
    (["--frontend", "bogus"], "--frontend 'bogus': choose one of auto, fx, export, dynamo"),
    (["--dynamic", "b=1:99999999999999999999"], "0 <= MIN <= MAX <= 9223372036854775807"),
    (["--meta", "--verify"], "--verify needs real weights"),
])
def test_options_are_checked_before_any_work(net: str, tmp_path: Path, args: list[str],
                                             message: str) -> None:
    code, stdout, stderr = invoke("convert", net, *[a.replace("{tmp}", str(tmp_path))
                                                    for a in args])
    assert code == 2
    assert "built" not in stdout  # refused before building (let alone capturing)
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], stderr
    assert list(tmp_path.iterdir()) == [tmp_path / "net.py"]


def test_pytorch_options_on_a_model_file_are_refused(net: str, tmp_path: Path) -> None:
    irb = tmp_path / "net.irb"
    code, _, stderr = invoke("convert", net, "--input-shape", "1,3,8,8", "-o", str(irb))
    assert code == 0, stderr
    for option in (["--batch", "2"], ["--verify"], ["--frontend", "fx"], ["--pretrained"]):
        code, _, stderr = invoke("convert", str(irb), *option, "-o", str(tmp_path / "y.irb"))
        assert code == 2
        assert f"{option[0]} applies to models captured from PyTorch" in stderr
    assert not (tmp_path / "y.irb").exists()


@pytest.mark.parametrize("args, message", [
    (["--to", "onnx", "--opset", "5"], "--opset 5 is outside the supported range 13.."),
    (["--to", "stablehlo", "--opset", "18"], "--opset applies to ONNX output"),
    (["--to", "onnx", "--target-version", "1.0.0"], "--target-version applies to --to stablehlo"),
    (["--to", "stablehlo", "--target-version", "0.0.1"], "target version 0.0.1 is outside"),
])
def test_export_checks_options_before_building(tmp_path: Path, args: list[str],
                                               message: str) -> None:
    marker = tmp_path / "BUILT"
    (tmp_path / "m.py").write_text(NET + f"\n\ndef make():\n    open({str(marker)!r}, 'w')\n"
                                   "    return Net()\n")
    code, _, stderr = invoke("export", f"{tmp_path / 'm.py'}:make", *args, "-o",
                             str(tmp_path / "out.x"))
    assert code == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], stderr
    assert not marker.exists()  # refused before the model was built (let alone captured)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.py"]


@pytest.mark.parametrize("name, args, what", [
    ("m.pt", ["convert", "{f}", "-o", "{tmp}/o.irb", "--trust-checkpoint"], "checkpoint file"),
    ("m.yaml", ["convert", "{f}", "-o", "{tmp}/o.irb"], "model YAML"),
    ("u.py", ["convert", "{f}:Net", "-o", "{tmp}/o.irb", "--trust-checkpoint"], "model file"),
    ("w.pt", ["convert", "resnet18", "--weights", "{f}", "-o", "{tmp}/o.irb"], "weights file"),
    ("m.onnx", ["compare", "{f}", "resnet18"], ""),
    ("m.onnx", ["sweep", "--models", "{f}", "-o", "{tmp}/s.parquet"], ""),
])
def test_a_fifo_or_folder_is_named_as_such_never_missing(tmp_path: Path, name: str,
                                                         args: list[str], what: str) -> None:
    """Every path a command reads by name: a FIFO (which would block a read) or a folder is
    refused before any read and called what it is, a missing file called missing."""
    fifo, folder, missing = tmp_path / "fifo", tmp_path / "dir", tmp_path / "gone"
    for place in (fifo, folder, missing):
        place.mkdir()
    os.mkfifo(fifo / name)
    (folder / name).mkdir()
    suffix = f", not a {what}" if what else ""
    for place, problem in ((fifo, f"not a regular file (a FIFO){suffix}"),
                           (folder, f"a folder, not a {what or 'file'}"),
                           (missing, f"no such {what or 'file'}")):
        if place is folder and name.endswith((".yaml", ".pt")) and args[1] == "{f}":
            continue  # a folder named as the model is read as a model folder (its own error)
        path = place / name
        code, _, stderr = invoke(*[a.replace("{f}", str(path)).replace("{tmp}", str(tmp_path))
                                   for a in args])
        assert code == 2 and stderr.count("\n") == 1, stderr
        assert f"{path}: {problem}" in stderr, stderr


BRANCH = '''
import torch
from torch import nn

class Branch(nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x - 1
'''


def test_an_incomplete_capture_is_written_as_ir_with_a_warning_and_not_exported(
        tmp_path: Path) -> None:
    """A branch on a tensor's value: fx and torch.export refuse it, Dynamo's graph holds
    the example's branch. convert wrote it with exit 0 and no word beyond the attempts
    line (and `verify: PASS` on the example); now a warning line says what the IR is not,
    and writing ONNX is refused."""
    (tmp_path / "branch.py").write_text(BRANCH)
    source = f"{tmp_path / 'branch.py'}:Branch"
    code, stdout, stderr = invoke("convert", source, "--input-shape", "2,3",
                                  "-o", str(tmp_path / "b.irb"))
    assert code == 0, stderr
    assert "dynamo: ok, incomplete" in stdout
    warning = [line for line in stderr.splitlines() if "incomplete Dynamo capture" in line]
    assert len(warning) == 1 and warning[0].startswith("warning: ") and \
        "Python read tensor values between its graphs" in warning[0], stderr
    code, _, stderr = invoke("convert", source, "--input-shape", "2,3",
                             "-o", str(tmp_path / "b.onnx"))
    assert code == 2 and "refusing to export it to onnx" in stderr, stderr
    assert not (tmp_path / "b.onnx").exists()


def test_an_output_that_is_a_symlink_is_written_through(net: str, tmp_path: Path) -> None:
    """-o link.irb replaced the link itself with a regular file and left the file it
    points to as it was; a dangling link was replaced too. Now the link's target is
    written (created, for a dangling link), as a shell redirection would."""
    code, _, stderr = invoke("convert", net, "--input-shape", "1,3,8,8",
                             "-o", str(tmp_path / "a.irb"))
    assert code == 0, stderr
    target = tmp_path / "old.irb"
    target.write_bytes(b"old")
    (tmp_path / "link.irb").symlink_to("old.irb")
    (tmp_path / "dangling.onnx").symlink_to("new.onnx")
    for out, fmt in (("link.irb", "irb"), ("dangling.onnx", "onnx")):
        code, _, stderr = invoke("export", str(tmp_path / "a.irb"), "--to", fmt,
                                 "-o", str(tmp_path / out))
        assert code == 0, stderr
        assert (tmp_path / out).is_symlink()
    assert serde.load(target).graphs and (tmp_path / "new.onnx").is_file()


ITEM_BRANCH = '''
import torch
from torch import nn

class ItemBranch(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x):
        y = self.fc(x).relu()
        if bool((y.sum() > 0).item()):
            return y * 2
        return y - 1
'''


def test_failed_capture_attempts_print_nothing_of_torch_s_own(tmp_path: Path) -> None:
    """fx refuses the branch on a value, torch.export printed the partial graph it traced
    (a `def forward` listing, hundreds of lines for a real model) and Dynamo logged its
    graph-break advice: all on the terminal around irbridge's summary, which already
    names each attempt's outcome. Now stderr holds only irbridge's own lines; with --debug
    torch's log records are back. In a fresh process, as torch reads TORCH_LOGS when it
    is imported."""
    (tmp_path / "item.py").write_text(ITEM_BRANCH)
    source = f"{tmp_path / 'item.py'}:ItemBranch"
    env = {k: v for k, v in os.environ.items() if k != "TORCH_LOGS"}
    args = [sys.executable, "-c", "from irbridge.cli.main import app; app()"]
    quiet = subprocess.run([*args, "convert", source, "--input-shape", "2,16"],
                           capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert quiet.returncode == 0, quiet.stderr
    assert "export: " in quiet.stdout and "dynamo: ok, incomplete" in quiet.stdout
    noise = [line for line in quiet.stderr.splitlines()
             if line.strip() and not line.startswith("warning: ")]
    assert noise == [], quiet.stderr[:2000]
    loud = subprocess.run([*args, "--debug", "convert", source, "--input-shape", "2,16"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert loud.returncode == 0 and "Graph break" in loud.stderr, loud.stderr[:2000]
