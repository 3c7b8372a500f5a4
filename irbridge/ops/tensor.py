"""Tensor ops: constants, shape and data movement, reductions, softmax, cumulative, top-k, control flow."""
