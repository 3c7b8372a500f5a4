"""Every decomposition a registry op names lazily (registry.LazyDecompositions) exists in
its module, and the read-only start-up does not import those modules."""

from __future__ import annotations

import importlib
import subprocess
import sys

from irbridge.ops import registry

DECOMPOSITION_MODULES = ("irbridge.ops._gamma_decomp", "irbridge.ops._bessel_decomp",
                         "irbridge.ops._misc_decomp", "irbridge.ops._linalg_decomp")


def test_every_lazy_decomposition_target_exists() -> None:
    lazy = [(s.name, s.decompose.lazy_target) for s in registry.all_ops()  # type: ignore
            if s.decompose is not None and hasattr(s.decompose, "lazy_target")]
    assert len(lazy) >= 40, lazy   # the special-function and linear-algebra families
    for op, (module, name) in lazy:
        assert callable(getattr(importlib.import_module(module), name, None)), (op, name)


def test_importing_the_registry_leaves_the_decomposition_modules_out() -> None:
    code = ("import sys, irbridge.ops; "
            f"print([m for m in {DECOMPOSITION_MODULES!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]", out
