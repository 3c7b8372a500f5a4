"""Timeloop back-end: `write(model, folder, hardware=NAME)` writes one v0.4 problem YAML
per convolution or GEMM layer plus `index.yaml`. See docs/simulators.md."""

from irbridge.converters.timeloop.export import conv_shape, gemm_shape, problem, write

__all__ = ["conv_shape", "gemm_shape", "problem", "write"]
