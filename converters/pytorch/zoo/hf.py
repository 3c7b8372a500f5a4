"""Hugging Face transformers: named presets built from config classes, and ``hf:TYPE``."""

from __future__ import annotations

import os
import stat
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from irbridge.atomic import check_folder_entries, not_a_file

from . import common
from .common import (
    FAMILY_HF,
    ModelEntry,
    ModelTooBig,
    ZooError,
    _first_line,
    _mem_available,
    _suggest,
    check_torch_archive,
)

# --------------------------------------------------------------------------------------------
# Hugging Face transformers
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _HFPreset:
    config_class: str
    model_class: str
    config_kwargs: Mapping[str, Any] = field(default_factory=dict)
    image_size: int | None = None


_LLAMA_3 = {
    "vocab_size": 128256,
    "max_position_embeddings": 8192,
    "rope_theta": 500000.0,
    "rms_norm_eps": 1e-5,
    "num_key_value_heads": 8,
}

_TINY = {
    "hidden_size": 64,
    "intermediate_size": 176,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 1000,
    "max_position_embeddings": 512,
}

# name -> (hub id, description, preset). Encoder-only presets are the bare encoder (the model
# the seed FLOP tables measure, e.g. bert-base = 21.74 GFLOPs at seq 128); generative and
# vision presets include the head their hub checkpoint declares (LM head, classifier, detector).
_HF_PRESETS: dict[str, tuple[str | None, str, _HFPreset]] = {
    "bert-base-uncased": (
        "bert-base-uncased",
        "text-encoder",
        _HFPreset("BertConfig", "BertModel"),
    ),
    "bert-large-uncased": (
        "bert-large-uncased",
        "text-encoder",
        _HFPreset(
            "BertConfig",
            "BertModel",
            {
                "hidden_size": 1024,
                "num_hidden_layers": 24,
                "num_attention_heads": 16,
                "intermediate_size": 4096,
            },
        ),
    ),
    "bert-tiny": (
        "google/bert_uncased_L-2_H-128_A-2",
        "text-encoder",
        _HFPreset(
            "BertConfig",
            "BertModel",
            {
                "hidden_size": 128,
                "num_hidden_layers": 2,
                "num_attention_heads": 2,
                "intermediate_size": 512,
            },
        ),
    ),
    "distilbert-base-uncased": (
        "distilbert-base-uncased",
        "text-encoder",
        _HFPreset("DistilBertConfig", "DistilBertModel"),
    ),
    "roberta-base": (
        "FacebookAI/roberta-base",
        "text-encoder",
        _HFPreset(
            "RobertaConfig",
            "RobertaModel",
            {
                "vocab_size": 50265,
                "max_position_embeddings": 514,
                "type_vocab_size": 1,
                "layer_norm_eps": 1e-5,
                "pad_token_id": 1,
                "bos_token_id": 0,
                "eos_token_id": 2,
            },
        ),
    ),
    "gpt2": ("openai-community/gpt2", "causal-lm", _HFPreset("GPT2Config", "GPT2LMHeadModel")),
    "gpt2-medium": (
        "openai-community/gpt2-medium",
        "causal-lm",
        _HFPreset("GPT2Config", "GPT2LMHeadModel", {"n_embd": 1024, "n_layer": 24, "n_head": 16}),
    ),
    "gpt2-large": (
        "openai-community/gpt2-large",
        "causal-lm",
        _HFPreset("GPT2Config", "GPT2LMHeadModel", {"n_embd": 1280, "n_layer": 36, "n_head": 20}),
    ),
    "gpt2-xl": (
        "openai-community/gpt2-xl",
        "causal-lm",
        _HFPreset("GPT2Config", "GPT2LMHeadModel", {"n_embd": 1600, "n_layer": 48, "n_head": 25}),
    ),
    "t5-small": (
        "google-t5/t5-small",
        "seq2seq-lm",
        _HFPreset(
            "T5Config",
            "T5ForConditionalGeneration",
            {
                "vocab_size": 32128,
                "d_model": 512,
                "d_kv": 64,
                "d_ff": 2048,
                "num_layers": 6,
                "num_heads": 8,
            },
        ),
    ),
    "t5-base": (
        "google-t5/t5-base",
        "seq2seq-lm",
        _HFPreset(
            "T5Config",
            "T5ForConditionalGeneration",
            {
                "vocab_size": 32128,
                "d_model": 768,
                "d_kv": 64,
                "d_ff": 3072,
                "num_layers": 12,
                "num_heads": 12,
            },
        ),
    ),
    "facebook/bart-base": (
        "facebook/bart-base",
        "seq2seq-lm",
        _HFPreset(
            "BartConfig",
            "BartForConditionalGeneration",
            {
                "d_model": 768,
                "encoder_layers": 6,
                "decoder_layers": 6,
                "encoder_attention_heads": 12,
                "decoder_attention_heads": 12,
                "encoder_ffn_dim": 3072,
                "decoder_ffn_dim": 3072,
            },
        ),
    ),
    "google/vit-base-patch16-224": (
        "google/vit-base-patch16-224",
        "image-classification",
        _HFPreset("ViTConfig", "ViTForImageClassification", {"num_labels": 1000}),
    ),
    "facebook/detr-resnet-50": (
        "facebook/detr-resnet-50",
        "object-detection",
        # No timm (not installed) and no pretrained backbone: the ResNet-50 backbone is built
        # from transformers' own ResNetConfig, so nothing is fetched. 91 COCO labels as on
        # the hub (41.52 M parameters). DETR's processor resizes the short side to 800: the
        # default input is the square 800x800 form of that.
        _HFPreset(
            "DetrConfig",
            "DetrForObjectDetection",
            {"use_timm_backbone": False, "use_pretrained_backbone": False, "num_labels": 91},
            image_size=800,
        ),
    ),
    "llama-tiny": (
        None,
        "causal-lm",
        _HFPreset(
            "LlamaConfig",
            "LlamaForCausalLM",
            {
                "hidden_size": 64,
                "intermediate_size": 176,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "vocab_size": 1000,
                "max_position_embeddings": 512,
            },
        ),
    ),
    "llama-2-7b": (
        "meta-llama/Llama-2-7b-hf",
        "causal-lm",
        _HFPreset(
            "LlamaConfig",
            "LlamaForCausalLM",
            {
                "hidden_size": 4096,
                "intermediate_size": 11008,
                "num_hidden_layers": 32,
                "num_attention_heads": 32,
                "num_key_value_heads": 32,
                "vocab_size": 32000,
                "max_position_embeddings": 4096,
                "rms_norm_eps": 1e-5,
            },
        ),
    ),
    "llama-3-8b": (
        "meta-llama/Meta-Llama-3-8B",
        "causal-lm",
        _HFPreset(
            "LlamaConfig",
            "LlamaForCausalLM",
            {
                **_LLAMA_3,
                "hidden_size": 4096,
                "intermediate_size": 14336,
                "num_hidden_layers": 32,
                "num_attention_heads": 32,
            },
        ),
    ),
    "llama-3.2-1b": (
        "meta-llama/Llama-3.2-1B",
        "causal-lm",
        _HFPreset(
            "LlamaConfig",
            "LlamaForCausalLM",
            {
                **_LLAMA_3,
                "hidden_size": 2048,
                "intermediate_size": 8192,
                "num_hidden_layers": 16,
                "num_attention_heads": 32,
                "head_dim": 64,
                "tie_word_embeddings": True,
                "max_position_embeddings": 131072,
                "rope_scaling": {
                    "rope_type": "llama3",
                    "factor": 32.0,
                    "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 8192,
                },
            },
        ),
    ),
    "llama-3-70b": (
        "meta-llama/Meta-Llama-3-70B",
        "causal-lm",
        _HFPreset(
            "LlamaConfig",
            "LlamaForCausalLM",
            {
                **_LLAMA_3,
                "hidden_size": 8192,
                "intermediate_size": 28672,
                "num_hidden_layers": 80,
                "num_attention_heads": 64,
            },
        ),
    ),
    "mistral-7b": (
        "mistralai/Mistral-7B-v0.1",
        "causal-lm",
        _HFPreset("MistralConfig", "MistralForCausalLM"),
    ),
    # Small configs of the other decoder families (for --phase tests and sweeps).
    "mistral-tiny": (None, "causal-lm", _HFPreset("MistralConfig", "MistralForCausalLM", _TINY)),
    "qwen2-tiny": (None, "causal-lm", _HFPreset("Qwen2Config", "Qwen2ForCausalLM", _TINY)),
    "gemma-tiny": (
        None,
        "causal-lm",
        _HFPreset("GemmaConfig", "GemmaForCausalLM", {**_TINY, "head_dim": 16}),
    ),
    "mixtral-tiny": (
        None,
        "causal-lm",
        _HFPreset(
            "MixtralConfig",
            "MixtralForCausalLM",
            {**_TINY, "intermediate_size": 96, "num_local_experts": 4, "num_experts_per_tok": 2},
        ),
    ),
    "mixtral-8x7b": (
        "mistralai/Mixtral-8x7B-v0.1",
        "causal-lm",
        _HFPreset("MixtralConfig", "MixtralForCausalLM"),
    ),
}

