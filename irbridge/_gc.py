"""Building a graph of N nodes allocates O(N) objects that all stay alive (nodes, values,
use lists): CPython's cyclic collector then runs full collections over the growing heap
again and again, which makes building superlinear in the node count (tools/bench_scale.py
measures each stage at 1k, 10k and 100k nodes).
The readers, the lowering, `verify`, the analysis and the ONNX and StableHLO exporters
pause it while they work, and restore it after.

What such a call built and returns (a whole model) is long-lived by construction. Left in
the youngest generation, the first allocation after the collector is switched back on
would traverse all of it at once (0.4 s for the million objects of a 100k-node import,
measured with `gc.collect(0)`), and again when it is promoted to the middle generation.
So, when the outermost paused call ends, everything the collector tracks is moved
straight to the oldest generation (`gc.freeze()` then `gc.unfreeze()`, two list splices):
it is collected by full collections only, as objects that survived the young ones are.
A process that keeps its own frozen objects (`gc.freeze()`, e.g. before forking workers)
is left as it is: unfreezing would hand its objects back to the collector."""

from __future__ import annotations

import contextlib
import functools
import gc
from collections.abc import Callable, Iterator
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """No cyclic garbage collection inside the block (reference counting still frees
    everything that is not in a cycle); the collector's state is restored after, with what
    the block built moved to the oldest generation (see the module's docstring)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            if gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()


def gc_paused(fn: Callable[P, R]) -> Callable[P, R]:
    """`fn` runs with the cyclic collector paused."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with paused():
            return fn(*args, **kwargs)

    return wrapper
