"""Protobuf wire-format pieces written by hand where a message is streamed rather than
serialised whole (the ONNX weight streamer, Chakra's length-delimited traces)."""

from __future__ import annotations


def varint(value: int) -> bytes:
    """Base-128 varint of a non-negative integer."""
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)