_HF_TASKS: dict[str, str] = {
    "base": "AutoModel",
    "causal-lm": "AutoModelForCausalLM",
    "masked-lm": "AutoModelForMaskedLM",
    "seq2seq-lm": "AutoModelForSeq2SeqLM",
    "sequence-classification": "AutoModelForSequenceClassification",
    "image-classification": "AutoModelForImageClassification",
    "object-detection": "AutoModelForObjectDetection",
    "speech-seq2seq": "AutoModelForSpeechSeq2Seq",
    "image-text-to-text": "AutoModelForImageTextToText",
    "universal-segmentation": "AutoModelForUniversalSegmentation",
    "semantic-segmentation": "AutoModelForSemanticSegmentation",
    "depth-estimation": "AutoModelForDepthEstimation",
    "token-classification": "AutoModelForTokenClassification",
    "question-answering": "AutoModelForQuestionAnswering",
    "audio-classification": "AutoModelForAudioClassification",
    "ctc": "AutoModelForCTC",
}


def _hf_entries() -> list[ModelEntry]:
    entries = []
    for name, (hub_id, task, preset) in _HF_PRESETS.items():
        args = ", ".join(f"{k}={v!r}" for k, v in preset.config_kwargs.items())
        aliases = (name.split("/", 1)[1],) if "/" in name else ()
        entries.append(
            ModelEntry(
                name=name,
                family=FAMILY_HF,
                source=f"transformers.{preset.model_class}({preset.config_class}({args}))",
                task=task,
                image_size=preset.image_size,
                hub_id=hub_id,
                aliases=aliases,
                spec=preset,
            )
        )
    return entries


