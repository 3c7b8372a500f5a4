"""The inlining budget the importers share: how many ops (ONNX nodes, StableHLO ops) a
model may expand to once its calls (StableHLO `func.call`, ONNX model-local functions)
are inlined. Checked before inlining, so a file of 40 functions that each call the next
twice (2^40 ops) is refused in one line instead of exhausting memory."""

from __future__ import annotations

import os

from irbridge.errors import CaptureError

MAX_INLINED_OPS = 2_000_000
"""Most ops a model may expand to once every call is inlined (each call site copies its
callee). `IRBRIDGE_MAX_INLINED_OPS` overrides."""


def inline_budget() -> int:
    text = os.environ.get("IRBRIDGE_MAX_INLINED_OPS", "")
    if not text:
        return MAX_INLINED_OPS
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value <= 0:
        raise CaptureError(f"IRBRIDGE_MAX_INLINED_OPS={text!r} is not a positive integer")
    return value
