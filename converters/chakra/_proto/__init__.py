"""Generated bindings of the vendored Chakra schema (schemas/chakra/et_def.proto). Only irbridge.converters.chakra imports this."""
