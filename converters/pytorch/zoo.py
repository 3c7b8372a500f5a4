"""The PyTorch model zoo behind ``irbridge convert MODEL`` and ``irbridge models``.

A model is named in one of these ways:

* a registered name (see :func:`list_models`): a torchvision architecture (``resnet18``,
  ``fasterrcnn_resnet50_fpn``, ...), a Hugging Face preset built from its config class
  (``bert-base-uncased``, ``gpt2``, ``llama-3-70b``, ...) or an ultralytics YAML name
  (``yolov8n``, ``yolo11s-seg``, ...);
* ``hf:MODEL_TYPE`` or ``hf:MODEL_TYPE:TASK``: any transformers architecture built from the
  default config of that model type (``hf:roberta``, ``hf:gpt_neox:causal-lm``);
* ``path/to/file.py:Name`` or ``package.module:Name``: a user's ``nn.Module`` class
  (instantiated with no arguments) or factory (called with no arguments; it may return a
  module or ``(module, example_inputs)``);
* ``path/to/model.pt``: a pickled full model (also an ultralytics checkpoint). Unpickling runs
  code from the file, so it is refused unless ``trust_checkpoint=True``;
* ``path/to/custom.yaml``: an ultralytics model YAML.

Nothing is downloaded unless ``pretrained=True`` is asked for: weights are random, drawn after
``torch.manual_seed(0)`` so that two builds are identical, or come from a local state_dict
(``weights_file``). ``device="meta"`` builds without allocating weights.

Example inputs are derived from the parameters of the model's ``forward`` (their names,
annotations and defaults) and from the model itself (its config, its first layer), never
from the model's name. :func:`check_inputs` runs one trial forward.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
import hashlib
import importlib
import importlib.util
import inspect
import os
import re
import socket
import sys
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from irbridge.errors import CaptureError

__all__ = [
    "DEFAULT_BATCH",
    "DEFAULT_SEQ_LEN",
    "FAMILIES",
    "MODEL_SPEC_HELP",
    "SEED",
    "BuiltModel",
    "InputSpec",
    "ModelEntry",
    "ZooError",
    "build",
    "check_inputs",
    "derive_inputs",
    "entry_to_dict",
    "find_model",
    "list_models",
    "model_names",
]

SEED = 0
DEFAULT_BATCH = 1
DEFAULT_SEQ_LEN = 128
DEFAULT_IMAGE_SIZE = 224
DEFAULT_FRAMES = 16
"""Clip length for video models: the 16-frame clips of the Kinetics-400 recipes."""

FAMILY_TV_CLS = "torchvision-classification"
FAMILY_TV_DET = "torchvision-detection"
FAMILY_TV_SEG = "torchvision-segmentation"
FAMILY_TV_VIDEO = "torchvision-video"
FAMILY_HF = "transformers"
FAMILY_YOLO = "ultralytics"
FAMILY_USER = "user"
FAMILY_CHECKPOINT = "checkpoint"

FAMILIES: tuple[str, ...] = (
    FAMILY_TV_CLS,
    FAMILY_TV_DET,
    FAMILY_TV_SEG,
    FAMILY_TV_VIDEO,
    FAMILY_HF,
    FAMILY_YOLO,
)
"""The families :func:`list_models` enumerates (user files and checkpoints are not listed)."""

MODEL_SPEC_HELP = (
    "a name from `irbridge models`; hf:MODEL_TYPE[:TASK] for any transformers architecture; "
    "path/to/file.py:ClassOrFactory or package.module:factory for your own model; "
    "path/to/model.pt (a pickled model, needs --trust-checkpoint); "
    "path/to/model.yaml (an ultralytics model YAML)"
)

CHECKPOINT_SUFFIXES = (".pt", ".pth", ".ckpt")
WEIGHTS_ONLY_SUFFIXES = (".safetensors", ".bin")


class ZooError(CaptureError):
    """A model name, model file, weights file or input request the zoo cannot satisfy."""


# --------------------------------------------------------------------------------------------
# Public data types
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelEntry:
    """One buildable model of a family, as listed by ``irbridge models``."""

    name: str
    family: str
    source: str
    """How the model is built, e.g. ``torchvision.models.resnet18(weights=None)``."""
    task: str
    image_size: int | None = None
    """Native square image side for image models, where the family states one."""
    frames: int | None = None
    """Clip length for video models."""
    hub_id: str | None = None
    """Where ``pretrained=True`` fetches weights from (a Hugging Face repo id), if anywhere."""
    aliases: tuple[str, ...] = ()
    spec: Any = field(default=None, repr=False, compare=False)
    """Family-specific build recipe (private)."""

    @property
    def input_hint(self) -> str:
        """A short description of the default input, for listings."""
        if self.family == FAMILY_HF:
            return "from forward signature"
        if self.frames is not None and self.image_size is not None:
            return f"video {self.frames}x{self.image_size}x{self.image_size}"
        if self.image_size is not None:
            return f"image {self.image_size}x{self.image_size}"
        return "image (size from the model)"


@dataclass(frozen=True)
class InputSpec:
    """One example input: which forward parameter it feeds and what it holds."""

    name: str
    kind: str
    """``tokens``, ``mask``, ``image``, ``image_list``, ``video``, ``tensor`` or ``given``."""
    shape: tuple[int, ...]
    """Shape of the tensor (of each tensor, for ``image_list``)."""
    dtype: torch.dtype
    keyword: bool
    """Passed as a keyword argument (else positionally)."""
    dims: tuple[str, ...] = ()
    """A name per dimension (``batch``, ``seq``, ``channels``, ``height``, ...), if known."""
    count: int | None = None
    """Number of tensors in the list, for ``image_list``."""
    high: int | None = None
    """Token ids are drawn from ``[0, high)``."""

    def describe(self) -> str:
        dt = str(self.dtype).removeprefix("torch.")
        shape = ", ".join(str(d) for d in self.shape)
        text = f"{dt}[{shape}]"
        if self.kind == "image_list":
            text = f"list of {self.count} x {text}"
        if self.high is not None:
            text += f" ids<{self.high}"
        return f"{self.name}={text}" if self.keyword else f"{self.name}: {text}"


@dataclass
class BuiltModel:
    """A model ready to capture: ``module(*args, **kwargs)`` runs it."""

    module: nn.Module
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    name: str
    family: str
    inputs: list[InputSpec]
    source: str = ""
    task: str = ""
    device: str = "cpu"
    weights: str = ""
    """``random (seed 0)``, ``pretrained`` or ``file PATH``."""

    @property
    def input_desc(self) -> str:
        """The inputs in one line, e.g. ``input_ids=int64[1, 128] ids<30522, ...``."""
        return ", ".join(spec.describe() for spec in self.inputs) or "(no inputs)"

    @property
    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.module.parameters())


# --------------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------------


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0].strip() if text else ""
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__


@contextlib.contextmanager
def _seeded(seed: int = SEED) -> Iterator[None]:
    """Seed torch's CPU generator for a block, restoring the caller's RNG state afterwards."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def _suggest(name: str, candidates: Sequence[str]) -> str | None:
    lowered = {c.lower(): c for c in candidates}
    matches = difflib.get_close_matches(name.lower(), list(lowered), n=4, cutoff=0.6)
    if not matches:
        # Substring matches catch prefixes such as "yolov8" or "efficientnet".
        matches = [c for c in lowered if name.lower() in c][:4]
    return ", ".join(lowered[m] for m in matches) or None


