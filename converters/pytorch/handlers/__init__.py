"""Lowering tables: exact fx targets -> neutral IR.

Four tables (in `_base`), all keyed by the exact object the fx graph holds, never by a name pattern:

* `ATEN`      ATen `OpOverload`s (torch.export and make_fx graphs), handlers take the
              arguments bound to the op's schema (names and defaults from `_schema`);
* `FUNCTIONS` Python callables (`torch.relu`, `torch.nn.functional.layer_norm`,
              `operator.add`, ...) of fx and Dynamo graphs;
* `METHODS`   `Tensor` method names of call_method nodes (`"view"`, `"size"`, ...);
* `MODULES`   `nn.Module` classes of call_module nodes (fx leaf modules).

Many Python-level entries are aliases of an ATen op: their arguments are bound to that
op's schema and the ATen handler runs. Everything else falls back to the engine's
re-trace to ATen (lower.py).
"""

from __future__ import annotations

from ._base import ATEN, FUNCTIONS, METHODS, MODULES, lookup, mutated_input

# Importing a family registers its handlers. The order matters: an alias registered by
# `_alias` needs its ATen handler registered first.
# isort: off
from . import elementwise  # noqa: F401
from . import linear  # noqa: F401
from . import norm  # noqa: F401
from . import attention  # noqa: F401
from . import pooling  # noqa: F401
from . import reduction  # noqa: F401
from . import linalg  # noqa: F401
from . import shapes  # noqa: F401
from . import creation  # noqa: F401
from . import fft  # noqa: F401
from . import python  # noqa: F401
from . import modules  # noqa: F401
from . import backward  # noqa: F401
# isort: on

__all__ = ["ATEN", "FUNCTIONS", "METHODS", "MODULES", "lookup", "mutated_input"]