def _hf_offline() -> bool:
    truthy = {"1", "true", "yes", "on"}
    return any(
        os.environ.get(v, "").strip().lower() in truthy
        for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def _hf_prepare(config: Any) -> None:
    """Config tweaks for a static inference graph: no key/value cache in the outputs; a
    model with per-language adapters (X-MOD) runs its config's first language when the
    config names no default (transformers refuses to run it otherwise)."""
    if hasattr(config, "use_cache"):
        config.use_cache = False
    languages = getattr(config, "languages", None)
    if hasattr(config, "default_language") and config.default_language is None \
            and isinstance(languages, list | tuple) and languages:
        config.default_language = languages[0]


def _check_memory(name: str, num_params: int) -> None:
    dtype = torch.get_default_dtype()  # the dtype it is built in (see zoo.builder)
    need = num_params * dtype.itemsize
    avail = _mem_available()
    if avail is not None and need > 0.8 * avail:
        raise ModelTooBig(
            f"{name} has {num_params / 1e9:.2f}e9 parameters ({need / 2**30:.1f} GiB in "
            f"{str(dtype).removeprefix('torch.')}), more than the {avail / 2**30:.1f} GiB of memory available",
            hint="build it with device='meta' (CLI --meta) to capture without weights",
        )


def _hf_from_config(name: str, model_cls: Any, config: Any) -> nn.Module:
    _hf_prepare(config)
    if torch.get_default_device().type != "meta":
        with torch.device("meta"):
            probe = model_cls(config)
        _check_memory(name, sum(p.numel() for p in probe.parameters()))
        del probe
    return typing.cast(nn.Module, model_cls(config))


_HF_SAFE: dict[str, Any] = {"trust_remote_code": False, "weights_only": True}
"""Stated, not left to defaults: no code from the hub repo, and .bin weights are loaded
weights-only (safetensors files never run code)."""


def _hf_pretrained(name: str, hub_id: str | None, model_cls: Any) -> nn.Module:
    if hub_id is None:
        raise ZooError(
            f"{name} is a config-only preset with no published weights",
            hint="leave out --pretrained, or pass a local state_dict with --weights FILE",
        )
    try:
        model = model_cls.from_pretrained(hub_id, local_files_only=True, **_HF_SAFE)
    except Exception as exc:
        if _hf_offline() or not common._reachable("huggingface.co"):
            why = (
                "the hub is disabled (HF_HUB_OFFLINE)"
                if _hf_offline()
                else "huggingface.co cannot be reached"
            )
            raise ZooError(
                f"pretrained weights for {name} ({hub_id}) are not in the local Hugging Face "
                f"cache and {why}",
                hint="pass a local state_dict with --weights FILE, or leave out --pretrained",
            ) from exc
        try:
            model = model_cls.from_pretrained(hub_id, **_HF_SAFE)
        except Exception as exc2:
            raise ZooError(
                f"could not fetch pretrained weights for {name} ({hub_id}): {_first_line(exc2)}"
            ) from exc2
    _hf_prepare(model.config)
    return typing.cast(nn.Module, model)


def _make_hf(entry: ModelEntry, pretrained: bool) -> nn.Module:
    import transformers

    preset: _HFPreset = entry.spec
    model_cls = getattr(transformers, preset.model_class)
    if pretrained:
        return _hf_pretrained(entry.name, entry.hub_id, model_cls)
    config = getattr(transformers, preset.config_class)(**dict(preset.config_kwargs))
    return _hf_from_config(entry.name, model_cls, config)


def _hf_auto_entry(name: str) -> ModelEntry:
    """``hf:MODEL_TYPE[:TASK]``: any architecture from its default config."""
    parts = name.split(":")
    model_type = parts[1].strip() if len(parts) > 1 else ""
    task = parts[2].strip() if len(parts) > 2 else "base"
    if len(parts) > 3 or not model_type:
        raise ZooError(
            f"bad Hugging Face spec {name!r}; expected hf:MODEL_TYPE or hf:MODEL_TYPE:TASK"
        )
    if task not in _HF_TASKS:
        raise ZooError(f"unknown task {task!r} in {name!r}; use one of {', '.join(_HF_TASKS)}")
    from transformers import CONFIG_MAPPING

    known = list(CONFIG_MAPPING.keys())
    if model_type not in known:
        close = _suggest(model_type, known)
        raise ZooError(
            f"unknown transformers model type {model_type!r} in {name!r}"
            + (f"; did you mean: {close}?" if close else "")
        )
    return ModelEntry(
        name=name,
        family=FAMILY_HF,
        source=f"transformers.{_HF_TASKS[task]}.from_config(AutoConfig.for_model({model_type!r}))",
        task=task,
        spec=(model_type, _HF_TASKS[task]),
    )


def _has_timm() -> bool:
    import importlib.util

    return importlib.util.find_spec("timm") is not None


def _make_hf_auto(entry: ModelEntry, pretrained: bool) -> nn.Module:
    import transformers

    model_type, auto_name = entry.spec
    if pretrained:
        raise ZooError(
            f"{entry.name} names an architecture, not a checkpoint; there are no pretrained "
            "weights to fetch",
            hint="use a preset name, or pass a local state_dict with --weights FILE",
        )
    auto_cls = getattr(transformers, auto_name)
    try:
        config = transformers.AutoConfig.for_model(model_type)
        backbone = getattr(config, "backbone_config", None)
        if getattr(backbone, "model_type", None) == "timm_backbone" and not _has_timm():
            # DETR and kin default to a timm ResNet-50; without timm, transformers' own
            # ResNet (the same layers) stands in, as the detr-resnet-50 preset does
            config = transformers.AutoConfig.for_model(
                model_type, use_timm_backbone=False, use_pretrained_backbone=False)
        _hf_prepare(config)
    except Exception as exc:
        raise ZooError(f"could not build {entry.name}: {_first_line(exc)}") from exc
    _check_auto_class(entry.name, model_type, auto_name, config)
    classes = auto_cls._model_mapping[type(config)]
    if isinstance(classes, list | tuple) and getattr(config, "architectures", None) is None:
        # several classes for one config (Funnel: FunnelModel, FunnelBaseModel): the auto
        # class picks by config.architectures, and iterates None when it is unset
        config.architectures = []   # no preference: the first, its default
    try:
        if torch.get_default_device().type != "meta":
            with torch.device("meta"):
                probe = auto_cls.from_config(config)
            _check_memory(entry.name, sum(p.numel() for p in probe.parameters()))
            del probe
        return typing.cast(nn.Module, auto_cls.from_config(config))
    except ZooError:
        raise
    except Exception as exc:
        named = " / ".join(c.__name__ for c in (classes if isinstance(classes, list | tuple)
                                                else [classes]))
        raise ZooError(
            f"could not build {entry.name}: transformers' own {named} fails on "
            f"the default {type(config).__name__}: {_first_line(exc)}") from exc


def _check_auto_class(name: str, model_type: str, auto_name: str, config: Any) -> None:
    """Refuse a model type the task's auto class has no class for, naming the tasks that do
    (pop2piano has no base model, only a seq2seq one; speech-encoder-decoder none at all)."""
    import transformers

    def covers(auto: str) -> bool:
        return type(config) in getattr(transformers, auto)._model_mapping

    if covers(auto_name):
        return
    tasks = [task for task, auto in _HF_TASKS.items() if covers(auto)]
    raise ZooError(
        f"transformers' {auto_name} has no class for {model_type} ({type(config).__name__})"
        + (f"; the task{'s' if len(tasks) > 1 else ''} {', '.join(tasks)} {'have' if len(tasks) > 1 else 'has'} one"
           if tasks else f"; no task hf:TYPE:TASK offers ({', '.join(_HF_TASKS)}) has one either"),
        hint=(f"use hf:{model_type}:{tasks[0]}" if tasks else
              "use a factory that builds the model (path/to/file.py:Name)"),
    )


# --------------------------------------------------------------------------------------------
# A local Hugging Face model folder (save_pretrained, a downloaded hub snapshot)
# --------------------------------------------------------------------------------------------

HF_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                   "pytorch_model.bin.index.json")
"""The weight files ``from_pretrained`` reads from a folder; without any, the folder's config
is built with random weights."""


