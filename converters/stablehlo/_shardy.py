"""Shardy (`sdy`) modules: re-printed in MLIR's generic form with jaxlib's bindings.

JAX (0.7 and later) writes the shardings of a multi-device program with the Shardy
dialect: an `sdy.mesh` symbol, `#sdy.sharding<@mesh, [...]>` attributes on arguments,
results and ops, `sdy.sharding_constraint` / `sdy.reshard` ops (`with_sharding_constraint`)
and, for `shard_map`, `sdy.manual_computation`. torch-mlir's bindings, which the importer
parses with, do not register `sdy`, so its custom syntax (`sdy.mesh @mesh = <[...]>`) and
its bytecode do not read there. MLIR's generic form does: `"sdy.mesh"() <{...}>` is an op of
an unregistered dialect and `#sdy.sharding<...>` an opaque attribute, both of which an
unregistered-dialects context keeps verbatim.

So a module that uses `sdy` ops (or whose bytecode names the dialect) is read once with
jaxlib's MLIR bindings, which register `sdy`, `stablehlo` and `chlo` (whoever wrote the
file had jaxlib installed), CHLO is legalised to StableHLO on the way (as `_chlo.py` does),
and the module is printed in generic form with its locations; the importer parses that
text as usual. The read happens in a child process: jaxlib is never imported into the
importing process (its start-up cost stays out of every other import), a crash of MLIR's
reader on corrupt bytecode takes only the child, and nothing of the file is executed
(MLIR parses data; no Python object is deserialised). Without jaxlib the file is refused
in one line saying so.
"""

from __future__ import annotations

import importlib.util
import re
import signal
import subprocess
import sys

from irbridge.errors import FileFormatError

from ._mlir import one_line

_SHARDY_OP = re.compile(r"^[ \t]*(?:%[^=\n\"]*=[ \t]*)?sdy\.[a-z_]+", re.MULTILINE)
"""An `sdy` op written in its custom syntax (at the start of a line, perhaps after its
results): `sdy.mesh @mesh = ...`, `%1 = sdy.sharding_constraint %0 ...`. Ops in generic
form (`"sdy.mesh"()`) and `#sdy.` attributes parse without jaxlib."""

_SHARDY_PROBLEM = re.compile(r"[Dd]ialect [`']sdy'")


def uses_shardy_syntax(text: str) -> bool:
    """Whether MLIR text holds `sdy` ops in custom syntax (which needs jaxlib to parse)."""
    return _SHARDY_OP.search(text) is not None


def is_shardy_problem(message: str) -> bool:
    """Whether a parse or deserialisation error is about the unregistered `sdy` dialect
    (custom syntax, or bytecode that needs the dialect's reader)."""
    return _SHARDY_PROBLEM.search(message) is not None


_CONVERT = r"""
import sys
try:
    from jaxlib.mlir import ir, passmanager
    from jaxlib.mlir._mlir_libs import _chlo, _jax_mlir_ext, _sdy, _stablehlo
except ImportError as exc:
    sys.stderr.write("no jaxlib: %s" % exc)
    sys.exit(2)
data = sys.stdin.buffer.read()
ctx = ir.Context()
registry = ir.DialectRegistry()
_jax_mlir_ext.register_dialects(registry)
ctx.append_dialect_registry(registry)
ctx.load_all_available_dialects()
for dialect in (_chlo, _stablehlo, _sdy):
    dialect.register_dialect(ctx)
_stablehlo.register_stablehlo_passes()
ctx.allow_unregistered_dialects = True
problems = []
def collect(diagnostic):
    try:
        problems.append("%s: %s" % (diagnostic.location, diagnostic.message))
    except Exception:  # a message with bytes that are not UTF-8 (a corrupt name)
        problems.append("a diagnostic whose text is not valid UTF-8 (corrupt names)")
    return True
ctx.attach_diagnostic_handler(collect)
with ctx:
    try:
        if data[:4] == b"ML\xefR" and data[4:64].find(b"StableHLO_v") >= 0:
            module = _stablehlo.deserialize_portable_artifact(ctx, data)
        elif data[:4] == b"ML\xefR":
            module = ir.Module.parse(data)
        else:
            module = ir.Module.parse(data.decode("utf-8"))
    except Exception as exc:
        sys.stderr.write(problems[0] if problems else str(exc))
        sys.exit(3)
    if "chlo." in module.operation.get_asm(print_generic_op_form=True,
                                           large_elements_limit=1):
        try:
            passmanager.PassManager.parse(
                "builtin.module(func.func(chlo-legalize-to-stablehlo))").run(module.operation)
        except Exception as exc:
            sys.stderr.write("cannot legalise CHLO: " + (problems[0] if problems else str(exc)))
            sys.exit(4)
    try:
        text = module.operation.get_asm(print_generic_op_form=True, enable_debug_info=True)
    except Exception as exc:
        sys.stderr.write("cannot print the module: " + (problems[0] if problems else str(exc)))
        sys.exit(5)
sys.stdout.write(text)
"""

_NEEDS_JAX = ("the module uses the Shardy (sdy) dialect (the shardings of a multi-device "
              "JAX program); reading it needs jax installed (pip install jax), whose MLIR "
              "bindings re-print it in MLIR's generic form")


def shardy_to_generic(data: bytes, source: str) -> str:
    """The module in `data` (text, MLIR bytecode or a portable artifact) printed in MLIR's
    generic form by jaxlib's bindings in a child process, CHLO legalised; a one-line
    FileFormatError naming `source` when jaxlib is missing or the module does not read."""
    if importlib.util.find_spec("jaxlib") is None:
        raise FileFormatError(f"{source}: {_NEEDS_JAX}")
    limit = 120 + len(data) // (10 << 20)  # seconds: generous for real models
    try:
        proc = subprocess.run([sys.executable, "-c", _CONVERT], input=data, timeout=limit,
                              capture_output=True, check=False)
    except subprocess.TimeoutExpired as exc:
        raise FileFormatError(f"{source}: reading the Shardy module with jaxlib did not finish "
                              f"in {limit} s; refusing") from exc
    except OSError as exc:
        raise FileFormatError(f"{source}: cannot start jaxlib's reader: {exc}") from exc
    problem = proc.stderr.decode("utf-8", "replace")
    if "Traceback (most recent call last)" in problem:  # the reader's own failure: its gist
        problem = problem.strip().splitlines()[-1]
    located = re.search(r'error: "-":(\d+):(\d+): ([^\n]*)', problem)
    problem = f"line {located[1]}:{located[2]}: {located[3]}" if located else problem
    problem = one_line(problem)
    if proc.returncode == 2:
        raise FileFormatError(f"{source}: {_NEEDS_JAX}")
    if proc.returncode < 0:
        number = -proc.returncode
        how = signal.Signals(number).name if number in signal.valid_signals() else number
        raise FileFormatError(f"{source}: jaxlib's MLIR reader crashed on this file (signal "
                              f"{how}); the module is corrupt")
    if proc.returncode != 0:
        raise FileFormatError(f"{source}: malformed module with Shardy (sdy) ops (read with "
                              f"jaxlib): {problem}")
    return proc.stdout.decode("utf-8")


__all__ = ["is_shardy_problem", "shardy_to_generic", "uses_shardy_syntax"]
