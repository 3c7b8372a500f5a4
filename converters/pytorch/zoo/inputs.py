"""Example inputs derived from a model's forward signature, or given by a factory."""

from __future__ import annotations

import inspect
import math
import typing
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import torch
from torch import nn

from .._util import torchscript_problem
from .common import (
    DEFAULT_BATCH,
    DEFAULT_FRAMES,
    DEFAULT_IMAGE_SIZE,
    DEFAULT_SEQ_LEN,
    SEED,
    InputSpec,
    ZooError,
    _first_line,
    _mem_available,
    _module_dtype,
)

# --------------------------------------------------------------------------------------------
# Example inputs from the forward signature
# --------------------------------------------------------------------------------------------

_TOKEN_NAMES = frozenset({"input_ids", "token_ids", "tokens", "src_tokens", "src", "ids"})
_DECODER_TOKEN_NAMES = frozenset({"decoder_input_ids", "tgt_tokens", "tgt"})
_MASK_NAMES = frozenset({"attention_mask"})
_IMAGE_NAMES = frozenset({"pixel_values", "images", "image", "img", "imgs"})
_WAVEFORM_NAMES = frozenset({"input_values"})
_AUDIO_FEATURE_NAMES = frozenset({"input_features"})
_PATCH_MASK_NAMES = frozenset({"pixel_attention_mask"})
_PATCH_GRID_NAMES = frozenset({"spatial_shapes"})
_IMAGE_POSITION_NAMES = frozenset({"image_embeds_position_mask"})
_IMAGE_QUERY_COUNT_NAMES = ("latent_query_num", "num_query_tokens")
DEFAULT_REGIONS = 36
"""Image regions given as features (LXMERT's ``visual_feats``): a detector's usual 36 boxes."""
_VISION_CONFIG_NAMES = ("vision_config", "image_config")
_AUDIO_CONFIG_NAMES = ("audio_config",)
_IMAGE_TOKEN_NAMES = ("image_token_index", "image_token_id")
_AUDIO_TOKEN_NAMES = ("audio_token_index", "audio_token_id")
DEFAULT_SAMPLES = 16000
"""Length of a derived raw waveform: one second at 16 kHz (wav2vec2 and kin)."""
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


def _is_transformers(module: nn.Module) -> bool:
    """A Hugging Face transformers model (its classes live under ``transformers.``)."""
    return type(module).__module__.startswith("transformers.")


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
    towers = [config, _vision_config(config)]
    # then the backbone's (SAM2's Hiera under vision_config, Depth Anything's DINOv2)
    towers += [getattr(cfg, "backbone_config", None) for cfg in towers if cfg is not None]
    for cfg in towers:
        if cfg is not None:
            candidates.append(getattr(cfg, "image_size", None))
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


def _sub_config(config: Any, names: Sequence[str]) -> Any:
    for attr in names:
        sub = getattr(config, attr, None)
        if sub is not None:
            return sub
    return None


def _vision_config(config: Any) -> Any:
    """The image tower's config of a multimodal model (``vision_config``, ``image_config``)."""
    return _sub_config(config, _VISION_CONFIG_NAMES)


def _config_frames(config: Any) -> int | None:
    """Clip length of a video model that takes ``pixel_values`` (its ``num_frames``)."""
    for cfg in (config, _vision_config(config)):
        value = getattr(cfg, "num_frames", None) if cfg is not None else None
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _max_positions(config: Any) -> int | None:
    """Longest token sequence the model (its text tower, for a multimodal one) takes."""
    for cfg in (config, getattr(config, "text_config", None)):
        value = getattr(cfg, "max_position_embeddings", None) if cfg is not None else None
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _needs_every_modality(config: Any, kind: str) -> bool:
    """A dual encoder (CLIP, SigLIP, BLIP, OWL-ViT, ...; CLAP for audio) whose forward embeds
    an image (audio) and a text: it needs ``pixel_values`` (``input_features``) next to
    ``input_ids``. A model that places image (audio) features at image (audio) tokens in the
    text (LLaVA and kin: an ``image_token_index``) runs on text alone."""
    image = kind == "image"
    sub = _sub_config(config, _VISION_CONFIG_NAMES if image else _AUDIO_CONFIG_NAMES)
    if image and sub is None and _config_int(config, "image_size") is not None \
            and _config_int(config, "vocab_size") is not None:
        sub = config  # one transformer over text and image patches (ViLT)
    tokens = _IMAGE_TOKEN_NAMES if image else _AUDIO_TOKEN_NAMES
    return sub is not None and not any(getattr(config, attr, None) is not None for attr in tokens)