CONFIG_LIMIT = 16 << 20
"""config.json files are kilobytes; a larger one is not read (transformers reads it whole)."""


def read_json_object(path: Path, what: str, *, kind: str = "config") -> dict[str, Any]:
    """A small JSON object file of a model folder (`what`: "Hugging Face config", "shard
    index" ...): at most CONFIG_LIMIT bytes, each problem one line naming the file."""
    import json

    if not path.is_file():
        raise ZooError(f"{path}: {not_a_file(path, kind + ' file')}")
    size = path.stat().st_size
    if size > CONFIG_LIMIT:
        raise ZooError(f"{path}: {size:,} bytes, more than a {what} ({CONFIG_LIMIT:,} at most)")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ZooError(f"{path}: not a readable JSON {kind} ({_first_line(exc)})") from exc
    except RecursionError as exc:
        raise ZooError(f"{path}: not a readable JSON {kind} (nested too deeply)") from exc
    if not isinstance(raw, dict):
        raise ZooError(f"{path}: not a JSON object, not a {what}")
    return raw


def hf_folder_target(name: str, trust: bool) -> common._Target:
    """A folder holding ``config.json`` (and usually weights): the architecture its config
    names (``architectures[0]`` when transformers has that class, else the base model) with
    the folder's weights, read with ``local_files_only`` and weights-only loads. A config that
    needs the folder's own Python (``auto_map``) is refused unless ``trust``."""
    folder = Path(name).expanduser()
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise ZooError(f"{name}: a folder without config.json, not a Hugging Face model folder")
    raw = read_json_object(config_file, "Hugging Face config")
    remote = "auto_map" in raw
    if remote and not trust:
        raise ZooError(
            f"refusing to build {name}: its config.json names Python code in the folder "
            "(auto_map); building it would run that code",
            hint="pass --trust-checkpoint (trust_checkpoint=True) if you trust where it came from",
        )
    check_folder_entries(folder, "the model folder")
    weights = next((f for f in HF_WEIGHT_FILES if (folder / f).is_file()), None)
    if weights is not None and weights.endswith(".index.json"):
        for shard in _check_shard_index(folder / weights):
            if shard.suffix == ".bin":
                check_torch_archive(shard)
    elif weights is not None and weights.endswith(".bin"):
        check_torch_archive(folder / weights)

    def make(pretrained: bool) -> tuple[nn.Module, Any]:
        import transformers

        if pretrained:
            raise ZooError(f"{name} is a local model folder; --pretrained does not apply to it "
                           "(its own weights are used)")
        options = {"local_files_only": True, "trust_remote_code": remote and trust}
        try:
            config = transformers.AutoConfig.from_pretrained(str(folder), **options)
        except Exception as exc:
            raise ZooError(f"{name}: cannot read its config: {_first_line(exc)}") from exc
        cls = _folder_class(config, remote)

        def fresh() -> nn.Module:  # the architecture with random weights
            if cls is transformers.AutoModel:
                return typing.cast(nn.Module, cls.from_config(config, trust_remote_code=remote))
            return typing.cast(nn.Module, cls(config))

        _hf_prepare(config)
        if torch.get_default_device().type != "meta":
            with torch.device("meta"):
                probe = fresh()
            _check_memory(name, sum(p.numel() for p in probe.parameters()))
            del probe
        if weights is None or torch.get_default_device().type == "meta":
            return fresh(), None
        log = transformers.utils.logging
        bars, verbosity = log.is_progress_bar_enabled(), log.get_verbosity()
        log.disable_progress_bar()  # no tqdm bar, no multi-line load report: one line below
        log.set_verbosity_error()
        try:
            model, info = cls.from_pretrained(str(folder), config=config, weights_only=True,
                                              output_loading_info=True, **options)
        except Exception as exc:
            raise ZooError(f"{name}: cannot load its weights ({weights}): "
                           f"{_first_line(exc)}") from exc
        finally:
            log.set_verbosity(verbosity)
            if bars:
                log.enable_progress_bar()
        _warn_loading(name, type(model).__name__, info)
        _hf_prepare(model.config)
        return typing.cast(nn.Module, model), None

    return common._Target(
        name=name, family=FAMILY_HF, source=str(folder),
        task="hf folder" + ("" if weights else " (config only: random weights)"), make=make,
        own_code=remote and trust, weights_from=str(folder) if weights else None)


