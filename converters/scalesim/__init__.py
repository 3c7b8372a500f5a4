"""SCALE-Sim back-end: `write(model, folder, hardware=NAME)` writes a conv topology CSV,
a GEMM (M, N, K) topology CSV, a .cfg derived from a hardware target and a layer map.
See docs/simulators.md."""

from irbridge.converters.scalesim.export import ARRAYS, derive_config, rows_of, write
from irbridge.converters.scalesim.run import RowCycles, numpy2_compat, run

__all__ = ["ARRAYS", "RowCycles", "derive_config", "numpy2_compat", "rows_of", "run", "write"]
