"""The PyTorch model zoo behind ``irbridge convert MODEL`` and ``irbridge models``.

A model is named in one of these ways:

* a registered name (see :func:`list_models`): a torchvision architecture (``resnet18``,
  ``fasterrcnn_resnet50_fpn``, ...), a Hugging Face preset built from its config class
  (``bert-base-uncased``, ``gpt2``, ``llama-3-70b``, ...) or an ultralytics YAML name
  (``yolov8n``, ``yolo11s-seg``, ...);
* ``hf:MODEL_TYPE`` or ``hf:MODEL_TYPE:TASK``: any transformers architecture built from the
  default config of that model type (``hf:roberta``, ``hf:gpt_neox:causal-lm``);
* ``timm:NAME``: any timm architecture (``timm.create_model(NAME)``, random weights, the
  input size of its own pretrained config; needs the ``timm`` extra);
* ``diffusers:ClassName`` or ``diffusers:ClassName:config.json``: a Hugging Face diffusers
  model class (UNet, VAE, DiT / SD3 / Flux transformer, ControlNet, ...) from its default
  config, or with the JSON file's settings over the defaults (the ``diffusers`` extra);
* ``path/to/file.py:Name`` or ``package.module:Name``: a user's ``nn.Module`` class
  (instantiated with no arguments) or factory (called with no arguments; it may return a
  module or ``(module, example_inputs)``);
* ``path/to/model.pt``: a pickled full model (also an ultralytics checkpoint). Unpickling runs
  code from the file, so it is refused unless ``trust_checkpoint=True``;
* ``path/to/folder``: a Hugging Face model folder (``config.json`` and its weights); a
  config that names code in the folder (``auto_map``) needs ``trust_checkpoint=True``; a
  diffusers model folder (its config names a ``_class_name``) builds that class, with its
  safetensors weights (pickled ``.bin`` weights need ``trust_checkpoint=True``);
* ``path/to/program.pt2``: a ``torch.export.save`` archive; its module is captured with the
  archive's weights and example inputs. ``torch.export.load`` runs code from the file, so it is
  refused unless ``trust_checkpoint=True``;
* ``path/to/custom.yaml``: an ultralytics model YAML.

Nothing is downloaded unless ``pretrained=True`` is asked for: weights are random, drawn after
``torch.manual_seed(0)`` so that two builds are identical, or come from a local state_dict
(``weights_file``). ``device="meta"`` builds without allocating weights.

Example inputs are derived from the parameters of the model's ``forward`` (their names,
annotations and defaults) and from the model itself (its config, its first layer), never
from the model's name. :func:`check_inputs` runs one trial forward; :func:`eager_blame`
turns a capture failure into an error about the inputs when the eager model rejects them too.

The package holds one module per family: :mod:`.tv` (torchvision), :mod:`.hf` (Hugging Face
transformers presets and ``hf:TYPE``), :mod:`.timm` (``timm:NAME``), :mod:`.diffusers`
(``diffusers:ClassName``), :mod:`.yolo` (ultralytics YAMLs), :mod:`.user` (your
``file.py:Name``), :mod:`.files` (pickled checkpoints, model YAMLs, state_dict weights), with
:mod:`.common` (types, constants), :mod:`.registry` (name lookup), :mod:`.inputs` (example
inputs) and :mod:`.builder` (:func:`build`, :func:`check_inputs`, :func:`eager_blame`).
"""

from __future__ import annotations

from .builder import build, check_inputs, eager_blame
from .common import (
    CHECKPOINT_SUFFIXES,
    DEFAULT_BATCH,
    DEFAULT_FRAMES,
    DEFAULT_IMAGE_SIZE,
    DEFAULT_SEQ_LEN,
    FAMILIES,
    FAMILY_CHECKPOINT,
    FAMILY_HF,
    FAMILY_TV_CLS,
    FAMILY_TV_DET,
    FAMILY_TV_SEG,
    FAMILY_TV_VIDEO,
    FAMILY_USER,
    FAMILY_YOLO,
    MODEL_SPEC_HELP,
    SEED,
    WEIGHTS_ONLY_SUFFIXES,
    BuiltModel,
    InputSpec,
    ModelEntry,
    ModelTooBig,
    ZooError,
)
from .inputs import derive_inputs
from .registry import entry_to_dict, find_model, list_models, model_names

__all__ = [
    "CHECKPOINT_SUFFIXES",
    "DEFAULT_BATCH",
    "DEFAULT_FRAMES",
    "DEFAULT_IMAGE_SIZE",
    "DEFAULT_SEQ_LEN",
    "FAMILIES",
    "FAMILY_CHECKPOINT",
    "FAMILY_HF",
    "FAMILY_TV_CLS",
    "FAMILY_TV_DET",
    "FAMILY_TV_SEG",
    "FAMILY_TV_VIDEO",
    "FAMILY_USER",
    "FAMILY_YOLO",
    "MODEL_SPEC_HELP",
    "SEED",
    "WEIGHTS_ONLY_SUFFIXES",
    "BuiltModel",
    "InputSpec",
    "ModelEntry",
    "ModelTooBig",
    "ZooError",
    "build",
    "check_inputs",
    "derive_inputs",
    "eager_blame",
    "entry_to_dict",
    "find_model",
    "list_models",
    "model_names",
]