def _check_shard_index(index: Path) -> list[Path]:
    """A sharded checkpoint's index names its shard files: each must be a relative path
    inside the folder (transformers joins it to the folder as given) to a regular file.
    Returns their paths."""
    weight_map = read_json_object(index, "shard index", kind="shard index").get("weight_map")
    if not isinstance(weight_map, dict):
        raise ZooError(f"{index}: no weight_map object, not a shard index")
    shards: list[Path] = []
    for shard in sorted({str(v) for v in weight_map.values()}):
        parts = Path(shard).parts
        if not shard or "\0" in shard or Path(shard).is_absolute() or ".." in parts:
            raise ZooError(f"{index}: shard {shard!r} is not a relative path inside the "
                           "model folder")
        path = index.parent / shard
        try:
            mode = os.stat(path).st_mode
        except OSError as exc:
            raise ZooError(f"{index}: shard {shard!r}: {exc.strerror or 'cannot read it'}"
                           ) from exc
        if not stat.S_ISREG(mode):
            raise ZooError(f"{index}: shard {shard!r} is not a regular file")
        shards.append(path)
    return shards


def _warn_loading(name: str, cls: str, info: Mapping[str, Any]) -> None:
    """One warning line per kind of mismatch between the folder's tensors and the class:
    parameters the folder lacks (they keep random values), tensors the class does not use."""
    import warnings

    def listed(keys: Any) -> str:
        keys = sorted(str(k) for k in keys)
        return ", ".join(keys[:4]) + (f" and {len(keys) - 4} more" if len(keys) > 4 else "")

    missing = list(info.get("missing_keys") or [])
    if missing:
        warnings.warn(f"{name}: {len(missing)} {cls} weights are not in the folder and keep "
                      f"random values: {listed(missing)}", stacklevel=2)
    unused = list(info.get("unexpected_keys") or [])
    if unused:
        warnings.warn(f"{name}: {len(unused)} tensors of the folder are not used by {cls}: "
                      f"{listed(unused)}", stacklevel=2)
    mismatched = list(info.get("mismatched_keys") or [])
    if mismatched:
        warnings.warn(f"{name}: {len(mismatched)} tensors of the folder have other shapes "
                      f"than {cls} expects and were not loaded: "
                      f"{listed(k[0] if isinstance(k, tuple) else k for k in mismatched)}",
                      stacklevel=2)


def _folder_class(config: Any, remote: bool) -> Any:
    """The class a folder's config names, when transformers has it; else the auto class for
    the config (the base model)."""
    import transformers

    for arch in getattr(config, "architectures", None) or []:
        cls = getattr(transformers, str(arch), None) if not remote else None
        if isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel):
            return cls
    return transformers.AutoModel
