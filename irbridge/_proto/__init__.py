"""Generated protobuf bindings. Only irbridge.serde imports this."""
