"""Small JAX programs (an MLP, a CNN, an attention block, a layer norm, a reduction mix,
and a few control-flow and indexing cases) used as an independent StableHLO producer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass
class JaxProgram:
    name: str
    fn: Callable[..., object]
    args: list[np.ndarray]


def programs() -> dict[str, JaxProgram]:
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(0)

    def f32(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    w1, b1, w2, b2 = f32(16, 32), f32(32), f32(32, 10), f32(10)

    def mlp(x: jax.Array) -> jax.Array:
        h = jax.nn.gelu(x @ w1 + b1)
        return jax.nn.log_softmax(jax.nn.relu(h) @ w2 + b2)

    k1, k2, wd = f32(3, 3, 3, 8), f32(3, 3, 1, 8), f32(8 * 2 * 2, 5)

    def cnn(x: jax.Array) -> jax.Array:  # NHWC, HWIO
        y = jax.lax.conv_general_dilated(x, k1, (1, 1), "SAME",
                                         dimension_numbers=("NHWC", "HWIO", "NHWC"))
        y = jax.nn.relu(y)
        y = jax.lax.conv_general_dilated(y, k2, (1, 1), ((1, 1), (1, 1)),
                                         dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                         feature_group_count=8)
        y = jax.lax.reduce_window(y, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        y = jax.lax.reduce_window(y, 0.0, jax.lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "SAME") / 4
        return jax.nn.sigmoid(y.reshape(y.shape[0], -1) @ wd)

    wq, wk, wv, wo = (f32(32, 32) * 0.2 for _ in range(4))

    def attention(x: jax.Array) -> jax.Array:
        b, t, d = x.shape
        heads = 4

        def split(m: jax.Array) -> jax.Array:
            return (x @ m).reshape(b, t, heads, d // heads).transpose(0, 2, 1, 3)

        q, k, v = split(wq), split(wk), split(wv)
        scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / np.sqrt(d // heads)
        mask = jnp.tril(jnp.ones((t, t), bool))
        scores = jnp.where(mask, scores, -1e9)
        out = jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(scores, axis=-1), v)
        return out.transpose(0, 2, 1, 3).reshape(b, t, d) @ wo + x

    gamma, beta = f32(24), f32(24)

    def layer_norm(x: jax.Array) -> jax.Array:
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) * jax.lax.rsqrt(var + 1e-5) * gamma + beta

    def reductions(x: jax.Array) -> tuple[jax.Array, ...]:
        return (x.sum(0), x.max(1), x.min((0, 2)), jnp.prod(x[:, :2], axis=1),
                jnp.argmax(x, axis=-1), jnp.argmin(x, axis=1), x.mean(),
                jax.nn.logsumexp(x, axis=-1), jnp.cumsum(x, axis=1), jnp.all(x > -3.0, axis=2),
                jnp.sort(x, axis=-1), jax.lax.top_k(x, 2)[0])

    table = f32(20, 6)

    def indexing(ids: jax.Array, x: jax.Array) -> tuple[jax.Array, ...]:
        emb = jnp.take(table, ids, axis=0)
        picked = jnp.take_along_axis(x, jnp.argsort(x, axis=1)[:, :2], axis=1)
        return (emb, picked, x[:, ::-1], jnp.pad(x, ((1, 0), (0, 2))), x.at[:, 1].set(0.0),
                jnp.tanh(x) * jnp.exp(-jnp.abs(x)), jax.scipy.special.erf(x))

    def control(x: jax.Array) -> tuple[jax.Array, ...]:
        def body(carry: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
            i, acc = carry
            return i + 1, acc * 0.5 + jnp.sin(acc)

        _, looped = jax.lax.while_loop(lambda c: c[0] < 3, body, (0, x))
        branch = jax.lax.cond(x.sum() > 0, lambda v: v * 2.0, lambda v: v - 1.0, x)
        switched = jax.lax.switch(1, [lambda v: v, lambda v: -v, jnp.cos], x)
        return looped, branch, switched

    return {
        "mlp": JaxProgram("mlp", mlp, [f32(4, 16)]),
        "cnn": JaxProgram("cnn", cnn, [f32(2, 8, 8, 3)]),
        "attention": JaxProgram("attention", attention, [f32(2, 6, 32)]),
        "layer_norm": JaxProgram("layer_norm", layer_norm, [f32(3, 5, 24)]),
        "reductions": JaxProgram("reductions", reductions, [f32(3, 4, 5)]),
        "indexing": JaxProgram("indexing", indexing,
                               [rng.integers(0, 20, (2, 3)).astype(np.int32), f32(3, 4)]),
        "control": JaxProgram("control", control, [f32(2, 3)]),
    }


def export_text(program: JaxProgram) -> tuple[str, bytes, list[np.ndarray]]:
    """(StableHLO text, portable artifact, expected outputs) of a program via jax.export."""
    import jax
    from jax import export

    exported = export.export(jax.jit(program.fn))(*program.args)
    expected = jax.tree_util.tree_leaves(jax.jit(program.fn)(*program.args))
    return (exported.mlir_module(), bytes(exported.mlir_module_serialized),
            [np.asarray(e) for e in expected])