def _config_int(config: Any, attr: str) -> int | None:
    """A positive integer setting of ``config`` (None where it has none)."""
    value = getattr(config, attr, None) if config is not None else None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def _feature_dim(config: Any, name: str) -> int | None:
    """Feature size the config gives image regions passed as features (``visual_*``):
    ``visual_feat_dim`` for ``visual_feats``, ``visual_pos_dim`` for ``visual_pos`` (LXMERT,
    regions from an object detector)."""
    if not name.startswith("visual_"):
        return None
    for attr in (f"{name}_dim", f"{name.removesuffix('s')}_dim"):
        if (value := _config_int(config, attr)) is not None:
            return value
    return None


def _series_shape(config: Any) -> tuple[int, int] | None:
    """[time, channels] of a multivariate time-series model's ``past_values`` (PatchTST,
    PatchTSMixer): its config's ``context_length`` and ``num_input_channels``."""
    length = _config_int(config, "context_length")
    channels = _config_int(config, "num_input_channels")
    return (length, channels) if length is not None and channels is not None else None


def _patch_grid(config: Any, params: Mapping[str, inspect.Parameter]) -> tuple[int, int] | None:
    """``(patches, side)`` of a vision tower that takes its image cut into patches, with a
    patch mask and the patch grid's shape beside it (SigLIP2's NaFlex: ``pixel_values``
    ``[batch, num_patches, C * patch * patch]``, ``spatial_shapes``): a square grid of the
    config's ``num_patches``."""
    if "spatial_shapes" not in params:
        return None
    vision = _vision_config(config) or config
    patches = _config_int(vision, "num_patches")
    side = math.isqrt(patches) if patches is not None else 0
    if patches is None or side * side != patches:
        return None
    return patches, side


def _image_channels(module: nn.Module) -> int:
    config = _config(module)
    for cfg in (config, _vision_config(config)):
        channels = getattr(cfg, "num_channels", None) if cfg is not None else None
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
    """An input for a generically named parameter (``x``, ``input``): shaped by the first layer,
    or for a Hugging Face model whose config gives the features' size (``d_model``) and whose
    first layer takes features, a sequence of that size: Perceiver's ``inputs`` are
    [batch, seq, d_model] while its first LayerNorm is over its latents (``d_latents``)."""
    layer = _first_layer(module)
    d_model = _config_int(_config(module), "d_model")
    if d_model is not None and isinstance(layer, (nn.LayerNorm, nn.Linear)) \
            and _is_transformers(module):
        return InputSpec(name, "tensor", (batch, seq_len, d_model), float_dtype, keyword,
                         ("batch", "seq", "features"))
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


