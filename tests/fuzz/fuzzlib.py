"""The fuzz harness shared by the default-suite fuzz tests and tools/fuzz_report.py.

- `build_seeds(folder)`: small valid files the mutations start from (an IR model with a
  conv, a matmul, elementwise ops, softmax, a reshape and sidecar weights; its text form;
  its ONNX export; its StableHLO text and portable artifact), built deterministically by
  irbridge itself, and the same layers as a serialized `jax.export` (built by JAX).
- `mutate(fmt, data, seed)`: one deterministic mutated file from a seed file's bytes and an
  integer: byte flips, truncation, splices; protobuf wire-format mutations for .irb and
  .onnx (varints set to huge/negative values, fields duplicated or dropped, strings swapped
  so names dangle or collide, messages nested deeply); token mutations for .irbt and .mlir
  (numbers, shapes, dense literals, op names, nesting).
- `Runner`: a fork server. One Python process imports the CLI once; each case is a forked
  child with RLIMIT_AS (3 GiB) that runs `irbridge ARGS` in-process with stdout/stderr in
  files, under a wall-clock limit (the parent kills it past the limit). A crash in the
  child (a signal) cannot take the harness down, and a case costs tens of milliseconds of
  start-up instead of the CLI's seconds of imports.
- `classify(...)`: the CLI contract. Exit 0; or exit 2 with exactly one `error: ` line on
  stderr, no traceback and nothing written; exit 1 only where a command documents it
  (`validate` found errors, `compare` found differences). An `error: internal error: ...`
  line is an unexpected exception dressed as an error and counts as a failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from irbridge._wire import varint

FORMATS = ("irb", "irbt", "onnx", "mlir", "mlirbc", "jaxexport")
"""Every format a file command reads: irbridge's own, ONNX, StableHLO text, and StableHLO
bytecode as JAX and torch-mlir write it (portable artifacts, serialized `jax.export`s)."""
MEMORY_LIMIT = 3 << 30
"""RLIMIT_AS of every case: a file that needs more is a memory blow-up."""
CASE_TIMEOUT = 30.0
"""Wall-clock seconds per case before it counts as a hang (generous: CI machines are busy)."""

# Commands that read a file: `{f}` is the mutated file, `{o}` an empty output folder,
# `{seed}` the unmutated seed of the same format.
COMMANDS: dict[str, list[str]] = {
    "info": ["info", "{f}"],
    "show": ["show", "{f}"],
    "validate": ["validate", "{f}"],
    "analyze": ["analyze", "{f}"],
    "analyze-o": ["analyze", "{f}", "--format", "json", "-o", "{o}/a.irb"],
    "compare": ["compare", "{f}", "{seed}", "--format", "json"],
    "convert": ["convert", "{f}", "-o", "{o}/c.irb"],
    "export-onnx": ["export", "{f}", "--to", "onnx", "-o", "{o}/e.onnx"],
    "export-stablehlo": ["export", "{f}", "--to", "stablehlo", "-o", "{o}/e.mlir"],
    "export-html": ["export", "{f}", "--to", "html", "-o", "{o}/e.html"],
    "export-chakra": ["export", "{f}", "--to", "chakra", "-o", "{o}/trace"],
    "export-scalesim": ["export", "{f}", "--to", "scalesim", "-o", "{o}/ss"],
    "export-timeloop": ["export", "{f}", "--to", "timeloop", "-o", "{o}/tl"],
    "export-dot": ["export", "{f}", "--to", "dot", "-o", "{o}/e.dot"],
    "export-model-explorer": ["export", "{f}", "--to", "model-explorer", "-o", "{o}/me.json"],
}
EXIT_ONE_OK = {"validate", "compare"}
"""Commands whose exit 1 is documented: they ran and found a problem."""

FAILURES = ("traceback", "internal", "crash", "hang", "memory", "multiline", "bad-exit",
            "wrote-on-failure", "silent")
OUTCOMES = ("ok", "found-problem", "clean-error", *FAILURES)


def commands_for(fmt: str) -> list[str]:
    """Every command reads every format (info, show and validate import an ONNX or
    StableHLO file first, as analyze does)."""
    return list(COMMANDS)


# --------------------------------------------------------------------------- seeds

def build_seeds(folder: Path) -> dict[str, Path]:
    """Write one valid seed per format into `folder`; returns {format: path}."""
    import numpy as np

    from irbridge import serde
    from irbridge.builder import GraphBuilder
    from irbridge.converters.onnx import export_onnx
    from irbridge.converters.stablehlo import export_stablehlo
    from irbridge.dtypes import DType
    from irbridge.ir import Graph, Model, Provenance, Tensor, TensorType

    f32 = DType.FLOAT32
    rng = np.random.default_rng(0)
    model = Model(name="fuzzseed")
    graph = Graph("main")
    model.graphs.append(graph)
    b = GraphBuilder(graph, model)

    def weight(name: str, *shape: int) -> Any:
        return b.parameter(Tensor.from_array(name, rng.standard_normal(shape).astype(np.float32)))

    x = graph.add_input("x", TensorType(f32, (1, 3, 8, 8)))
    y = b.op("conv", [x, weight("conv.w", 4, 3, 3, 3), weight("conv.b", 4)],
             {"strides": (1, 1), "pads": (1, 1, 1, 1)}, name="conv",
             provenance=Provenance(module_path="features.conv", source_op="conv2d"))
    y = b.op("relu", [y], provenance=Provenance(module_path="features.act"))
    y = b.op("flatten", [y], {"start_axis": 1})
    y = b.op("linear", [y, weight("fc.w", 16, 256), weight("fc.b", 16)], name="fc",
             provenance=Provenance(module_path="head.fc", source_op="linear"))
    y = b.op("add", [y, weight("bias2", 1, 16)])
    y = b.op("reshape", [y], {"shape": (1, 4, 4)})
    y = b.op("matmul", [y, weight("mm.w", 4, 4)], name="mm")
    y = b.op("softmax", [y], {"axis": -1})
    graph.set_outputs([b.op("tanh", [y], name="out")])
    folder.mkdir(parents=True, exist_ok=True)
    seeds = {
        # fc.w (16 KiB) and the conv weight go to the sidecar, the rest inline
        "irb": serde.save(model, folder / "seed.irb", external_threshold=256),
        "irbt": serde.save(model, folder / "seed.irbt", weights="inline"),
        "onnx": export_onnx(model, folder / "seed.onnx"),
        "mlir": export_stablehlo(model, folder / "seed.mlir"),
        # a StableHLO portable artifact (MLIR bytecode), as JAX and torch-mlir write them
        "mlirbc": export_stablehlo(model, folder / "seed.mlirbc"),
        "jaxexport": _jax_exported(folder / "seed.jaxexport"),
    }
    return {k: Path(v) for k, v in seeds.items()}


def _jax_exported(path: Path) -> Path:
    """The same layers written by JAX itself: `jax.export` of a jitted function, serialized
    (a FlatBuffer wrapping the portable artifact), as JAX users save their programs. The
    function is compiled under a fixed file name and JAX records only that frame in its
    locations, so the bytes do not depend on the checkout's path or the caller's stack."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import export

    rng = np.random.default_rng(1)
    scope: dict[str, Any] = {
        "jax": jax, "jnp": jnp, "conv": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
        "fc": rng.standard_normal((256, 16)).astype(np.float32),
        "mm": rng.standard_normal((4, 4)).astype(np.float32)}
    exec(compile(_JAX_SEED_SOURCE, "fuzz_seed.py", "exec"), scope)
    full = jax.config.jax_include_full_tracebacks_in_locations
    jax.config.update("jax_include_full_tracebacks_in_locations", False)
    try:
        blob = scope["build"](export, jax.ShapeDtypeStruct((1, 3, 8, 8), jnp.float32))
    finally:
        jax.config.update("jax_include_full_tracebacks_in_locations", full)
    path.write_bytes(bytes(blob))
    return path