_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float": torch.float32,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float64": torch.float64,
    "fp64": torch.float64,
    "double": torch.float64,
}


def _parse_dtype(dtype: str | torch.dtype | None) -> torch.dtype | None:
    if dtype is None:
        return None
    if isinstance(dtype, torch.dtype):
        result = dtype
    else:
        key = dtype.strip().lower().removeprefix("torch.")
        if key not in _DTYPES:
            raise ZooError(
                f"unknown dtype {dtype!r}; use one of float32, float16, bfloat16, float64"
            )
        result = _DTYPES[key]
    if not result.is_floating_point:
        raise ZooError(
            f"dtype {result} is not a floating-point type; models are converted with "
            "float32, float16, bfloat16 or float64 weights"
        )
    return result


def _positive(value: int | None, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ZooError(f"{what} must be a positive integer, got {value!r}")
    return value


def _mem_available() -> int | None:
    """Bytes of memory the kernel reports as available (Linux), else None."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _reachable(host: str, port: int = 443, timeout: float = 3.0) -> bool:
    """Whether a TCP connection to host can be opened (assumed yes behind a proxy)."""
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _module_dtype(module: nn.Module) -> torch.dtype:
    for p in module.parameters():
        if p.is_floating_point():
            return p.dtype
    return torch.float32


# --------------------------------------------------------------------------------------------
# torchvision
# --------------------------------------------------------------------------------------------


def _weights_size(name: str, key: str) -> int | None:
    """Smallest square size the model's published torchvision weights use (metadata only)."""
    from torchvision import models

    try:
        weights = list(models.get_model_weights(name))
    except (ValueError, KeyError):
        return None
    sizes: list[int] = []
    for w in weights:
        keywords = getattr(w.transforms, "keywords", {}) or {}
        value = keywords.get(key)
        if isinstance(value, int):
            sizes.append(value)
        elif isinstance(value, (tuple, list)) and value:
            sizes.append(int(value[0]))
    return min(sizes) if sizes else None


def _torchvision_entries() -> dict[str, list[ModelEntry]]:
    from torchvision import models
    from torchvision.models import detection, segmentation, video

    groups: list[tuple[str, Any, str, str]] = [
        (FAMILY_TV_CLS, models, "torchvision.models.", "image-classification"),
        (FAMILY_TV_DET, detection, "torchvision.models.detection.", "object-detection"),
        (FAMILY_TV_SEG, segmentation, "torchvision.models.segmentation.", "semantic-segmentation"),
        (FAMILY_TV_VIDEO, video, "torchvision.models.video.", "video-classification"),
    ]
    out: dict[str, list[ModelEntry]] = {}
    for family, module, prefix, task in groups:
        entries = []
        for name in sorted(models.list_models(module=module)):
            image_size: int | None
            frames = None
            if family == FAMILY_TV_CLS:
                # The native resolution: the smallest crop torchvision publishes weights for
                # (299 for inception_v3, 600 for efficientnet_b7); 224 where none is stated.
                image_size = _weights_size(name, "crop_size") or DEFAULT_IMAGE_SIZE
            elif family == FAMILY_TV_SEG:
                image_size = _weights_size(name, "resize_size") or 520
            elif family == FAMILY_TV_VIDEO:
                image_size = _weights_size(name, "crop_size") or 112
                frames = DEFAULT_FRAMES
            else:
                image_size = None  # taken from the model's own transform (min_size / fixed_size)
            entries.append(
                ModelEntry(
                    name=name,
                    family=family,
                    source=f"{prefix}{name}(weights=None)",
                    task=task,
                    image_size=image_size,
                    frames=frames,
                    spec=name,
                )
            )
        out[family] = entries
    return out


def _make_torchvision(entry: ModelEntry, pretrained: bool) -> nn.Module:
    from torchvision import models

    if not pretrained:
        kwargs: dict[str, Any] = {"weights": None}
        if entry.family in (FAMILY_TV_DET, FAMILY_TV_SEG):
            kwargs["weights_backbone"] = None
        if entry.spec in ("googlenet", "inception_v3"):
            kwargs["init_weights"] = True  # today's default, stated to silence a FutureWarning
        return models.get_model(entry.spec, **kwargs)
    weights = models.get_model_weights(entry.spec).DEFAULT
    cached = Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(weights.url)
    if not cached.exists() and not _reachable("download.pytorch.org"):
        raise ZooError(
            f"pretrained weights for {entry.name} ({weights}) are not cached in {cached.parent} "
            "and download.pytorch.org cannot be reached",
            hint="pass a local state_dict with --weights FILE, or leave out --pretrained",
        )
    try:
        return models.get_model(entry.spec, weights=weights)
    except Exception as exc:
        raise ZooError(
            f"could not fetch pretrained weights for {entry.name}: {_first_line(exc)}"
        ) from exc


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
}

