"""Multi-device JAX programs written to files by real JAX, for the sharding import tests.

Run as a script (`python sharded_programs.py OUTDIR`) in a child process: JAX must see 8
fake CPU devices (`--xla_force_host_platform_device_count=8`), which only an XLA_FLAGS set
before jax is imported gives, and the test process may have imported jax already.

Writes, for a sharded MLP, a sharded attention block and a block of CHLO ops in a
rematerialised scan, each in Shardy (`sdy`, JAX's default) and GSPMD (`mhlo.sharding`)
form:
  NAME_FORM.mlir       jax.jit(f, in_shardings=..., out_shardings=...).lower(...).as_text()
  NAME_FORM.jaxexport  jax.export's serialized Exported of the same jitted function
  NAME_FORM.mlirbc     the portable artifact inside it
  NAME_plain.KIND      the function jitted without any sharding or constraint, in the
                       three kinds above (the MACs and ops reference)
  NAME.npz             inputs (in0, in1, ...) and the sharded function's outputs on the 8
                       devices (out0, ...)
mlp_sdy_generic.mlir (the Shardy MLP in MLIR's generic form) and the per-device programs
the importer refuses: shard_map_FORM.mlir, pmap_FORM.mlir.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any


def main(out: Path) -> None:
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import export
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    auto = (jax.sharding.AxisType.Auto,) * 2
    mesh = jax.make_mesh((2, 4), ("dp", "tp"), axis_types=auto)

    def spec(*axes: str | None) -> NamedSharding:
        return NamedSharding(mesh, P(*axes))

    rng = np.random.default_rng(0)
    sharded = [True]  # False while lowering the programs without any sharding

    def constrain(v: jax.Array, sharding: NamedSharding) -> jax.Array:
        return jax.lax.with_sharding_constraint(v, sharding) if sharded[0] else v

    def f32(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    def mlp(x: jax.Array, w1: jax.Array, b1: jax.Array, w2: jax.Array) -> jax.Array:
        h = jax.nn.gelu(x @ w1 + b1)
        h = constrain(h, spec("dp", "tp"))
        return jnp.tanh(h @ w2).sum(-1)

    heads = 4

    def attention(x: jax.Array, wqkv: jax.Array, wo: jax.Array) -> jax.Array:
        b, t, d = x.shape
        qkv = (x @ wqkv).reshape(b, t, 3, heads, d // heads)
        qkv = constrain(qkv, spec("dp", None, None, "tp", None))
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(d // heads)
        mask = jnp.tril(jnp.ones((t, t), bool))
        scores = jnp.where(mask, scores, -1e9)
        out = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v)
        return out.reshape(b, t, d) @ wo + x

    def block(x: jax.Array, w: jax.Array) -> tuple[jax.Array, jax.Array]:
        @jax.checkpoint
        def layer(c: jax.Array, _: None) -> tuple[jax.Array, None]:
            y = jax.nn.gelu(c @ w, approximate=False)  # chlo.erfc in the text
            return constrain(y, spec("dp", "tp")), None

        c, _ = jax.lax.scan(layer, x, None, length=2)
        return c, jax.lax.top_k(c, 3)[0]  # chlo.top_k

    programs = {
        "mlp": (mlp, [f32(8, 16), f32(16, 32), f32(32), f32(32, 8)],
                (spec("dp", None), spec(None, "tp"), spec("tp"), spec("tp", None)),
                spec("dp")),
        "attention": (attention, [f32(4, 6, 32), f32(32, 96) * 0.2, f32(32, 32) * 0.2],
                      (spec("dp", None, None), spec(None, "tp"), spec("tp", None)),
                      spec("dp", None, None)),
        "block": (block, [f32(8, 16), f32(16, 16) * 0.3],
                  (spec("dp", None), spec(None, "tp")), (spec("dp", None), spec("dp", None))),
    }
    for form, shardy in (("sdy", True), ("gspmd", False)):
        jax.config.update("jax_use_shardy_partitioner", shardy)
        def write(stem: str, jitted: Any, args: list[np.ndarray]) -> None:
            (out / f"{stem}.mlir").write_text(jitted.lower(*args).as_text())
            exported = export.export(jitted)(*args)
            (out / f"{stem}.jaxexport").write_bytes(bytes(exported.serialize()))
            (out / f"{stem}.mlirbc").write_bytes(bytes(exported.mlir_module_serialized))

        for name, (fn, args, ins, outs) in programs.items():
            jitted = jax.jit(fn, in_shardings=ins, out_shardings=outs)
            write(f"{name}_{form}", jitted, args)
            if shardy and name == "mlp":  # MLIR's generic form, as JAX's own bindings print it
                module = jitted.lower(*args).compiler_ir("stablehlo")
                (out / "mlp_sdy_generic.mlir").write_text(
                    module.operation.get_asm(print_generic_op_form=True))
            if shardy:
                sharded[0] = False
                write(f"{name}_plain", jax.jit(lambda *a, fn=fn: fn(*a)), args)  # traced anew
                sharded[0] = True
                expected = jax.tree_util.tree_leaves(jitted(*args))
                np.savez(out / f"{name}.npz", **{f"in{i}": a for i, a in enumerate(args)},
                         **{f"out{i}": np.asarray(e) for i, e in enumerate(expected)})

        def body(x: jax.Array, w: jax.Array) -> jax.Array:
            return jax.lax.psum(x @ w, "tp")

        x, w = f32(8, 16), f32(16, 32)
        mapped = jax.shard_map(body, mesh=mesh, in_specs=(P("dp", "tp"), P("tp", None)),
                               out_specs=P("dp", None))
        xs = jax.device_put(x, spec("dp", "tp"))
        ws = jax.device_put(w, spec("tp", None))
        (out / f"shard_map_{form}.mlir").write_text(jax.jit(mapped).lower(xs, ws).as_text())
        pmapped = jax.pmap(lambda a: jax.lax.psum(a * 2, "i"), axis_name="i")
        (out / f"pmap_{form}.mlir").write_text(pmapped.lower(f32(8, 4)).as_text())


if __name__ == "__main__":
    main(Path(sys.argv[1]))
