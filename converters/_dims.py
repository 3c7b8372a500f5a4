"""The check the importers share for `dims` (`--bind NAME=SIZE`): every name must be one of
the file's symbolic dims, every size an integer of at least 1 (below 2^62). One line each,
naming the file."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from irbridge.errors import FileFormatError, UnknownDimError


def check_bindings(dims: Mapping[str, int], known: Collection[str], source: str, *,
                   dim: str, dims_named: str) -> None:
    """`dim` says what a bindable dim is ("graph input dim"), `dims_named` how the list
    of the file's symbols is introduced ("symbolic input dims")."""
    listed = ", ".join(sorted(known)) or "none"
    for name, size in dims.items():
        if name not in known:
            raise UnknownDimError(f"{source}: cannot bind {name!r}: no {dim} is named so "
                                  f"(its {dims_named}: {listed})", tuple(sorted(known)))
        if not isinstance(size, int) or isinstance(size, bool) or not 1 <= size < 2**62:
            raise FileFormatError(f"{source}: cannot bind {name!r} to {size!r}: a size must "
                                  "be an integer of at least 1")