def _audio(
    module: nn.Module,
    name: str,
    kind: str,
    keyword: bool,
    batch: int,
    seq_len: int,
    float_dtype: torch.dtype,
    model_name: str,
) -> InputSpec:
    """Audio input, shaped from the config (the audio tower's, for a multimodal model):
    ``input_values`` a raw waveform (a spectrogram for the Audio Spectrogram Transformer),
    ``input_features`` log-mel frames."""
    config = _config(module)
    config = _sub_config(config, _AUDIO_CONFIG_NAMES) or config

    def spec(shape: tuple[int, ...], dims: tuple[str, ...]) -> InputSpec:
        return InputSpec(name, "audio", shape, float_dtype, keyword, dims)

    def cfg_int(attr: str) -> int | None:
        value = getattr(config, attr, None)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    mel = cfg_int("num_mel_bins")
    layer = _first_layer(module)
    if kind == "waveform":
        if mel is not None and cfg_int("max_length") is not None:  # AST: [batch, frames, mel]
            return spec((batch, cfg_int("max_length") or 0, mel), ("batch", "frames", "mel"))
        channels = cfg_int("audio_channels")  # EnCodec: [batch, channels, samples]
        hop = cfg_int("hop_length")
        if channels is None and hop is not None and cfg_int("sampling_rate") is not None \
                and isinstance(layer, nn.Conv1d):
            channels = layer.in_channels  # a codec (DAC): its first Conv1d's channels
        if channels is not None:
            samples = DEFAULT_SAMPLES
            if hop is not None and hop > 0:  # whole frames of the codec's hop
                samples = -(-samples // hop) * hop
            return spec((batch, channels, samples), ("batch", "channels", "samples"))
        if isinstance(layer, nn.Conv1d) and layer.in_channels == 1:  # wav2vec2 and kin
            return spec((batch, DEFAULT_SAMPLES), ("batch", "samples"))
    else:
        positions = cfg_int("max_source_positions")
        spec_size = cfg_int("spec_size")
        if mel is not None and spec_size is not None and spec_size >= mel:
            # CLAP: [batch, 1, frames, mel], the frames folded into a spec_size square image
            frames = spec_size * (spec_size // mel)
            return spec((batch, 1, frames, mel), ("batch", "channels", "frames", "mel"))
        if mel is not None and positions is not None and isinstance(layer, nn.Conv1d):
            # Whisper: the encoder takes exactly 2 * max_source_positions mel frames (30 s)
            return spec((batch, mel, 2 * positions), ("batch", "mel", "frames"))
        per_channel = cfg_int("input_feat_per_channel")
        if per_channel is not None:  # Speech2Text: [batch, frames, features x channels]
            features = per_channel * (cfg_int("input_channels") or 1)
            return spec((batch, seq_len, features), ("batch", "frames", "features"))
        feature_size = cfg_int("feature_size")
        if feature_size is not None:
            return spec((batch, seq_len, feature_size), ("batch", "frames", "features"))
        if mel is not None:  # a vocoder (UnivNet): mel frames [batch, frames, mel]
            return spec((batch, seq_len, mel), ("batch", "frames", "mel"))
    raise ZooError(
        f"cannot derive the audio input {name!r} of {model_name}: its config does not say "
        "what shape it takes",
        hint="pass --input-shape, or use a factory that returns (module, example_inputs)",
    )


def _float_dtype(module: nn.Module, dtype: torch.dtype | None) -> torch.dtype:
    float_dtype = dtype or _module_dtype(module)
    if float_dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        float_dtype = torch.float32
    return float_dtype


def _signature(module: nn.Module, model_name: str) -> inspect.Signature:
    problem = torchscript_problem(module)
    if problem is not None:
        raise ZooError(f"{model_name}: {problem}")
    try:
        return inspect.signature(module.forward)
    except (TypeError, ValueError) as exc:
        raise ZooError(
            f"cannot read the forward signature of {model_name}: {_first_line(exc)}",
            hint="use a factory that returns (module, example_inputs)",
        ) from exc


def _plan_inputs(
    module: nn.Module,
    *,
    model_name: str,
    batch: int,
    seq_len: int,
    image_size: int | None,
    frames: int | None,
    float_dtype: torch.dtype,
    shape_given: bool = False,
) -> list[InputSpec]:
    signature = _signature(module, model_name)
    config = _config(module)
    encoder_decoder = bool(getattr(config, "is_encoder_decoder", False))
    plans: list[InputSpec] = []
    positional_open = True  # still passing contiguous leading parameters positionally
    have_primary = False
    grid = _patch_grid(config, signature.parameters)
    series = _series_shape(config)
    named = _TOKEN_NAMES | _IMAGE_NAMES | _WAVEFORM_NAMES | _AUDIO_FEATURE_NAMES
    # a generic optional first parameter beside specifically named ones is an alias of
    # them (SpeechEncoderDecoderModel's `inputs` for input_values or input_features)
    alias = not named.isdisjoint(signature.parameters)
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
        elif n in _WAVEFORM_NAMES:
            kind = "waveform"
        elif n in _AUDIO_FEATURE_NAMES:
            kind = "features"
        elif encoder_decoder and any(p.name == n.removeprefix("decoder_")
                                     and p.kind in ("audio", "tensor") for p in plans):
            kind = "decoder_copy"  # decoder_input_values next to input_values (SpeechT5)
        elif n in _IMAGE_POSITION_NAMES and any(p.kind == "image" for p in plans):
            kind = "image_positions"
        elif n in _PATCH_MASK_NAMES or n in _PATCH_GRID_NAMES:
            kind = "patch_grid" if grid is not None else ""
        elif _feature_dim(config, n) is not None:
            kind = "regions"
        elif n == "past_values" and series is not None:
            kind = "series"
        elif n in _GENERIC_NAMES and alias and not required:
            kind = ""
        elif n in _GENERIC_NAMES or (required and not have_primary):
            kind = "structural"
        else:
            kind = ""
        if (
            kind in ("image", "image_list", "structural", "waveform", "features")
            and not required
            and have_primary
            and not (kind in ("image", "waveform", "features")
                     and _needs_every_modality(config, kind))
        ):
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
            elif grid is not None:
                channels *= int(_config_int(_vision_config(config) or config, "patch_size") or 1) ** 2
                plans.append(InputSpec(n, "image", (batch, grid[0], channels), float_dtype, keyword,
                                       ("batch", "patches", "features")))
            elif (clip := _config_frames(config)) is not None:
                # a transformers video model (VideoMAE, TimeSformer, ViViT, X-CLIP): frames
                # before channels, as many as its config says
                plans.append(
                    InputSpec(
                        n,
                        "video",
                        (batch, clip, channels, h, w),
                        float_dtype,
                        keyword,
                        ("batch", "frames", "channels", "height", "width"),
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
        elif kind == "patch_grid" and grid is not None:
            if n in _PATCH_MASK_NAMES:  # every patch is real
                plans.append(InputSpec(n, "pixel_mask", (batch, grid[0]), torch.int64, keyword,
                                       ("batch", "patches")))
            else:  # the grid's [rows, columns] per image
                plans.append(InputSpec(n, "grid", (batch, 2), torch.int64, keyword,
                                       ("batch", "axes"), fill=grid[1]))
        elif kind == "image_positions":
            # which text positions take the image's features (Kosmos-2): as many as the
            # image becomes (the config's latent_query_num), after the first token
            count = next((v for a in _IMAGE_QUERY_COUNT_NAMES
                          if (v := _config_int(config, a)) is not None), None)
            if count is None or count + 1 > seq_len:
                raise ZooError(
                    f"cannot derive {n!r} of {model_name}: "
                    + ("its config does not say how many positions an image takes"
                       if count is None else
                       f"an image takes {count} positions, more than --seq-len {seq_len} leaves"),
                    hint="pass a longer --seq-len, or use a factory that returns "
                    "(module, example_inputs)")
            plans.append(InputSpec(n, "image_positions", (batch, seq_len), torch.int64, keyword,
                                   ("batch", "seq"), fill=count))
        elif kind == "series" and series is not None:
            plans.append(InputSpec(n, "tensor", (batch, *series),
                                   float_dtype, keyword, ("batch", "time", "channels")))
        elif kind == "regions":
            plans.append(InputSpec(n, "tensor", (batch, DEFAULT_REGIONS, _feature_dim(config, n) or 0),
                                   float_dtype, keyword, ("batch", "regions", "features")))
        elif kind == "decoder_copy":
            source = next(p for p in plans if p.name == n.removeprefix("decoder_")
                          and p.kind in ("audio", "tensor"))
            plans.append(replace(source, name=n, keyword=keyword))
        elif kind in ("waveform", "features"):
            try:
                plans.append(_audio(module, n, kind, keyword, batch, seq_len, float_dtype,
                                    model_name))
            except ZooError:
                if isinstance(_first_layer(module), nn.LayerNorm):
                    # a bare encoder without its feature extractor (SpeechT5Model) takes
                    # hidden states [batch, seq_len, hidden]
                    plans.append(_structural(module, n, keyword, batch, seq_len, image_size,
                                             frames, float_dtype, model_name))
                elif shape_given and not have_primary:
                    # --input-shape gives its shape (applied after planning): an audio
                    # input the config says nothing about (a custom model)
                    plans.append(InputSpec(n, "audio", (), float_dtype, keyword, ()))
                else:
                    raise
        else:
            try:
                plans.append(_structural(module, n, keyword, batch, seq_len, image_size,
                                         frames, float_dtype, model_name))
            except ZooError:
                if not shape_given or have_primary:
                    raise
                # --input-shape gives the primary input's shape (applied after planning):
                # a float tensor, whatever the first layer is (a quantized Linear, say)
                plans.append(InputSpec(n, "tensor", (), float_dtype, keyword, ()))
        if kind not in ("mask", "patch_grid", "image_positions", "decoder_tokens"):
            have_primary = True
    # An attention mask only makes sense next to token ids (the encoder's, where there is
    # an encoder: Whisper's mask would be for its audio frames).
    if not any(p.kind == "tokens" and p.name not in _DECODER_TOKEN_NAMES for p in plans):
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
    if plan.kind in ("mask", "pixel_mask"):
        t = torch.ones(shape, dtype=plan.dtype)
    elif plan.kind == "grid":
        t = torch.full(shape, plan.fill or 0, dtype=plan.dtype)
    elif plan.kind == "image_positions":
        t = torch.zeros(shape, dtype=plan.dtype)
        t[:, 1 : 1 + (plan.fill or 0)] = 1
    elif plan.kind == "tokens":
        t = torch.randint(0, plan.high or 1000, shape, generator=gen, dtype=plan.dtype)
    elif plan.kind == "image_list":
        t = torch.rand(shape, generator=gen).to(plan.dtype)  # detection models take 0..1 images
    else:
        t = torch.randn(shape, generator=gen).to(plan.dtype)
    return t.to(device)


def _check_input_memory(plans: Sequence[InputSpec], model_name: str) -> None:
    """Refuse example inputs that cannot fit in memory before allocating any of them."""
    total = 0
    for plan in plans:
        numel = 1
        for d in plan.shape:
            numel *= d
        total += numel * (plan.count or 1) * plan.dtype.itemsize
    avail = _mem_available()
    if avail is not None and total > 0.8 * avail:
        desc = ", ".join(p.describe() for p in plans)
        raise ZooError(
            f"the example inputs of {model_name} ({desc}) need {total / 2**30:.3g} GiB, more "
            f"than the {avail / 2**30:.1f} GiB of memory available",
            hint="pass a smaller --input-shape, --batch or --seq-len, or --meta",
        )


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
    positionally, optional and keyword-only ones as keywords. A diffusers model's inputs come
    from its config (:func:`_diffusion_plans`).
    """
    b = batch or DEFAULT_BATCH
    if is_diffusion_model(module):
        plans = _diffusion_plans(module, _signature(module, model_name), model_name=model_name,
                                 batch=b, seq_len=seq_len, float_dtype=_float_dtype(module, dtype))
        if input_shape is not None:
            plans = _apply_input_shape(plans, tuple(int(d) for d in input_shape), batch)
        return _realise(plans, torch.device(device), model_name)
    max_pos = _max_positions(_config(module))
    # the default sequence fits the model (CLIP's text tower takes 77 tokens); one asked
    # for that does not is refused below
    s = seq_len or min(DEFAULT_SEQ_LEN, max_pos or DEFAULT_SEQ_LEN)
    dev = torch.device(device)
    float_dtype = _float_dtype(module, dtype)
    plans = _plan_inputs(
        module,
        model_name=model_name,
        batch=b,
        seq_len=s,
        image_size=image_size,
        frames=frames,
        float_dtype=float_dtype,
        shape_given=input_shape is not None,
    )
    if input_shape is not None:
        plans = _apply_input_shape(plans, tuple(int(d) for d in input_shape), batch)
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
    return _realise(plans, dev, model_name)


def _realise(plans: list[InputSpec], dev: torch.device, model_name: str
             ) -> tuple[tuple[Any, ...], dict[str, Any], list[InputSpec]]:
    """The planned inputs as tensors (seeded), split into positional and keyword ones."""
    if dev.type != "meta":
        _check_input_memory(plans, model_name)
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
        if plan.keyword and "." in plan.name:  # one entry of a dict argument
            outer, _, key = plan.name.partition(".")
            kwargs.setdefault(outer, {})[key] = value
        elif plan.keyword:
            kwargs[plan.name] = value
        else:
            args.append(value)
        specs.append(plan)
    return tuple(args), kwargs, specs


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
    return InputSpec(name, "value", (), torch.float32, keyword, text=_value_text(value))


def _value_text(value: Any, depth: int = 0) -> str:
    """A factory's non-tensor example input in a few words: ``bool False``,
    ``dict{scale: float32[]}``, ``tuple(int64[2, 3], None)``; long ones cut short."""
    if isinstance(value, torch.Tensor):
        return f"{str(value.dtype).removeprefix('torch.')}[{', '.join(map(str, value.shape))}]"
    if value is None or isinstance(value, bool | int | float | complex | str):
        text = repr(value) if value is None else f"{type(value).__name__} {value!r}"
        return text if len(text) <= 40 else text[:37] + "..."
    if depth < 2 and isinstance(value, dict):
        items = [f"{k}: {_value_text(v, depth + 1)}" for k, v in list(value.items())[:4]]
        return "dict{" + ", ".join(items) + (", ..." if len(value) > 4 else "") + "}"
    if depth < 2 and isinstance(value, list | tuple):
        items = [_value_text(v, depth + 1) for v in value[:4]]
        return (f"{type(value).__name__}(" + ", ".join(items)
                + (", ..." if len(value) > 4 else "") + ")")
    return type(value).__qualname__



# --------------------------------------------------------------------------------------------
# Diffusion models (diffusers' ModelMixin classes): inputs from the config
# --------------------------------------------------------------------------------------------

DEFAULT_LATENT_SIZE = 64
"""Latent side where a diffusion model's config gives no ``sample_size``: Stable Diffusion
1.5's 64x64 latents (512x512 images)."""
DEFAULT_TEXT_LEN = 77
"""Text tokens of a diffusion model's ``encoder_hidden_states`` unless --seq-len says: CLIP's
77, what Stable Diffusion's text encoders give."""
DEFAULT_LATENT_FRAMES = 8
"""Latent frames of a video diffusion model whose config names none."""
DEFAULT_TIMESTEP = 1
"""Every ``timestep`` element: small, so that models scaling it (Flux: x1000) keep their
sinusoid arguments where float32 is exact to 1e-4."""
_LATENT_NAMES = ("sample", "hidden_states")
_TEXT_DIM_KEYS = ("encoder_hid_dim", "joint_attention_dim", "caption_channels", "cap_feat_dim",
                  "context_in_dim", "text_embed_dim", "text_dim", "in_text_dim",
                  "text_hidden_dim", "dit_text_dim", "cross_attention_dim")
"""Config settings that give the feature size of ``encoder_hidden_states``, first that is
set wins (a UNet's ``encoder_hid_dim`` projects text of that size to its
``cross_attention_dim``; PixArt's ``caption_channels`` to its)."""


def is_diffusion_model(module: nn.Module) -> bool:
    """A diffusers model class (its config is a diffusers FrozenDict of settings)."""
    return type(module).__module__.startswith("diffusers.") and isinstance(_config(module), Mapping)


_VIDEO_KEYS = ("num_frames", "sample_frames", "patch_size_t")
"""Config settings only a video model has: its sample is 5-d even where its first conv is
2-d (a per-frame patch embedding)."""
_TEMPORAL_RATIO_KEYS = ("temporal_compression_ratio", "temporal_compress_times",
                        "scale_factor_temporal")


def _frames(config: Mapping[str, Any]) -> int:
    """Frames of a video diffusion model's 5-d sample: the config's ``num_frames`` /
    ``sample_frames``; for a causal video VAE with a temporal compression ratio r, 2r + 1
    (the first frame alone, then whole groups of r); else :data:`DEFAULT_LATENT_FRAMES`."""
    for key in ("num_frames", "sample_frames"):
        if (value := _config_int(config, key)) is not None:
            return value
    for key in _TEMPORAL_RATIO_KEYS:
        if (ratio := _config_int(config, key)) is not None:
            return 2 * ratio + 1
    return DEFAULT_LATENT_FRAMES


def _first_conv(module: nn.Module) -> nn.Module | None:
    for sub in module.modules():
        if isinstance(sub, (nn.Conv1d, nn.Conv2d, nn.Conv3d)):
            return sub
    return None


def _latent_side(config: Mapping[str, Any]) -> tuple[int, int]:
    size = config.get("sample_size")
    if isinstance(size, (list, tuple)) and len(size) == 2 and all(isinstance(s, int) for s in size):
        return int(size[0]), int(size[1])
    if isinstance(size, int) and not isinstance(size, bool) and size > 0:
        return size, size
    return DEFAULT_LATENT_SIZE, DEFAULT_LATENT_SIZE


def _time_id_count(config: Mapping[str, Any]) -> int | None:
    """How many numbers ``added_time_ids`` holds: their sinusoids (``addition_time_embed_dim``
    each) fill ``projection_class_embeddings_input_dim``."""
    total = _config_int(config, "projection_class_embeddings_input_dim")
    per_id = _config_int(config, "addition_time_embed_dim")
    return total // per_id if total is not None and per_id else None


def _added_conditions(module: nn.Module, config: Mapping[str, Any], name: str, batch: int,
                      float_dtype: torch.dtype) -> list[InputSpec]:
    """The extra conditions (a dict of tensors, planned as ``NAME.KEY``) that a config calls
    for: SDXL's ``text_time`` (pooled text embeddings and the 6 size/crop numbers, their
    sinusoids filling ``projection_class_embeddings_input_dim``), PixArt's resolution and
    aspect ratio (``use_additional_conditions``)."""
    plans: list[InputSpec] = []
    if config.get("addition_embed_type") == "text_time":
        total = _config_int(config, "projection_class_embeddings_input_dim") or 0
        per_id = _config_int(config, "addition_time_embed_dim") or 0
        plans.append(InputSpec(f"{name}.text_embeds", "tensor", (batch, total - 6 * per_id),
                               float_dtype, True, ("batch", "features")))
        plans.append(InputSpec(f"{name}.time_ids", "tensor", (batch, 6), float_dtype, True,
                               ("batch", "ids")))
    if getattr(module, "use_additional_conditions", None) is True:
        plans.append(InputSpec(f"{name}.resolution", "tensor", (batch, 2), float_dtype, True,
                               ("batch", "sizes")))
        plans.append(InputSpec(f"{name}.aspect_ratio", "tensor", (batch, 1), float_dtype, True,
                               ("batch", "ratio")))
    return plans


def _diffusion_plans(module: nn.Module, signature: inspect.Signature, *, model_name: str,
                     batch: int, seq_len: int | None, float_dtype: torch.dtype) -> list[InputSpec]:
    """Inputs of a diffusion model, from its config and forward signature: the latent
    ``sample``/``hidden_states`` (``[B, in_channels, H, W]`` at the config's ``sample_size``,
    5-d ``[B, C, frames, H, W]`` where the first conv is 3-d or the config has frames
    (:data:`_VIDEO_KEYS`), or ``[B, tokens, in_channels]``
    for a model that takes packed tokens with their ``img_ids``), ``timestep`` ``[B]``,
    ``encoder_hidden_states`` ``[B, text, dim]`` (dim from the config, see
    :data:`_TEXT_DIM_KEYS`), ``pooled_projections``, ``img_ids``/``txt_ids`` (rope positions,
    one column per ``axes_dims_rope`` entry), ``guidance`` (``guidance_embeds``),
    ``class_labels`` (ids below ``num_embeds_ada_norm``/``num_class_embeds``) and a
    ControlNet's ``controlnet_cond`` image. Optional parameters the config does not call for
    are left out."""
    config: Mapping[str, Any] = _config(module)
    params = signature.parameters
    text = seq_len or _config_int(config, "max_text_seq_length") or DEFAULT_TEXT_LEN
    h, w = _latent_side(config)
    channels = _config_int(config, "in_channels")
    conv = _first_conv(module)
    if channels is None and conv is not None:
        channels = int(conv.in_channels)  # type: ignore[arg-type]
    packed = "img_ids" in params and config.get("sample_size") is None
    # Flux and kin take latents packed 2x2 into tokens: a 32x32 grid for 64x64 latents
    tokens = (h // 2) * (w // 2) if packed else 0
    axes = config.get("axes_dims_rope")
    n_axes = len(axes) if isinstance(axes, (list, tuple)) else 3
    labels = next((v for k in ("num_embeds_ada_norm", "num_class_embeds")
                   if (v := _config_int(config, k)) is not None), None)
    plans: list[InputSpec] = []
    positional_open = True
    for param in params.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            positional_open = False
            continue
        n = param.name
        required = param.default is inspect.Parameter.empty
        plan: InputSpec | None = None
        if n in _LATENT_NAMES and not any(p.name in _LATENT_NAMES for p in plans):
            if packed:
                plan = InputSpec(n, "tensor", (batch, tokens, channels or 64), float_dtype, False,
                                 ("batch", "tokens", "channels"))
            elif isinstance(conv, nn.Conv3d) or any(k in config for k in _VIDEO_KEYS):
                frames = _frames(config)
                plan = InputSpec(n, "tensor", (batch, channels or 4, frames, h, w), float_dtype,
                                 False, ("batch", "channels", "frames", "height", "width"))
            elif isinstance(conv, nn.Conv1d):  # sample_size is the length
                plan = InputSpec(n, "tensor", (batch, channels or 4, h), float_dtype, False,
                                 ("batch", "channels", "length"))
            else:
                plan = InputSpec(n, "tensor", (batch, channels or 4, h, w), float_dtype, False,
                                 ("batch", "channels", "height", "width"))
        elif n in ("timestep", "timesteps"):
            plan = InputSpec(n, "grid", (batch,), torch.int64, False, ("batch",),
                             fill=DEFAULT_TIMESTEP)
        elif n == "encoder_hidden_states":
            dim = next((v for k in _TEXT_DIM_KEYS if (v := _config_int(config, k)) is not None),
                       None)
            if dim is not None:
                plan = InputSpec(n, "tensor", (batch, text, dim), float_dtype, False,
                                 ("batch", "seq", "features"))
        elif n == "added_time_ids" and (ids := _time_id_count(config)) is not None:
            # Stable Video Diffusion: fps, motion bucket, noise augmentation strength
            plan = InputSpec(n, "tensor", (batch, ids), float_dtype, False, ("batch", "ids"))
        elif n == "encoder_attention_mask" and required:  # every text token is real
            plan = InputSpec(n, "mask", (batch, text), torch.int64, False, ("batch", "seq"))
        elif n == "pooled_projections":
            dim = _config_int(config, "pooled_projection_dim")
            if dim is not None:
                plan = InputSpec(n, "tensor", (batch, dim), float_dtype, False,
                                 ("batch", "features"))
        elif n in ("img_ids", "txt_ids") and packed:
            rows = tokens if n == "img_ids" else text
            plan = InputSpec(n, "tensor", (rows, n_axes), float_dtype, False, ("seq", "axes"))
        elif n == "guidance" and config.get("guidance_embeds"):
            plan = InputSpec(n, "grid", (batch,), float_dtype, False, ("batch",), fill=1)
        elif n == "class_labels" and labels is not None and (
                required or config.get("class_embed_type") is not None
                or "num_embeds_ada_norm" in config):
            plan = InputSpec(n, "tokens", (batch,), torch.int64, False, ("batch",), high=labels)
        elif n == "controlnet_cond":
            blocks = config.get("conditioning_embedding_out_channels")
            scale = 2 ** (len(blocks) - 1) if isinstance(blocks, (list, tuple)) and blocks else 8
            plan = InputSpec(n, "tensor",
                             (batch, _config_int(config, "conditioning_channels") or 3,
                              h * scale, w * scale), float_dtype, False,
                             ("batch", "channels", "height", "width"))
        elif n == "added_cond_kwargs":
            plans += _added_conditions(module, config, n, batch, float_dtype)
            positional_open = False
            continue
        if plan is None:
            if required:
                raise ZooError(
                    f"cannot derive an example input for required parameter {n!r} of "
                    f"{model_name}.forward from its config",
                    hint="use a factory that returns (module, example_inputs)")
            positional_open = False
            continue
        positional = positional_open and required and param.kind in (
            param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD)
        positional_open = positional_open and positional
        plans.append(replace(plan, keyword=not positional))
    if not plans:
        raise ZooError(f"found no input to derive from the forward signature of {model_name} "
                       f"{signature}", hint="use a factory that returns (module, example_inputs)")
    return plans