_JAX_SEED_SOURCE = """
def fn(x):
    y = jax.lax.conv_general_dilated(x, conv, (1, 1), ((1, 1), (1, 1)))
    y = jax.nn.relu(y).reshape(1, 256) @ fc
    return jnp.tanh(jax.nn.softmax(y.reshape(1, 4, 4) @ mm, axis=-1))

def build(export, spec):
    return export.export(jax.jit(fn))(spec).serialize()
"""


# --------------------------------------------------------------------------- mutations

INTERESTING_INTS = (0, 1, -1, 2, 7, 255, 65535, 2**31 - 1, 2**31, 2**32, 2**40, 2**62,
                    2**63 - 1, -(2**31), -(2**62), -(2**63), 2**64 - 1)
INTERESTING_TEXT = ("", "x", "a\nerror: forged second line", "\x1b]0;title\x07\x1b[2J",
                    "../../etc/passwd", "/dev/zero", "%0", "conv", "fc", "x" * 300,
                    "\u202e\u0000\ud7ff", "nan", "inf", "-0")


def _varint(value: int) -> bytes:
    """Negative values as protobuf writes them: two's complement on 64 bits."""
    return varint(value & ((1 << 64) - 1))


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("bad varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return result, pos


@dataclass
class WireField:
    number: int
    wire: int
    value: Any  # int (varint, fixed) | bytes | list[WireField] (parsed submessage)


def parse_wire(data: bytes, depth: int = 0) -> list[WireField]:
    """Protobuf wire format without a schema; length-delimited fields that parse as a
    message are parsed recursively (strings that happen to parse are harmless)."""
    fields: list[WireField] = []
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ValueError("field 0")
        if wire == 0:
            value, pos = _read_varint(data, pos)
        elif wire == 1:
            if pos + 8 > len(data):
                raise ValueError("short fixed64")
            value, pos = data[pos:pos + 8], pos + 8
        elif wire == 5:
            if pos + 4 > len(data):
                raise ValueError("short fixed32")
            value, pos = data[pos:pos + 4], pos + 4
        elif wire == 2:
            length, pos = _read_varint(data, pos)
            if pos + length > len(data):
                raise ValueError("short bytes")
            raw = data[pos:pos + length]
            pos += length
            value = raw
            if depth < 12 and raw:
                with contextlib.suppress(ValueError):
                    value = parse_wire(raw, depth + 1)
        else:
            raise ValueError(f"wire type {wire}")
        fields.append(WireField(number, wire, value))
    return fields


def encode_wire(fields: list[WireField]) -> bytes:
    out = bytearray()
    for f in fields:
        out += _varint(f.number << 3 | f.wire)
        if f.wire == 0:
            out += _varint(f.value)
        elif f.wire in (1, 5):
            out += f.value
        else:
            body = encode_wire(f.value) if isinstance(f.value, list) else f.value
            out += _varint(len(body)) + body
    return bytes(out)


def _walk(fields: list[WireField], parents: list[list[WireField]] | None = None
          ) -> list[tuple[list[WireField], int]]:
    """(containing list, index) of every field in the tree."""
    found: list[tuple[list[WireField], int]] = []
    for i, f in enumerate(fields):
        found.append((fields, i))
        if isinstance(f.value, list):
            found += _walk(f.value)
    return found


def mutate_wire(data: bytes, rng: random.Random) -> bytes:
    tree = parse_wire(data)
    spots = _walk(tree)
    if not spots:
        raise ValueError("empty message")
    for _ in range(rng.choice((1, 1, 2, 3))):
        owner, i = rng.choice(spots)
        f = owner[i]
        kind = rng.randrange(8)
        if f.wire == 0 and kind < 4:  # dims, ids, dtypes, enums, offsets, lengths
            f.value = rng.choice(INTERESTING_INTS) if kind < 3 else f.value ^ (1 << rng.randrange(64))
        elif kind == 4:  # duplicate (repeated nodes/values/dims: duplicate ids and names)
            owner.insert(i + 1, WireField(f.number, f.wire, _copy(f.value)))
        elif kind == 5:  # drop (missing names, dangling references)
            del owner[i]
        elif kind == 6 and f.wire == 2:  # swap with another string or message
            others = [(o, j) for o, j in spots if o[j].wire == 2 and (o, j) != (owner, i)]
            if others:
                o, j = rng.choice(others)
                f.value = _copy(o[j].value)
            else:
                f.value = rng.choice(INTERESTING_TEXT).encode("utf-8", "surrogatepass")
        elif f.wire == 2 and isinstance(f.value, list) and f.value:  # deep nesting
            inner = f.value
            for _ in range(rng.choice((2, 10, 100, 2000))):
                inner = [WireField(f.number, 2, inner), *_copy(f.value[:1])]
            f.value = inner
        elif f.wire == 2:
            f.value = rng.choice(INTERESTING_TEXT).encode("utf-8", "surrogatepass")
        else:
            f.number = rng.choice((f.number + 1, 1, 2, 3, 15, 536870911))
        spots = _walk(tree)
        if not spots:
            break
    return encode_wire(tree)


def _copy(value: Any) -> Any:
    if isinstance(value, list):
        return [WireField(f.number, f.wire, _copy(f.value)) for f in value]
    return value


def mutate_bytes(data: bytes, rng: random.Random, donor: bytes) -> bytes:
    buf = bytearray(data)
    kind = rng.randrange(6)
    n = len(buf)
    if n == 0:
        return donor[:rng.randrange(len(donor) + 1)]
    if kind == 0:  # bit flips
        for _ in range(rng.choice((1, 2, 8))):
            buf[rng.randrange(n)] ^= 1 << rng.randrange(8)
    elif kind == 1:  # truncation
        del buf[rng.randrange(n):]
    elif kind == 2:  # splice a chunk of the donor in
        a = rng.randrange(len(donor))
        chunk = donor[a:a + rng.randrange(1, 256)]
        at = rng.randrange(n)
        buf[at:at + rng.choice((0, len(chunk)))] = chunk
    elif kind == 3:  # interesting bytes
        for _ in range(rng.choice((1, 4))):
            buf[rng.randrange(n)] = rng.choice((0, 0x7F, 0x80, 0xFF, 0x0A, 0x22, 0x7B))
    elif kind == 4:  # delete or duplicate a range
        a = rng.randrange(n)
        b = min(n, a + rng.randrange(1, 64))
        if rng.random() < 0.5:
            del buf[a:b]
        else:
            buf[a:a] = buf[a:b]
    else:  # zero a range
        a = rng.randrange(n)
        b = min(n, a + rng.randrange(1, 32))
        buf[a:b] = bytes(b - a)
    return bytes(buf)


_NUMBER = re.compile(rb"-?\b\d+(?:\.\d+)?(?:[eE][-+]?\d+)?\b")
_QUOTED = re.compile(rb'"(?:[^"\\\n]|\\.)*"')
_SHAPE = re.compile(rb"tensor<([0-9x?]*)x?([a-z]+[0-9]*)>")
_DENSE = re.compile(rb"dense<[^>]*>")
_OPNAME = re.compile(rb"\b(?:stablehlo|func|chlo)\.[a-z_]+\b")
_SSA = re.compile(rb"%[A-Za-z0-9_]+")
_IDENT = re.compile(rb"\b[a-z_]+(?=\s*[:{<])")


def _replace_match(data: bytes, pattern: re.Pattern[bytes], rng: random.Random,
                   make: Any) -> bytes:
    matches = list(pattern.finditer(data))
    if not matches:
        return data
    m = rng.choice(matches)
    return data[:m.start()] + make(m) + data[m.end():]


def mutate_text(fmt: str, data: bytes, rng: random.Random) -> bytes:
    """Token-level mutations of .irbt (protobuf text) and .mlir (MLIR assembly)."""
    lines = data.split(b"\n")
    kind = rng.randrange(10)
    if kind == 0:  # a number becomes an interesting one
        return _replace_match(data, _NUMBER, rng,
                              lambda m: str(rng.choice(INTERESTING_INTS)).encode())
    if kind == 1:  # a quoted string becomes another one or a hostile one
        quoted = [m.group(0) for m in _QUOTED.finditer(data)]
        pick = (rng.choice(quoted) if quoted and rng.random() < 0.5 else
                json.dumps(rng.choice(INTERESTING_TEXT)).encode())
        return _replace_match(data, _QUOTED, rng, lambda m: pick)
    if kind == 2:  # delete lines
        a = rng.randrange(len(lines))
        del lines[a:a + rng.choice((1, 1, 3))]
        return b"\n".join(lines)
    if kind == 3:  # duplicate lines (duplicate fields, ids, SSA definitions)
        a = rng.randrange(len(lines))
        b = a + rng.choice((1, 2, 5))
        lines[b:b] = lines[a:b]
        return b"\n".join(lines)
    if kind == 4:  # deep nesting
        depth = rng.choice((50, 200, 1000, 5000))
        a = rng.randrange(len(lines))
        if fmt == "mlir":
            nest = (b'"stablehlo.if"(%c) ({\n' * depth) + (b"})\n" * depth)
        else:
            nest = (b"graphs { nodes { attributes { key: \"g\" value { graph {\n" * (depth // 5)
                    + b"} } } } }\n" * (depth // 5))
        lines.insert(a, nest)
        return b"\n".join(lines)
    if fmt == "mlir":
        if kind == 5:  # a shape's dims become huge, zero, negative or dynamic
            dims = rng.choice((b"1000000000", b"0", b"-1", b"?", b"4611686018427387904",
                               b"99999999999999999999", b"1x1x1x1x1x1x1x1x1"))
            return _replace_match(data, _SHAPE, rng,
                                  lambda m: b"tensor<" + dims + b"x" + m.group(2) + b">")
        if kind == 6:  # dense literals: huge splats, wrong counts, wrong types
            lit = rng.choice((b"dense<1.0> : tensor<1000000000xf32>", b"dense<[1.0, 2.0]>",
                              b"dense<(1.0, 2.0)>", b"dense<\"0xDEADBEEF\">", b"dense<>",
                              b"dense<1e400>", b"dense<true>", b"dense<[[1]]>"))
            return _replace_match(data, _DENSE, rng, lambda m: lit)
        if kind == 7:  # op names swap
            ops = [m.group(0) for m in _OPNAME.finditer(data)]
            extra = [b"stablehlo.while", b"stablehlo.custom_call", b"stablehlo.nonexistent",
                     b"func.call", b"stablehlo.convolution", b"stablehlo.if"]
            pick = rng.choice(ops + extra if ops else extra)
            return _replace_match(data, _OPNAME, rng, lambda m: pick)
        if kind == 8:  # SSA names dangle or collide
            names = [m.group(0) for m in _SSA.finditer(data)] or [b"%0"]
            pick = rng.choice([*names, b"%nowhere"])
            return _replace_match(data, _SSA, rng, lambda m: pick)
    else:
        if kind == 5:  # a field name becomes another one
            idents = [m.group(0) for m in _IDENT.finditer(data)]
            if idents:
                pick = rng.choice(idents)
                return _replace_match(data, _IDENT, rng, lambda m: pick)
        if kind == 6:  # an enum-like word becomes another
            return _replace_match(data, re.compile(rb"\b[A-Z][A-Z0-9_]+\b"), rng,
                                  lambda m: rng.choice((b"FLOAT64", b"BOGUS", b"INT4", b"0")))
        if kind == 7:  # a dims list gets a huge/negative entry
            return _replace_match(data, re.compile(rb"dims?: -?\d+|size: -?\d+"), rng,
                                  lambda m: m.group(0).split(b":")[0] + b": "
                                  + str(rng.choice(INTERESTING_INTS)).encode())
    return mutate_bytes(data, rng, data)


def mutate(fmt: str, data: bytes, seed: int) -> bytes:
    """One deterministic mutation of a seed file's bytes: the same (fmt, data, seed) always
    gives the same file."""
    rng = random.Random(f"{fmt}:{seed}")
    out = data
    for _ in range(rng.choice((1, 1, 1, 2))):
        choice = rng.random()
        if fmt in ("irb", "onnx") and choice < 0.6:
            prefix = 8 if fmt == "irb" else 0
            try:
                out = out[:prefix] + mutate_wire(out[prefix:], rng)
                continue
            except (ValueError, RecursionError):
                pass
        if fmt in ("irbt", "mlir") and choice < 0.75:
            out = mutate_text(fmt, out, rng)
            continue
        out = mutate_bytes(out, rng, data)
    return out


# --------------------------------------------------------------------------- running

@dataclass
class Outcome:
    rc: int | None  # exit status; None when killed by a signal or the timeout
    signal: int | None
    timed_out: bool
    seconds: float
    max_rss_mb: float
    stdout: str
    stderr: str


def _serve() -> None:
    """The fork server: read one JSON request per line, answer one JSON line per case."""
    import irbridge.analysis.driver
    import irbridge.cli.main
    import irbridge.compare.report
    import irbridge.converters.onnx
    import irbridge.converters.stablehlo  # noqa: F401

    requests = sys.stdin
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    for line in requests:
        req = json.loads(line)
        answer = _warm(req["warm"]) if "warm" in req else _run_forked(req)
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


def _warm(cases: list[dict[str, Any]]) -> dict[str, Any]:
    """Run pure-Python commands once in the server itself, so that the modules and
    caches they load lazily are inherited by every forked child (a cold child spends a
    second importing). Only commands that start no threads (no MLIR context, no ONNX
    runtime): forking a process with threads is unsafe."""
    import threading

    from irbridge.cli.main import app

    saved = os.dup(1), os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        for case in cases:
            os.dup2(null, 1)
            os.dup2(null, 2)
            os.chdir(case["cwd"])
            with contextlib.suppress(SystemExit):
                app(args=case["argv"], prog_name="irbridge")
            sys.stdout.flush()
            sys.stderr.flush()
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(null)
    return {"threads": threading.active_count()}


def _run_forked(req: dict[str, Any]) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="irbfuzz-io-"))
    out_path, err_path = work / "stdout", work / "stderr"
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: one CLI run
        code = 1
        try:
            os.chdir(req["cwd"])
            limit = req["memory"]
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(os.open(out_path, os.O_WRONLY | os.O_CREAT, 0o600), 1)
            os.dup2(os.open(err_path, os.O_WRONLY | os.O_CREAT, 0o600), 2)
            sys.stdin = open(0)  # noqa: SIM115
            sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
            sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
            os.environ["COLUMNS"] = "120"
            from irbridge.cli.main import app

            sys.argv = ["irbridge", *req["argv"]]
            try:
                app(args=req["argv"], prog_name="irbridge")
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except BaseException:
                import traceback

                traceback.print_exc()  # what the interpreter does with an uncaught exception
                code = 1
        finally:
            with contextlib.suppress(BaseException):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)
    deadline = start + req["timeout"]
    timed_out = False
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            timed_out = True
            os.kill(pid, signal.SIGKILL)
            _, status, usage = os.wait4(pid, 0)
            break
        time.sleep(0.003)
    seconds = time.monotonic() - start
    answer = {
        "rc": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) and not timed_out else None,
        "timed_out": timed_out, "seconds": round(seconds, 3),
        "max_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "stdout": out_path.read_bytes()[:20000].decode("utf-8", "replace")
        if out_path.exists() else "",
        "stderr": err_path.read_bytes()[:20000].decode("utf-8", "replace")
        if err_path.exists() else "",
    }
    shutil.rmtree(work, ignore_errors=True)
    return answer


