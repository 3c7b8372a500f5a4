"""Schemas of the ops onnxruntime registers in the default ONNX domain without ONNX defining
them, registered with the onnx package so that `onnx.checker` accepts files that use them
(it rejects a default-domain op it has no schema for: "No Op registered for ...").

Only `SimplifiedLayerNormalization` (RMS normalisation, which onnxruntime's optimizers
write for LLaMA-style models) is registered; `_import_contrib` maps it to `rms_norm`. The
schema has no shape inference: the registry infers the mapped op's types. Registration is
process-wide and happens once, when the importer is imported; an op that ONNX itself
defines under the name later is left to ONNX (its schema wins).
"""

from __future__ import annotations

from onnx import defs

_FLOATS = ["tensor(float)", "tensor(float16)", "tensor(double)", "tensor(bfloat16)"]


def _attribute(name: str, kind: defs.OpSchema.AttrType) -> defs.OpSchema.Attribute:
    return defs.OpSchema.Attribute(name, kind, "", required=False)


def register() -> None:
    if defs.has("SimplifiedLayerNormalization", ""):
        return
    parameter = defs.OpSchema.FormalParameter
    optional = defs.OpSchema.FormalParameterOption.Optional
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
