"""A local Hugging Face model folder (`save_pretrained`, a downloaded hub snapshot) as the
model: `zoo.build("path/to/folder")` builds the class its config names with the folder's
weights (safetensors, or .bin loaded weights-only), nothing downloaded and no code from the
folder run without trust. Captures are verified against the model that was saved."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from irbridge.cli.main import app
from irbridge.converters.pytorch import capture, verify, zoo
from irbridge.converters.pytorch.zoo import ZooError
from irbridge.errors import IrbridgeError

transformers = pytest.importorskip("transformers")


def _saved(folder: Path) -> torch.nn.Module:
    config = transformers.BertConfig(num_hidden_layers=1, hidden_size=32, num_attention_heads=2,
                                     intermediate_size=64, vocab_size=100, num_labels=3)
    torch.manual_seed(7)
    model = transformers.BertForSequenceClassification(config).eval()
    model.save_pretrained(folder)
    return model


def test_a_folder_builds_its_class_with_its_weights(tmp_path: Path) -> None:
    original = _saved(tmp_path / "bert")
    built = zoo.build(str(tmp_path / "bert"))
    assert type(built.module) is transformers.BertForSequenceClassification
    assert built.weights == f"file {tmp_path / 'bert'}"
    saved, loaded = original.state_dict(), built.module.state_dict()
    assert saved.keys() == loaded.keys()
    assert all(torch.equal(saved[k], loaded[k]) for k in saved)  # not seed-0 random weights
    result = capture(built.module, built.args, built.kwargs, frontend="export")
    report = verify(result, original)  # against the model that was saved
    assert report.passed, report


def test_a_config_only_folder_builds_random_weights(tmp_path: Path) -> None:
    _saved(tmp_path / "bert")
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.json").write_text((tmp_path / "bert" / "config.json").read_text())
    built = zoo.build(str(tmp_path / "cfg"))
    assert type(built.module) is transformers.BertForSequenceClassification
    assert built.weights == "random (seed 0)"


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


def test_pickled_weights_in_a_folder_load_weights_only(tmp_path: Path) -> None:
    folder = tmp_path / "bert"
    _saved(folder)
    (folder / "model.safetensors").unlink()
    marker = tmp_path / "PWNED"
    torch.save({"bert.embeddings.word_embeddings.weight": _Payload(marker)},
               folder / "pytorch_model.bin")
    with pytest.raises(ZooError, match=r"cannot load its weights \(pytorch_model.bin\)"):
        zoo.build(str(folder))
    assert not marker.exists()


def test_a_folder_whose_config_names_code_needs_trust(tmp_path: Path) -> None:
    folder = tmp_path / "custom"
    _saved(folder)
    marker = tmp_path / "PWNED"
    (folder / "modeling_evil.py").write_text(f"import os\nos.system('touch {marker}')\n")
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": "modeling_evil.EvilConfig",
                          "AutoModel": "modeling_evil.EvilModel"}
    (folder / "config.json").write_text(json.dumps(config))
    result = CliRunner().invoke(app, ["convert", str(folder), "-o", str(tmp_path / "m.irb")])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        f"error: refusing to build {folder}: its config.json names Python code in the folder "
        "(auto_map); building it would run that code (hint: pass --trust-checkpoint "
        "(trust_checkpoint=True) if you trust where it came from)"]
    assert not marker.exists() and not (tmp_path / "m.irb").exists()


@pytest.mark.parametrize("content,message", [
    (None, "a folder without config.json, not a Hugging Face model folder"),
    ("{not json", "config.json: not a readable JSON config"),
    ("[1, 2]", "config.json: not a JSON object"),
    ("[" * 100_000 + "]" * 100_000, r"config.json: not a readable JSON config \(nested too "),
    ('{"model_type": "no-such-type"}', "cannot read its config"),
    (" " * (16 << 20) + "{}", "more than a Hugging Face config"),
])
def test_a_bad_folder_is_one_line(tmp_path: Path, content: str | None, message: str) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    if content is not None:
        (folder / "config.json").write_text(content)
    with pytest.raises(ZooError, match=message):
        zoo.build(str(folder))


def test_analyze_and_convert_take_a_folder(tmp_path: Path) -> None:
    _saved(tmp_path / "bert")
    runner = CliRunner()
    result = runner.invoke(app, ["analyze", str(tmp_path / "bert"), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert "Loading weights" not in result.stderr  # transformers' progress bar stays off
    result = runner.invoke(app, ["convert", str(tmp_path / "bert"), "-o", str(tmp_path / "m.irb")])
    assert result.exit_code == 0, result.output
    assert f"weights file {tmp_path / 'bert'}" in result.stdout + result.stderr


def test_a_folder_takes_phases_and_sweeps(tmp_path: Path) -> None:
    config = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=100,
                                     n_positions=64, bos_token_id=0, eos_token_id=0)
    transformers.GPT2LMHeadModel(config).save_pretrained(tmp_path / "gpt")
    runner = CliRunner()
    result = runner.invoke(app, ["analyze", str(tmp_path / "gpt"), "--phase", "decode",
                                 "--kv-len", "16", "--format", "json"])
    assert result.exit_code == 0, result.output
    from irbridge import sweep as sw

    grid = sw.parse_grid(models=str(tmp_path / "gpt"), hardware="h100-sxm", batch="1",
                         seq_len="16", phase="none", dtype="bf16", tp="1")
    assert grid.size == 1


def test_weights_the_folder_lacks_are_one_warning_line(tmp_path: Path) -> None:
    """A base model's folder whose config names a head class: transformers keeps the head
    random and prints a multi-line report; irbridge says it in one warning line."""
    config = transformers.BertConfig(num_hidden_layers=1, hidden_size=32, num_attention_heads=2,
                                     intermediate_size=64, vocab_size=100)
    transformers.BertModel(config).save_pretrained(tmp_path / "base")
    saved = json.loads((tmp_path / "base" / "config.json").read_text())
    saved["architectures"] = ["BertForSequenceClassification"]
    (tmp_path / "base" / "config.json").write_text(json.dumps(saved))
    result = CliRunner().invoke(app, ["convert", str(tmp_path / "base"), "-o",
                                      str(tmp_path / "m.irb")])
    assert result.exit_code == 0, result.output
    warned = [ln for ln in result.stderr.splitlines() if ln.startswith("warning: ")]
    assert warned == [f"warning: {tmp_path / 'base'}: 2 BertForSequenceClassification weights "
                      "are not in the folder and keep random values: classifier.bias, "
                      "classifier.weight"]
    assert "LOAD REPORT" not in result.stderr and "\x1b[" not in result.stderr


_CUSTOM_CONFIG = '''from transformers import PretrainedConfig


class TinyConfig(PretrainedConfig):
    model_type = "tinycustom"

    def __init__(self, hidden=16, **kwargs):
        self.hidden = hidden
        super().__init__(**kwargs)
'''

_CUSTOM_MODEL = '''import torch
from transformers import PreTrainedModel

from .configuration_tiny import TinyConfig


class TinyModel(PreTrainedModel):
    config_class = TinyConfig

    def __init__(self, config):
        super().__init__(config)
        self.lin = torch.nn.Linear(config.hidden, config.hidden)
        self.post_init()

    def forward(self, input_values):
        return self.lin(input_values).relu()
'''


def test_a_trusted_folder_with_its_own_code_builds(tmp_path: Path) -> None:
    """With the trust flag the folder's own classes are used (trust_remote_code); an input
    its config says nothing about takes its shape from --input-shape."""
    folder = tmp_path / "custom"
    folder.mkdir()
    (folder / "configuration_tiny.py").write_text(_CUSTOM_CONFIG)
    (folder / "modeling_tiny.py").write_text(_CUSTOM_MODEL)
    (folder / "config.json").write_text(json.dumps({
        "model_type": "tinycustom", "hidden": 16, "architectures": ["TinyModel"],
        "auto_map": {"AutoConfig": "configuration_tiny.TinyConfig",
                     "AutoModel": "modeling_tiny.TinyModel"}}))
    with pytest.raises(ZooError, match="cannot derive the audio input 'input_values'"):
        zoo.build(str(folder), trust_checkpoint=True)
    built = zoo.build(str(folder), trust_checkpoint=True, input_shape=(2, 16))
    assert type(built.module).__name__ == "TinyModel"
    assert [tuple(a.shape) for a in built.args] == [(2, 16)]
    result = capture(built.module, built.args, built.kwargs, frontend="export")
    assert verify(result, built.module).passed


def _build_bounded(folder: Path, fifo: Path) -> BaseException | None:
    """zoo.build(folder) in a thread, given 60 s: a read blocked on the FIFO is released by
    opening its other end, and the test fails as a hang."""
    import threading

    outcome: list[BaseException | None] = []

    def work() -> None:
        try:
            zoo.build(str(folder))
            outcome.append(None)
        except BaseException as exc:  # handed to the test
            outcome.append(exc)

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(60)
    if thread.is_alive():
        with open(fifo, "wb"):  # unblocks the reader
            pass
        thread.join(10)
        pytest.fail(f"zoo.build blocked on {fifo.name}")
    return outcome[0]


def test_a_sharded_folder_loads_and_its_index_is_checked(tmp_path: Path) -> None:
    folder = tmp_path / "bert"
    original = _saved(folder)
    for old in folder.glob("model*.safetensors"):
        old.unlink()
    original.save_pretrained(folder, max_shard_size="40KB")
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 1
    built = zoo.build(str(folder))
    saved, loaded = original.state_dict(), built.module.state_dict()
    assert all(torch.equal(saved[k], loaded[k]) for k in saved)

    # a shard named outside the folder, or absolute, is refused before anything is read
    for bad in ("../elsewhere.safetensors", "/etc/passwd"):
        forged = dict(index, weight_map={k: bad for k in index["weight_map"]})
        (folder / "model.safetensors.index.json").write_text(json.dumps(forged))
        with pytest.raises(ZooError, match="is not a relative path inside the model folder"):
            zoo.build(str(folder))
    # a shard in a sub-folder that is a FIFO: refused, not a read that blocks forever
    (folder / "sub").mkdir()
    os.mkfifo(folder / "sub" / "s.safetensors")
    forged = dict(index, weight_map={k: "sub/s.safetensors" for k in index["weight_map"]})
    (folder / "model.safetensors.index.json").write_text(json.dumps(forged))
    error = _build_bounded(folder, folder / "sub" / "s.safetensors")
    assert isinstance(error, ZooError) and "is not a regular file" in str(error)


@pytest.mark.parametrize("entry", ["model-00002-of-00002.safetensors", "generation_config.json"])
def test_a_fifo_in_a_model_folder_is_refused_not_read(tmp_path: Path, entry: str) -> None:
    """transformers opens files of the folder by name (weights, shards, generation config):
    any entry that is not a regular file or a folder is refused before anything is read."""
    folder = tmp_path / "bert"
    _saved(folder)
    os.mkfifo(folder / entry)
    error = _build_bounded(folder, folder / entry)
    assert isinstance(error, IrbridgeError)
    assert str(error) == f"{folder / entry}: not a regular file (a FIFO); refusing to read " \
                         "the model folder"
