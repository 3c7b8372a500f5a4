"""Building a graph of N nodes allocates O(N) objects that all stay alive (nodes, values,
use lists): CPython's cyclic collector then runs full collections over the growing heap
again and again, which makes building superlinear (measured by tools/bench_scale.py: ONNX
import 11x slower at 100k nodes than at 10k with the collector on, 8.5x with it paused).
The readers, the lowering, `verify`, the analysis and the ONNX and StableHLO exporters
pause it while they work, and restore it after."""

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
    everything that is not in a cycle); the collector's state is restored after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def gc_paused(fn: Callable[P, R]) -> Callable[P, R]:
    """`fn` runs with the cyclic collector paused."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with paused():
            return fn(*args, **kwargs)

    return wrapper