_HF_TASKS: dict[str, str] = {
    "base": "AutoModel",
    "causal-lm": "AutoModelForCausalLM",
    "masked-lm": "AutoModelForMaskedLM",
    "seq2seq-lm": "AutoModelForSeq2SeqLM",
    "sequence-classification": "AutoModelForSequenceClassification",
    "image-classification": "AutoModelForImageClassification",
    "object-detection": "AutoModelForObjectDetection",
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
    """Config tweaks for a static inference graph: no key/value cache in the outputs."""
    if hasattr(config, "use_cache"):
        config.use_cache = False


def _check_memory(name: str, num_params: int) -> None:
    need = num_params * 4  # built in float32 before any --dtype conversion
    avail = _mem_available()
    if avail is not None and need > 0.8 * avail:
        raise ZooError(
            f"{name} has {num_params / 1e9:.2f}e9 parameters ({need / 2**30:.1f} GiB in "
            f"float32), more than the {avail / 2**30:.1f} GiB of memory available",
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


def _hf_pretrained(name: str, hub_id: str | None, model_cls: Any) -> nn.Module:
    if hub_id is None:
        raise ZooError(
            f"{name} is a config-only preset with no published weights",
            hint="leave out --pretrained, or pass a local state_dict with --weights FILE",
        )
    try:
        model = model_cls.from_pretrained(hub_id, local_files_only=True)
    except Exception as exc:
        if _hf_offline() or not _reachable("huggingface.co"):
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
            model = model_cls.from_pretrained(hub_id)
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
        _hf_prepare(config)
        if torch.get_default_device().type != "meta":
            with torch.device("meta"):
                probe = auto_cls.from_config(config)
            _check_memory(entry.name, sum(p.numel() for p in probe.parameters()))
            del probe
        return typing.cast(nn.Module, auto_cls.from_config(config))
    except ZooError:
        raise
    except Exception as exc:
        raise ZooError(f"could not build {entry.name}: {_first_line(exc)}") from exc


# --------------------------------------------------------------------------------------------
# ultralytics
# --------------------------------------------------------------------------------------------

_YOLO_EXCLUDE = re.compile(r"^yoloe|world")
"""YOLOE and YOLO-World need a CLIP text model (a download) to build; so does any YAML using
ultralytics' ``TorchVision`` layer (pretrained torchvision weights), skipped below."""


def _ultralytics_env() -> None:
    """Keep ultralytics offline and quiet: set before its first import.

    Without YOLO_OFFLINE its import resolves two DNS names to decide whether it is online;
    YOLO_AUTOINSTALL=False stops it from pip-installing missing requirements.
    """
    os.environ.setdefault("YOLO_OFFLINE", "1")
    os.environ.setdefault("YOLO_VERBOSE", "False")
    os.environ.setdefault("YOLO_AUTOINSTALL", "False")


def _ultralytics_cfg_dir() -> Path | None:
    spec = importlib.util.find_spec("ultralytics")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "cfg" / "models"
    return path if path.is_dir() else None


def _yolo_image_size(name: str) -> int:
    if "-cls" in name:
        return 224  # classification models train at 224
    if "-p6" in name:
        return 1280  # P6 (stride 64) models train at 1280
    return 640


def _ultralytics_entries() -> list[ModelEntry]:
    import yaml

    root = _ultralytics_cfg_dir()
    if root is None:
        return []
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    entries: list[ModelEntry] = []
    for path in sorted(root.rglob("*.yaml")):
        stem = path.stem
        if _YOLO_EXCLUDE.search(stem):
            continue
        try:
            text = path.read_text()
            cfg = yaml.load(text, Loader=loader) or {}
        except (OSError, yaml.YAMLError):
            continue
        if "TorchVision" in text:
            continue  # its TorchVision layer always fetches pretrained torchvision weights
        scales = list((cfg.get("scales") or {}).keys())
        match = re.match(r"^(yolov?\d+)(.*)$", stem)
        if len(scales) > 1 and match:
            names = [f"{match.group(1)}{s}{match.group(2)}" for s in scales]
        else:
            names = [stem]
        for name in names:
            kind = "RTDETR" if "rtdetr" in name else "YOLO"
            entries.append(
                ModelEntry(
                    name=name,
                    family=FAMILY_YOLO,
                    source=f"ultralytics.{kind}({name + '.yaml'!r}).model",
                    task=_yolo_task(name),
                    image_size=_yolo_image_size(name),
                    aliases=(f"{name}.yaml",),
                    spec=(kind, f"{name}.yaml"),
                )
            )
    return entries


def _yolo_task(name: str) -> str:
    for suffix, task in (
        ("-cls", "image-classification"),
        ("-seg", "instance-segmentation"),
        ("-pose", "pose-estimation"),
        ("-obb", "oriented-detection"),
        ("-sem", "semantic-segmentation"),
        ("-depth", "depth-estimation"),
    ):
        if suffix in name:
            return task
    return "object-detection"


def _make_ultralytics(entry: ModelEntry, pretrained: bool) -> nn.Module:
    _ultralytics_env()
    kind, yaml_name = entry.spec
    from ultralytics import RTDETR, YOLO

    cls = RTDETR if kind == "RTDETR" else YOLO
    target = yaml_name
    if pretrained:
        target = str(Path(yaml_name).with_suffix(".pt"))
        if not Path(target).exists() and not _reachable("github.com"):
            raise ZooError(
                f"pretrained weights for {entry.name} ({target}) are not in the working "
                "directory and github.com cannot be reached",
                hint="pass a local state_dict with --weights FILE, or leave out --pretrained",
            )
    # YOLO's constructor runs a forward to measure strides, which needs real tensors: build
    # on the CPU (the largest YOLO is ~100 M parameters); build() moves it to meta after.
    with torch.device("cpu"):
        try:
            return typing.cast(nn.Module, cls(target).model)
        except Exception as exc:
            raise ZooError(f"could not build {entry.name}: {_first_line(exc)}") from exc


# --------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _registry() -> dict[str, tuple[ModelEntry, ...]]:
    families: dict[str, list[ModelEntry]] = dict(_torchvision_entries())
    families[FAMILY_HF] = _hf_entries()
    families[FAMILY_YOLO] = _ultralytics_entries()
    return {f: tuple(families.get(f, [])) for f in FAMILIES}


@functools.lru_cache(maxsize=1)
def _index() -> dict[str, ModelEntry]:
    index: dict[str, ModelEntry] = {}
    for entries in _registry().values():
        for entry in entries:
            for key in (entry.name, *entry.aliases):
                index.setdefault(key, entry)
                index.setdefault(key.lower(), entry)
    return index


def list_models() -> dict[str, list[ModelEntry]]:
    """Every registered model, by family (see :data:`FAMILIES`)."""
    return {family: list(entries) for family, entries in _registry().items()}


def model_names() -> list[str]:
    """All registered model names (without aliases)."""
    return [e.name for entries in _registry().values() for e in entries]


def find_model(name: str) -> ModelEntry | None:
    """The registered entry for a name or alias (case-insensitive), or None."""
    index = _index()
    return index.get(name) or index.get(name.lower())


def _unknown(name: str) -> ZooError:
    close = _suggest(name, model_names())
    message = f"unknown model {name!r}"
    if close:
        message += f"; did you mean: {close}?"
    return ZooError(message, hint="run `irbridge models` to list them, or pass " + MODEL_SPEC_HELP)


# --------------------------------------------------------------------------------------------
# User models and checkpoints
# --------------------------------------------------------------------------------------------

Maker = Callable[[bool], "tuple[nn.Module, Any]"]


@dataclass
class _Target:
    name: str
    family: str
    source: str
    task: str
    make: Maker
    """Builds the module; returns (module, example inputs given by the user or None)."""
    image_size: int | None = None
    frames: int | None = None
    build_on_cpu: bool = False


def _entry_target(entry: ModelEntry) -> _Target:
    makers: dict[str, Callable[[ModelEntry, bool], nn.Module]] = {
        FAMILY_TV_CLS: _make_torchvision,
        FAMILY_TV_DET: _make_torchvision,
        FAMILY_TV_SEG: _make_torchvision,
        FAMILY_TV_VIDEO: _make_torchvision,
        FAMILY_HF: _make_hf_auto if isinstance(entry.spec, tuple) else _make_hf,
        FAMILY_YOLO: _make_ultralytics,
    }
    maker = makers[entry.family]
    return _Target(
        name=entry.name,
        family=entry.family,
        source=entry.source,
        task=entry.task,
        make=lambda pretrained: (maker(entry, pretrained), None),
        image_size=entry.image_size,
        frames=entry.frames,
        build_on_cpu=entry.family == FAMILY_YOLO,
    )


def _load_python_object(spec: str) -> Any:
    """Resolve ``file.py:Name`` or ``package.module:Name`` to the named object."""
    location, _, attr = spec.rpartition(":")
    attr = attr.strip()
    if not location or not attr:
        raise ZooError(
            f"bad model spec {spec!r}; expected path/to/file.py:Name or package.module:Name"
        )
    if not all(part.isidentifier() for part in attr.split(".")):
        raise ZooError(f"bad model spec {spec!r}: {attr!r} is not a Python name")
    is_file = location.endswith(".py") or "/" in location or os.sep in location
    if is_file:
        path = Path(location).expanduser()
        if not path.is_file():
            raise ZooError(f"no such model file: {location} (from {spec!r})")
        resolved = path.resolve()
        digest = hashlib.sha1(str(resolved).encode()).hexdigest()[:10]
        safe_stem = re.sub(r"\W", "_", path.stem)
        mod_name = f"_irbridge_user_{safe_stem}_{digest}"
        module_spec = importlib.util.spec_from_file_location(mod_name, resolved)
        if module_spec is None or module_spec.loader is None:
            raise ZooError(f"cannot load {location} as Python (from {spec!r})")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[mod_name] = module  # so dataclasses, pickling and typing can find it
        sys.path.insert(0, str(resolved.parent))  # sibling imports inside the user's file
        try:
            module_spec.loader.exec_module(module)
        except Exception as exc:
            sys.modules.pop(mod_name, None)
            raise ZooError(f"importing {location} failed: {_first_line(exc)}") from exc
        finally:
            with contextlib.suppress(ValueError):
                sys.path.remove(str(resolved.parent))
    else:
        if not all(part.isidentifier() for part in location.split(".")):
            raise ZooError(
                f"bad model spec {spec!r}: {location!r} is neither a .py file nor a module name"
            )
        try:
            module = importlib.import_module(location)
        except Exception as exc:
            raise ZooError(
                f"cannot import module {location!r} (from {spec!r}): {_first_line(exc)}"
            ) from exc
    obj: Any = module
    for i, part in enumerate(attr.split(".")):
        if not hasattr(obj, part):
            owner = location if i == 0 else ".".join(attr.split(".")[:i])
            names = [n for n in dir(obj) if not n.startswith("_")]
            close = _suggest(part, names)
            raise ZooError(
                f"{owner} has no attribute {part!r} (from {spec!r})"
                + (f"; did you mean: {close}?" if close else "")
            )
        obj = getattr(obj, part)
    return obj


def _split_example(value: Any, spec: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A factory's example inputs: a tensor, a tuple/list of args, a dict of kwargs, or
    an ``(args, kwargs)`` pair."""
    if isinstance(value, torch.Tensor):
        return (value,), {}
    if isinstance(value, Mapping):
        return (), dict(value)
    if (
        isinstance(value, tuple)
        and len(value) == 2
        and isinstance(value[0], (tuple, list))
        and isinstance(value[1], Mapping)
    ):
        return tuple(value[0]), dict(value[1])
    if isinstance(value, (tuple, list)):
        return tuple(value), {}
    raise ZooError(
        f"{spec} returned example inputs of type {type(value).__name__}; expected a tensor, "
        "a tuple of arguments, a dict of keyword arguments or (args, kwargs)"
    )


def _user_target(spec: str) -> _Target:
    def make(pretrained: bool) -> tuple[nn.Module, Any]:
        if pretrained:
            raise ZooError(
                f"{spec} is your own model; there are no pretrained weights to fetch",
                hint="pass a local state_dict with --weights FILE",
            )
        obj = _load_python_object(spec)
        example: Any = None
        if isinstance(obj, nn.Module):
            return obj, None
        if inspect.isclass(obj):
            if not issubclass(obj, nn.Module):
                raise ZooError(f"{spec} is a class but not a torch.nn.Module ({obj.__name__})")
            try:
                result: Any = obj()
            except Exception as exc:
                raise ZooError(
                    f"could not instantiate {spec} with no arguments: {_first_line(exc)}",
                    hint="wrap it in a factory function that takes no arguments",
                ) from exc
        elif callable(obj):
            try:
                result = obj()
            except Exception as exc:
                raise ZooError(f"calling {spec}() failed: {_first_line(exc)}") from exc
        else:
            raise ZooError(
                f"{spec} is a {type(obj).__name__}, not an nn.Module class or a factory function"
            )
        if isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], nn.Module):
            result, example = result
        if not isinstance(result, nn.Module):
            raise ZooError(
                f"{spec} returned a {type(result).__name__}; expected an nn.Module or "
                "(module, example_inputs)"
            )
        return result, example

    return _Target(name=spec, family=FAMILY_USER, source=spec, task="user", make=make)


def _checkpoint_target(name: str, trust: bool) -> _Target:
    path = Path(name).expanduser()
    if not path.is_file():
        stem_entry = find_model(path.stem)
        hint = None
        if stem_entry is not None:
            hint = (
                f"use {stem_entry.name!r} for the architecture with random weights, "
                "or add --pretrained to fetch its published weights"
            )
        raise ZooError(f"no such checkpoint file: {name}", hint=hint)
    if not trust:
        raise ZooError(
            f"refusing to load {name}: a .pt checkpoint is a pickle and loading it runs code "
            "from the file",
            hint="pass --trust-checkpoint (trust_checkpoint=True) if you trust where it came from",
        )
    image_size: list[int | None] = [None]

    def make(pretrained: bool) -> tuple[nn.Module, Any]:
        if pretrained:
            raise ZooError(f"{name} is a checkpoint file; --pretrained does not apply to it")
        _ultralytics_env()  # unpickling an ultralytics checkpoint imports ultralytics
        try:
            obj = torch.load(path, map_location="cpu", weights_only=False)
        except Exception as exc:
            raise ZooError(f"could not load checkpoint {name}: {_first_line(exc)}") from exc
        module: Any = obj
        if isinstance(obj, Mapping):
            for key in ("ema", "model", "module", "net"):
                if isinstance(obj.get(key), nn.Module):
                    module = obj[key]
                    break
            args = obj.get("train_args")
            if isinstance(args, Mapping) and isinstance(args.get("imgsz"), int):
                image_size[0] = int(args["imgsz"])
        if not isinstance(module, nn.Module):
            if (
                isinstance(obj, Mapping)
                and obj
                and all(isinstance(v, torch.Tensor) for v in obj.values())
            ):
                raise ZooError(
                    f"{name} is a state_dict (weights without the architecture)",
                    hint="name the architecture as the model and pass this file with --weights FILE",
                )
            raise ZooError(f"{name} holds a {type(obj).__name__}, not an nn.Module")
        if type(module).__module__.startswith("ultralytics") and image_size[0] is None:
            image_size[0] = 640
        if any(p.dtype == torch.float16 for p in module.parameters()):
            module = module.float()  # ultralytics saves half-precision weights
        target.image_size = image_size[0]
        return module, None

    target = _Target(
        name=name, family=FAMILY_CHECKPOINT, source=str(path), task="checkpoint", make=make
    )
    return target


def _yaml_target(name: str) -> _Target:
    path = Path(name).expanduser()
    entry = ModelEntry(
        name=name,
        family=FAMILY_YOLO,
        source=f"ultralytics.YOLO({name!r}).model",
        task=_yolo_task(path.stem),
        image_size=_yolo_image_size(path.stem),
        spec=("RTDETR" if "rtdetr" in path.stem else "YOLO", str(path)),
    )
    return _entry_target(entry)


def _resolve(name: str, trust_checkpoint: bool) -> _Target:
    name = name.strip()
    if not name:
        raise ZooError("no model name given", hint="pass " + MODEL_SPEC_HELP)
    if name.startswith("hf:"):
        return _entry_target(_hf_auto_entry(name))
    entry = find_model(name)
    if entry is not None:
        return _entry_target(entry)
    lowered = name.lower()
    if ":" in name:
        return _user_target(name)
    if lowered.endswith(CHECKPOINT_SUFFIXES):
        return _checkpoint_target(name, trust_checkpoint)
    if lowered.endswith(WEIGHTS_ONLY_SUFFIXES):
        raise ZooError(
            f"{name} is a weights file, not a model",
            hint="name the architecture as the model and pass this file with --weights FILE",
        )
    if lowered.endswith((".yaml", ".yml")):
        if Path(name).expanduser().is_file():
            return _yaml_target(name)
        raise ZooError(f"no such model YAML: {name}")
    if lowered.endswith(".py"):
        raise ZooError(f"{name} needs the name of the model inside it: {name}:ClassOrFactory")
    raise _unknown(name)


# --------------------------------------------------------------------------------------------
# Weights files
# --------------------------------------------------------------------------------------------


def _read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    if not path.is_file():
        raise ZooError(f"no such weights file: {path}")
    obj: Any
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        try:
            obj = load_file(str(path))
        except Exception as exc:
            raise ZooError(f"could not read {path}: {_first_line(exc)}") from exc
    else:
        try:
            obj = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:
            raise ZooError(
                f"{path} is not a plain state_dict (torch.load(weights_only=True) refused it: "
                f"{_first_line(exc)})",
                hint="a full pickled model goes in the model position with --trust-checkpoint",
            ) from exc
    for key in ("state_dict", "model_state_dict", "model", "module"):
        if isinstance(obj, Mapping) and isinstance(obj.get(key), Mapping):
            obj = obj[key]
            break
    if not isinstance(obj, Mapping) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise ZooError(f"{path} does not hold a state_dict (a mapping of names to tensors)")
    return dict(obj)


def _load_weights(module: nn.Module, path: Path, name: str) -> None:
    state = _read_state_dict(path)
    own = module.state_dict(keep_vars=True)
    if (
        state
        and all(k.startswith("module.") for k in state)
        and not any(k.startswith("module.") for k in own)
    ):
        state = {k.removeprefix("module."): v for k, v in state.items()}  # DataParallel
    # Tied parameters (e.g. GPT-2's lm_head and wte) are saved once: a missing key is fine
    # when a key sharing its tensor is present.
    by_tensor: dict[int, list[str]] = {}
    for key, value in own.items():
        by_tensor.setdefault(id(value), []).append(key)
    missing = [
        k
        for k in own
        if k not in state
        and not k.endswith("num_batches_tracked")
        and not any(alias in state for alias in by_tensor[id(own[k])])
    ]
    unexpected = [k for k in state if k not in own]
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"{len(missing)} missing keys (e.g. {', '.join(missing[:3])})")
        if unexpected:
            parts.append(f"{len(unexpected)} unexpected keys (e.g. {', '.join(unexpected[:3])})")
        raise ZooError(f"weights file {path} does not fit {name}: {'; '.join(parts)}")
    for key, value in state.items():
        if tuple(value.shape) != tuple(own[key].shape):
            raise ZooError(
                f"weights file {path} does not fit {name}: {key} has shape "
                f"{list(value.shape)} in the file but {list(own[key].shape)} in the model"
            )
    module.load_state_dict(state, strict=False)


# --------------------------------------------------------------------------------------------
# Example inputs from the forward signature
# --------------------------------------------------------------------------------------------

_TOKEN_NAMES = frozenset({"input_ids", "token_ids", "tokens", "src_tokens", "src", "ids"})
_DECODER_TOKEN_NAMES = frozenset({"decoder_input_ids", "tgt_tokens", "tgt"})
_MASK_NAMES = frozenset({"attention_mask"})
_IMAGE_NAMES = frozenset({"pixel_values", "images", "image", "img", "imgs"})
_GENERIC_NAMES = frozenset(
    {"x", "X", "input", "inputs", "inp", "input_tensor", "data", "sample", "tensor", "features"}
)


def _annotation_is_tensor_list(annotation: Any) -> bool:
    if annotation is inspect.Parameter.empty:
        return False
    if isinstance(annotation, str):
        compact = annotation.replace(" ", "").replace("typing.", "").replace("torch.", "")
        return compact in {"list[Tensor]", "List[Tensor]", "Sequence[Tensor]"}
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    return origin in (list, Sequence) and args == (torch.Tensor,)


def _first_layer(module: nn.Module) -> nn.Module | None:
    kinds = (
        nn.Conv1d,
        nn.Conv2d,
        nn.Conv3d,
        nn.ConvTranspose1d,
        nn.ConvTranspose2d,
        nn.ConvTranspose3d,
        nn.Linear,
        nn.Embedding,
        nn.EmbeddingBag,
        nn.RNNBase,
        nn.BatchNorm1d,
        nn.BatchNorm2d,
        nn.BatchNorm3d,
        nn.LayerNorm,
    )
    for sub in module.modules():
        if isinstance(sub, nn.modules.lazy.LazyModuleMixin) and sub.has_uninitialized_params():
            return None
        if isinstance(sub, kinds):
            return sub
    return None


def _config(module: nn.Module) -> Any:
    return getattr(module, "config", None)


def _vocab_size(module: nn.Module) -> int | None:
    config = _config(module)
    vocab = getattr(config, "vocab_size", None) if config is not None else None
    if isinstance(vocab, int) and vocab > 0:
        return vocab
    for sub in module.modules():
        if isinstance(sub, (nn.Embedding, nn.EmbeddingBag)):
            return int(sub.num_embeddings)
    return None


def _image_size(module: nn.Module, hint: int | None) -> tuple[int, int]:
    """Square image side: from the model (config, attribute, transform), then the family's
    hint, then 224."""
    config = _config(module)
    candidates: list[Any] = []
    if config is not None:
        candidates.append(getattr(config, "image_size", None))
    candidates.append(getattr(module, "image_size", None))
    transform = getattr(module, "transform", None)
    if transform is not None:
        fixed = getattr(transform, "fixed_size", None)
        min_size = getattr(transform, "min_size", None)
        candidates.append(fixed)
        if isinstance(min_size, (tuple, list)) and min_size:
            candidates.append(int(min_size[-1]))  # the size GeneralizedRCNNTransform uses in eval
    candidates.append(hint)
    for value in candidates:
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value, value
        if (
            isinstance(value, (tuple, list))
            and len(value) == 2
            and all(isinstance(v, int) for v in value)
        ):
            return int(value[0]), int(value[1])
    return DEFAULT_IMAGE_SIZE, DEFAULT_IMAGE_SIZE


def _image_channels(module: nn.Module) -> int:
    config = _config(module)
    channels = getattr(config, "num_channels", None) if config is not None else None
    if isinstance(channels, int) and channels > 0:
        return channels
    for sub in module.modules():
        if isinstance(sub, (nn.Conv2d, nn.Conv3d)):
            return int(sub.in_channels)
    return 3


def _structural(
    module: nn.Module,
    name: str,
    keyword: bool,
    batch: int,
    seq_len: int,
    image_size: int | None,
    frames: int | None,
    float_dtype: torch.dtype,
    model_name: str,
) -> InputSpec:
    """An input for a generically named parameter (``x``, ``input``): shaped by the first layer."""
    layer = _first_layer(module)
    if isinstance(layer, (nn.Conv2d, nn.ConvTranspose2d, nn.BatchNorm2d)):
        channels = (
            layer.in_channels if not isinstance(layer, nn.BatchNorm2d) else layer.num_features
        )
        h, w = _image_size(module, image_size)
        return InputSpec(
            name,
            "image",
            (batch, channels, h, w),
            float_dtype,
            keyword,
            ("batch", "channels", "height", "width"),
        )
    if isinstance(layer, (nn.Conv3d, nn.ConvTranspose3d, nn.BatchNorm3d)):
        channels = (
            layer.in_channels if not isinstance(layer, nn.BatchNorm3d) else layer.num_features
        )
        h, w = _image_size(module, image_size)
        t = frames or DEFAULT_FRAMES
        return InputSpec(
            name,
            "video",
            (batch, channels, t, h, w),
            float_dtype,
            keyword,
            ("batch", "channels", "frames", "height", "width"),
        )
    if isinstance(layer, (nn.Conv1d, nn.ConvTranspose1d)):
        return InputSpec(
            name,
            "tensor",
            (batch, layer.in_channels, seq_len),
            float_dtype,
            keyword,
            ("batch", "channels", "length"),
        )
    if isinstance(layer, (nn.Embedding, nn.EmbeddingBag)):
        return InputSpec(
            name,
            "tokens",
            (batch, seq_len),
            torch.int64,
            keyword,
            ("batch", "seq"),
            high=int(layer.num_embeddings),
        )
    if isinstance(layer, nn.RNNBase):
        if layer.batch_first:
            return InputSpec(
                name,
                "tensor",
                (batch, seq_len, layer.input_size),
                float_dtype,
                keyword,
                ("batch", "seq", "features"),
            )
        return InputSpec(
            name,
            "tensor",
            (seq_len, batch, layer.input_size),
            float_dtype,
            keyword,
            ("seq", "batch", "features"),
        )
    if isinstance(layer, nn.Linear):
        return InputSpec(
            name, "tensor", (batch, layer.in_features), float_dtype, keyword, ("batch", "features")
        )
    if isinstance(layer, nn.BatchNorm1d):
        return InputSpec(
            name, "tensor", (batch, layer.num_features), float_dtype, keyword, ("batch", "features")
        )
    if isinstance(layer, nn.LayerNorm):
        features = int(layer.normalized_shape[-1])
        return InputSpec(
            name,
            "tensor",
            (batch, seq_len, features),
            float_dtype,
            keyword,
            ("batch", "seq", "features"),
        )
    raise ZooError(
        f"cannot derive an example input for parameter {name!r} of {model_name}: its first "
        "layer does not say what it takes",
        hint="pass --input-shape, or use a factory that returns (module, example_inputs)",
    )


def _plan_inputs(
    module: nn.Module,
    *,
    model_name: str,
    batch: int,
    seq_len: int,
    image_size: int | None,
    frames: int | None,
    float_dtype: torch.dtype,
) -> list[InputSpec]:
    try:
        signature = inspect.signature(module.forward)
    except (TypeError, ValueError) as exc:
        raise ZooError(
            f"cannot read the forward signature of {model_name}: {_first_line(exc)}",
            hint="use a factory that returns (module, example_inputs)",
        ) from exc
    config = _config(module)
    encoder_decoder = bool(getattr(config, "is_encoder_decoder", False))
    plans: list[InputSpec] = []
    positional_open = True  # still passing contiguous leading parameters positionally
    have_primary = False
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            positional_open = False
            continue
        required = param.default is inspect.Parameter.empty
        n = param.name
        if n in _TOKEN_NAMES:
            kind = "tokens"
        elif n in _DECODER_TOKEN_NAMES:
            kind = "decoder_tokens" if (required or encoder_decoder) else ""
        elif n in _MASK_NAMES:
            kind = "mask"
        elif _annotation_is_tensor_list(param.annotation) or (
            n in {"images", "imgs"} and hasattr(getattr(module, "transform", None), "batch_images")
        ):
            kind = "image_list"
        elif n in _IMAGE_NAMES:
            kind = "image"
        elif n in _GENERIC_NAMES or (required and not have_primary):
            kind = "structural"
        else:
            kind = ""
        if kind in ("image", "image_list", "structural") and not required and have_primary:
            kind = ""  # an optional alternative to an input already chosen
        if not kind:
            if required:
                raise ZooError(
                    f"cannot derive an example input for required parameter {n!r} of "
                    f"{model_name}.forward",
                    hint="use a factory that returns (module, example_inputs)",
                )
            positional_open = False
            continue
        positional = (
            positional_open
            and required
            and param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD)
        )
        if not positional:
            positional_open = False
        keyword = not positional
        if kind in ("tokens", "decoder_tokens"):
            plans.append(
                InputSpec(
                    n,
                    "tokens",
                    (batch, seq_len),
                    torch.int64,
                    keyword,
                    ("batch", "seq"),
                    high=_vocab_size(module) or 1000,
                )
            )
        elif kind == "mask":
            plans.append(InputSpec(n, "mask", (batch, seq_len), torch.int64, keyword, ("batch", "seq")))
        elif kind in ("image", "image_list"):
            h, w = _image_size(module, image_size)
            channels = _image_channels(module)
            if kind == "image_list":
                plans.append(
                    InputSpec(
                        n,
                        "image_list",
                        (channels, h, w),
                        float_dtype,
                        keyword,
                        ("channels", "height", "width"),
                        count=batch,
                    )
                )
            else:
                plans.append(
                    InputSpec(
                        n,
                        "image",
                        (batch, channels, h, w),
                        float_dtype,
                        keyword,
                        ("batch", "channels", "height", "width"),
                    )
                )
        else:
            plans.append(
                _structural(
                    module, n, keyword, batch, seq_len, image_size, frames, float_dtype, model_name
                )
            )
        if kind != "mask":
            have_primary = True
    # An attention mask only makes sense next to token ids.
    if not any(p.kind == "tokens" for p in plans):
        plans = [p for p in plans if p.kind != "mask"]
    if not plans:
        raise ZooError(
            f"found no input to derive from the forward signature of {model_name} {signature}",
            hint="use a factory that returns (module, example_inputs)",
        )
    return plans


def _apply_input_shape(plans: list[InputSpec], input_shape: tuple[int, ...],
                       batch: int | None) -> list[InputSpec]:
    """Give the primary (first non-mask) input the user's shape; token companions follow it."""
    primary = next(p for p in plans if p.kind != "mask")
    has_batch = primary.kind != "image_list" or len(input_shape) == 4
    if batch is not None and has_batch and input_shape[0] != batch:
        raise ZooError(f"--batch {batch} contradicts --input-shape {list(input_shape)}")
    shape = tuple(input_shape)

    def reshaped(plan: InputSpec) -> InputSpec:
        return replace(plan, shape=shape, dims=plan.dims if len(plan.dims) == len(shape) else ())

    if primary.kind == "image_list":
        if len(shape) == 4:
            changed = replace(primary, count=shape[0], shape=shape[1:])
        else:
            changed = replace(primary, shape=shape)
        return [changed if p is primary else p for p in plans]
    follows = primary.kind == "tokens"
    return [reshaped(p) if p is primary or (follows and p.kind in ("tokens", "mask")) else p
            for p in plans]


def _make_tensor(
    plan: InputSpec, shape: tuple[int, ...], device: torch.device, gen: torch.Generator
) -> torch.Tensor:
    if device.type == "meta":
        return torch.empty(shape, dtype=plan.dtype, device="meta")
    if plan.kind == "mask":
        t = torch.ones(shape, dtype=plan.dtype)
    elif plan.kind == "tokens":
        t = torch.randint(0, plan.high or 1000, shape, generator=gen, dtype=plan.dtype)
    elif plan.kind == "image_list":
        t = torch.rand(shape, generator=gen).to(plan.dtype)  # detection models take 0..1 images
    else:
        t = torch.randn(shape, generator=gen).to(plan.dtype)
    return t.to(device)


def derive_inputs(
    module: nn.Module,
    *,
    model_name: str = "model",
    batch: int | None = None,
    seq_len: int | None = None,
    input_shape: Sequence[int] | None = None,
    dtype: torch.dtype | None = None,
    device: str | torch.device = "cpu",
    image_size: int | None = None,
    frames: int | None = None,
) -> tuple[tuple[Any, ...], dict[str, Any], list[InputSpec]]:
    """Example ``(args, kwargs, specs)`` for ``module``, from its forward signature.

    Token-id parameters (``input_ids``, ``decoder_input_ids`` for encoder-decoders) get int64
    ids in ``[0, vocab)`` and ``attention_mask`` a mask of ones, both ``[batch, seq_len]``;
    image parameters (``pixel_values``, ``images``) get ``[batch, C, H, W]`` (a list of
    ``[C, H, W]`` for a ``list[Tensor]`` parameter); generic names (``x``, ``input``) and any
    other first required parameter are shaped by the model's first layer (Conv2d -> image,
    Conv3d -> video, Embedding -> ids, Linear -> features, ...). Required parameters are passed
    positionally, optional and keyword-only ones as keywords.
    """
    b = batch or DEFAULT_BATCH
    s = seq_len or DEFAULT_SEQ_LEN
    dev = torch.device(device)
    float_dtype = dtype or _module_dtype(module)
    if float_dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        float_dtype = torch.float32
    plans = _plan_inputs(
        module,
        model_name=model_name,
        batch=b,
        seq_len=s,
        image_size=image_size,
        frames=frames,
        float_dtype=float_dtype,
    )
    if input_shape is not None:
        plans = _apply_input_shape(plans, tuple(int(d) for d in input_shape), batch)
    config = _config(module)
    max_pos = getattr(config, "max_position_embeddings", None) if config is not None else None
    for plan in plans:
        if (
            plan.kind in ("tokens", "mask")
            and isinstance(max_pos, int)
            and len(plan.shape) == 2
            and plan.shape[1] > max_pos
        ):
            raise ZooError(
                f"sequence length {plan.shape[1]} exceeds the {max_pos} positions {model_name} "
                "supports",
                hint=f"pass --seq-len {max_pos} or less",
            )
    gen = torch.Generator().manual_seed(SEED)
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    specs: list[InputSpec] = []
    for plan in plans:
        value: Any
        if plan.kind == "image_list":
            value = [_make_tensor(plan, plan.shape, dev, gen) for _ in range(plan.count or 1)]
        else:
            value = _make_tensor(plan, plan.shape, dev, gen)
        if plan.keyword:
            kwargs[plan.name] = value
        else:
            args.append(value)
        specs.append(plan)
    return tuple(args), kwargs, specs


def _given_inputs(
    module: nn.Module,
    example: Any,
    *,
    model_name: str,
    input_shape: Sequence[int] | None,
    dtype: torch.dtype | None,
    device: torch.device,
) -> tuple[tuple[Any, ...], dict[str, Any], list[InputSpec]]:
    """Inputs a factory returned, converted to the requested dtype and device."""
    args, kwargs = _split_example(example, model_name)
    try:
        names = list(inspect.signature(module.forward).parameters)
    except (TypeError, ValueError):
        names = []
    if input_shape is not None:
        tensors = [a for a in args if isinstance(a, torch.Tensor)] + [
            v for v in kwargs.values() if isinstance(v, torch.Tensor)
        ]
        if len(tensors) != 1 or len(args) + len(kwargs) != 1:
            raise ZooError(
                f"--input-shape applies to models with one tensor input; {model_name} returned "
                f"{len(args) + len(kwargs)} example inputs"
            )
        old = tensors[0]
        gen = torch.Generator().manual_seed(SEED)
        shape = tuple(int(d) for d in input_shape)
        if old.is_floating_point():
            new = torch.randn(shape, generator=gen).to(old.dtype)
        else:
            high = int(old.max().item()) + 1 if old.numel() and old.device.type != "meta" else 2
            new = torch.randint(0, max(high, 1), shape, generator=gen, dtype=old.dtype)
        if args:
            args = (new,)
        else:
            kwargs = {next(iter(kwargs)): new}

    def convert(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            if dtype is not None and value.is_floating_point():
                value = value.to(dtype)
            return value.to(device)
        if isinstance(value, (list, tuple)):
            return type(value)(convert(v) for v in value)
        if isinstance(value, dict):
            return {k: convert(v) for k, v in value.items()}
        return value

    args = tuple(convert(a) for a in args)
    kwargs = {k: convert(v) for k, v in kwargs.items()}
    specs: list[InputSpec] = []
    for i, value in enumerate(args):
        label = names[i] if i < len(names) else f"arg{i}"
        specs.append(_given_spec(label, value, keyword=False))
    for key, value in kwargs.items():
        specs.append(_given_spec(key, value, keyword=True))
    return args, kwargs, specs


def _given_spec(name: str, value: Any, keyword: bool) -> InputSpec:
    if isinstance(value, torch.Tensor):
        return InputSpec(name, "given", tuple(value.shape), value.dtype, keyword)
    if (
        isinstance(value, (list, tuple))
        and value
        and all(isinstance(v, torch.Tensor) for v in value)
    ):
        return InputSpec(
            name, "image_list", tuple(value[0].shape), value[0].dtype, keyword, count=len(value)
        )
    return InputSpec(name, "given", (), torch.float32, keyword)


# --------------------------------------------------------------------------------------------
# build / check_inputs
# --------------------------------------------------------------------------------------------


def _move(module: nn.Module, device: torch.device) -> None:
    """``module.to(device)``; on meta, ultralytics heads keep their strides as real tensors.

    ultralytics moves its plain ``stride`` attributes along with the weights, and its anchor
    code reads them as Python numbers, which a meta tensor cannot give: they are constants
    of the architecture, so they stay on the CPU.
    """
    strides: list[tuple[nn.Module, torch.Tensor]] = []
    if device.type == "meta":
        for sub in module.modules():
            value = getattr(sub, "stride", None)
            if (
                isinstance(value, torch.Tensor)
                and not value.is_meta
                and type(sub).__module__.startswith("ultralytics")
            ):
                strides.append((sub, value.clone()))
    module.to(device)
    for sub, value in strides:
        sub.stride = value


def _make(target: _Target, pretrained: bool, on_meta: bool) -> tuple[nn.Module, Any]:
    """Run the target's recipe, seeded; under ``torch.device("meta")`` when asked.

    A few constructors compute with their own weights while initialising (e.g. torchvision's
    RegNet), which meta tensors cannot do: those are built on the CPU instead, except for
    transformers models, which can be far too big for that and all build on meta.
    """
    with _seeded(SEED):
        try:
            if not on_meta:
                return target.make(pretrained)
            try:
                with torch.device("meta"):
                    return target.make(pretrained)
            except (NotImplementedError, RuntimeError) as exc:
                if target.family == FAMILY_HF or "meta" not in str(exc):
                    raise
            torch.manual_seed(SEED)
            return target.make(pretrained)
        except ZooError:
            raise
        except Exception as exc:
            raise ZooError(f"could not build {target.name}: {_first_line(exc)}") from exc


def build(
    name: str,
    *,
    batch: int | None = None,
    seq_len: int | None = None,
    input_shape: Sequence[int] | None = None,
    dtype: str | torch.dtype | None = None,
    device: str | torch.device = "cpu",
    pretrained: bool = False,
    weights_file: str | os.PathLike[str] | None = None,
    trust_checkpoint: bool = False,
) -> BuiltModel:
    """Build a model by name (see the module docstring) with example inputs.

    The module is in eval mode. Weights are random (seed :data:`SEED`) unless
    ``weights_file`` (a local state_dict, .pt/.pth/.bin or .safetensors) or ``pretrained``
    (needs the hub or a local cache) says otherwise. ``device="meta"`` allocates nothing: the
    parameters and the inputs are meta tensors. Building does not run the model: call
    :func:`check_inputs` for a trial forward.
    """
    _positive(batch, "batch")
    _positive(seq_len, "seq_len")
    if input_shape is not None:
        input_shape = tuple(input_shape)
        if not input_shape or any(
            isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in input_shape
        ):
            raise ZooError(f"input shape must be positive integers, got {list(input_shape)}")
    torch_dtype = _parse_dtype(dtype)
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ZooError(f"bad device {device!r}: {_first_line(exc)}") from exc
    meta = dev.type == "meta"
    if pretrained and weights_file is not None:
        raise ZooError("pass either pretrained or a weights file, not both")
    if meta and (pretrained or weights_file is not None):
        raise ZooError(
            "device 'meta' holds no weights; pretrained weights or a weights file need a real device"
        )
    target = _resolve(name, trust_checkpoint)
    module, example = _make(target, pretrained, on_meta=meta and not target.build_on_cpu)
    weights = "pretrained" if pretrained else f"random (seed {SEED})"
    if weights_file is not None:
        _load_weights(module, Path(weights_file).expanduser(), target.name)
        weights = f"file {weights_file}"
    module.eval()
    if torch_dtype is not None:
        module.to(torch_dtype)
    if meta or dev.type != "cpu":
        _move(module, dev)
    if example is not None:
        args, kwargs, specs = _given_inputs(
            module,
            example,
            model_name=target.name,
            input_shape=input_shape,
            dtype=torch_dtype,
            device=dev,
        )
    else:
        args, kwargs, specs = derive_inputs(
            module,
            model_name=target.name,
            batch=batch,
            seq_len=seq_len,
            input_shape=input_shape,
            dtype=torch_dtype,
            device=dev,
            image_size=target.image_size,
            frames=target.frames,
        )
    return BuiltModel(
        module=module,
        args=args,
        kwargs=kwargs,
        name=target.name,
        family=target.family,
        inputs=specs,
        source=target.source,
        task=target.task,
        device=str(dev),
        weights=weights,
    )


def _is_data_dependent(exc: BaseException) -> bool:
    names = {
        "DataDependentOutputException",
        "DynamicOutputShapeException",
        "GuardOnDataDependentSymNode",
    }
    return type(exc).__name__ in names or "meta tensor" in str(exc)


def check_inputs(built: BuiltModel) -> Any:
    """Run one forward with the example inputs and return its output.

    This is also the warm-up some models need before capture (YOLO builds its anchors on the
    first call). A failure becomes a one-line :class:`ZooError` naming the model, the inputs
    and the first line of the torch error. A meta-device model runs on meta tensors; when its
    forward reads a tensor's value (transformers' mask helpers do), it runs again under
    FakeTensorMode, where such code takes its tracing path.
    """
    try:
        with torch.no_grad():
            if not built.device.startswith("meta"):
                return built.module(*built.args, **built.kwargs)
            try:
                return built.module(*built.args, **built.kwargs)
            except Exception as exc:
                if not _is_data_dependent(exc):
                    raise
            return _fake_forward(built)
    except Exception as exc:
        if built.device.startswith("meta") and _is_data_dependent(exc):
            raise ZooError(
                f"{built.name} cannot run on device meta: its forward depends on tensor values "
                f"({_first_line(exc)})",
                hint="build it on the CPU to check its inputs",
            ) from exc
        raise ZooError(
            f"{built.name} rejected inputs {built.input_desc}: {_first_line(exc)}",
            hint="pass --input-shape (and --batch/--seq-len) matching what the model expects",
        ) from exc


def _fake_forward(built: BuiltModel) -> Any:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._pytree import tree_map_only

    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        args, kwargs = tree_map_only(torch.Tensor, mode.from_tensor, (built.args, built.kwargs))
        return built.module(*args, **kwargs)


def entry_to_dict(entry: ModelEntry) -> dict[str, Any]:
    """JSON-friendly view of an entry (for ``irbridge models --json``)."""
    data = {f.name: getattr(entry, f.name) for f in dataclasses.fields(entry) if f.name != "spec"}
    data["aliases"] = list(entry.aliases)
    data["input_hint"] = entry.input_hint
    return data