class Runner:
    """Runs CLI cases in forked children of one warm server process."""

    def __init__(self, memory: int = MEMORY_LIMIT, timeout: float = CASE_TIMEOUT) -> None:
        self.memory, self.timeout = memory, timeout
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
        env.setdefault("CUDA_VISIBLE_DEVICES", "")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "import fuzzlib; fuzzlib._serve()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)

    def warm(self, seeds: dict[str, Path], work: Path) -> None:
        """Warm the server with the pure-Python commands on the .irb seed."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        cases = []
        for command in COMMANDS:
            if command.startswith(("export-onnx", "export-stablehlo", "compare")):
                continue
            out = work / command
            out.mkdir(parents=True, exist_ok=True)
            argv = [a.format(f=seeds["irb"], o=out, seed=seeds["irb"])
                    for a in COMMANDS[command]]
            cases.append({"argv": argv, "cwd": str(work)})
        self.proc.stdin.write(json.dumps({"warm": cases}) + "\n")
        self.proc.stdin.flush()
        answer = json.loads(self.proc.stdout.readline() or "{}")
        if answer.get("threads") != 1:
            raise RuntimeError(f"fuzz server warm-up started threads: {answer}")

    def run(self, argv: list[str], cwd: Path) -> Outcome:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        req = {"argv": argv, "cwd": str(cwd), "memory": self.memory, "timeout": self.timeout}
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], self.timeout + 120)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            raise RuntimeError(f"fuzz server died or stalled on {argv}")
        return Outcome(**json.loads(line))

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --------------------------------------------------------------------------- contract

@dataclass
class Verdict:
    outcome: str  # one of OUTCOMES
    detail: str  # the error line or the reason
    result: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.outcome in FAILURES


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def classify(command: str, out: Outcome, written: list[str]) -> Verdict:
    """The CLI contract for one case; `written` lists what the output folder holds after."""
    err_lines = out.stderr.splitlines()
    first = next((line for line in err_lines if line.startswith("error: ")), "")
    if out.timed_out:
        return Verdict("hang", f"no exit within {CASE_TIMEOUT:.0f} s")
    if out.signal is not None:
        name = signal.Signals(out.signal).name if out.signal in signal.valid_signals() else ""
        return Verdict("crash", f"killed by signal {out.signal} {name}".strip()
                       + (f"; stderr: {out.stderr.strip()[-300:]}" if out.stderr.strip() else ""))
    if "Traceback (most recent call last)" in out.stderr:
        last = err_lines[-1] if err_lines else ""
        if "MemoryError" in last:
            return Verdict("memory", last)
        return Verdict("traceback", last)
    if out.rc == 0:
        if not (out.stdout.strip() or out.stderr.strip()):
            return Verdict("silent", "exit 0 without output")
        return Verdict("ok", "")
    if out.rc == 1 and command in EXIT_ONE_OK and not first:
        return Verdict("found-problem", out.stdout.strip().splitlines()[-1:][0]
                       if out.stdout.strip() else "")
    if out.rc == 2:
        if written:
            return Verdict("wrote-on-failure", f"{first}; left {written[:5]}")
        if len(err_lines) != 1 or not first:
            return Verdict("multiline", " | ".join(err_lines)[-500:])
        if first.startswith("error: internal error"):
            return Verdict("internal", first)
        if first.startswith("error: out of memory"):
            return Verdict("memory", first)
        return Verdict("clean-error", first)
    return Verdict("bad-exit", f"exit {out.rc}: {(first or out.stderr.strip()[-300:])}")


def run_case(runner: Runner, fmt: str, command: str, data: bytes, seeds: dict[str, Path],
             work: Path) -> Verdict:
    """Write `data` as the input file (with the seed's sidecar beside it), run `command`,
    apply the contract. `work` is an empty folder the case may use."""
    case_in, case_out = work / "in", work / "out"
    case_in.mkdir(parents=True)
    case_out.mkdir()
    src = case_in / f"model.{fmt}"
    src.write_bytes(data)
    seed = seeds[fmt]
    for sidecar in seed.parent.glob(f"{seed.name}.*"):  # seed.irb.data, seed.irb.<hash>.data
        # the mutated file still names the seed's sidecar
        shutil.copyfile(sidecar, case_in / sidecar.name)
    before = _listing(case_in)
    argv = [a.format(f=src, o=case_out, seed=seed) for a in COMMANDS[command]]
    out = runner.run(argv, work)
    written = _listing(case_out)
    left = [p for p in _listing(case_in) if p not in before]
    verdict = classify(command, out, written + [f"in/{p}" for p in left])
    verdict.result = {**asdict(out), "argv": argv}
    return verdict
