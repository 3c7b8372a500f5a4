"""Schemas of the ops onnxruntime registers in the default ONNX domain without ONNX defining
them, registered with the onnx package so that `onnx.checker` accepts files that use them
(it rejects a default-domain op it has no schema for: "No Op registered for ...").

Two are registered, both at version 1 as onnxruntime does:

* `SimplifiedLayerNormalization` (RMS normalisation, which onnxruntime's optimizers write
  for LLaMA-style models); `_import_contrib` maps it to `rms_norm`.
* `LayerNormalization`, which ONNX defines only from opset 17 while onnxruntime's
  optimizers (and a session's saved optimised model) write it into files of any opset:
  below 17 the checker finds no schema ("No Op registered for LayerNormalization with
  domain_version of 14"). From opset 17 on ONNX's own LayerNormalization-17 is the newer
  schema and wins; `_import_ops` maps either to `layer_norm`.

The schemas have no shape inference: the registry infers the mapped op's types.
Registration is process-wide and happens once, when the importer is imported; an op
schema that ONNX itself already has at version 1 is left to ONNX.
"""

from __future__ import annotations

from onnx import defs

_FLOATS = ["tensor(float)", "tensor(float16)", "tensor(double)", "tensor(bfloat16)"]


def _attribute(name: str, kind: defs.OpSchema.AttrType) -> defs.OpSchema.Attribute:
    return defs.OpSchema.Attribute(name, kind, "", required=False)


def _has_version_1(name: str) -> bool:
    try:
        return defs.get_schema(name, 1, "").since_version == 1
    except defs.SchemaError:
        return False


def register() -> None:
    parameter = defs.OpSchema.FormalParameter
    optional = defs.OpSchema.FormalParameterOption.Optional
    if not _has_version_1("LayerNormalization"):
        defs.register_schema(defs.OpSchema(
            "LayerNormalization", "", 1,
            doc="onnxruntime's layer normalisation before ONNX's LayerNormalization-17: "
                "(X - mean) / sqrt(var + epsilon) * Scale + B over axis..",
            inputs=[parameter("X", "T"), parameter("Scale", "V"),
                    parameter("B", "V", param_option=optional)],
            outputs=[parameter("Y", "V"), parameter("Mean", "U", param_option=optional),
                     parameter("InvStdDev", "U", param_option=optional)],
            type_constraints=[("T", _FLOATS, ""),
                              ("U", ["tensor(float)", "tensor(double)", "tensor(bfloat16)"],
                               ""),
                              ("V", _FLOATS, "")],
            attributes=[_attribute("axis", defs.OpSchema.AttrType.INT),
                        _attribute("epsilon", defs.OpSchema.AttrType.FLOAT),
                        _attribute("stash_type", defs.OpSchema.AttrType.INT)]))
    if _has_version_1("SimplifiedLayerNormalization"):
        return
    schema = defs.OpSchema(
        "SimplifiedLayerNormalization", "", 1,
        doc="onnxruntime's RMS normalisation: X / sqrt(mean(X^2 over axis..) + epsilon) "
            "* scale",
        inputs=[parameter("X", "T"), parameter("scale", "V")],
        outputs=[parameter("Y", "V"), parameter("inv_std_var", "U", param_option=optional)],
        type_constraints=[("T", _FLOATS, ""), ("U", ["tensor(float)", "tensor(double)"], ""),
                          ("V", _FLOATS, "")],
        attributes=[_attribute("axis", defs.OpSchema.AttrType.INT),
                    _attribute("epsilon", defs.OpSchema.AttrType.FLOAT),
                    _attribute("stash_type", defs.OpSchema.AttrType.INT)])
    defs.register_schema(schema)


register()
