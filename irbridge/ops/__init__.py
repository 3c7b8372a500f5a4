"""The neutral op set. Importing this package registers every op definition."""

from irbridge.ops import (  # noqa: F401  (register on import)
    bitwise,
    complex,
    datadep,
    dynamic,
    elementwise,
    indexing,
    linalg,
    nn,
    special,
    tensor,
)
from irbridge.ops.registry import (
    OPSET_VERSION,
    Category,
    OpSchema,
    all_ops,
    get,
    infer_types,
    lookup,
    node_cost,
)

__all__ = ["OPSET_VERSION", "Category", "OpSchema", "all_ops", "get", "infer_types", "lookup",
           "node_cost"]
