"""irbridge: one neutral, protobuf-defined graph IR for ML models."""

__version__ = "0.1.0"
