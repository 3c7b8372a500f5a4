from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class IrVersion(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    IR_VERSION_UNSPECIFIED: _ClassVar[IrVersion]
    IR_VERSION_2026_11_22: _ClassVar[IrVersion]

class DataType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DATA_TYPE_UNSPECIFIED: _ClassVar[DataType]
    FLOAT32: _ClassVar[DataType]
    FLOAT16: _ClassVar[DataType]
    BFLOAT16: _ClassVar[DataType]
    FLOAT64: _ClassVar[DataType]
    FLOAT8_E4M3FN: _ClassVar[DataType]
    FLOAT8_E5M2: _ClassVar[DataType]
    INT8: _ClassVar[DataType]
    INT16: _ClassVar[DataType]
    INT32: _ClassVar[DataType]
    INT64: _ClassVar[DataType]
    UINT8: _ClassVar[DataType]
    UINT16: _ClassVar[DataType]
    UINT32: _ClassVar[DataType]
    UINT64: _ClassVar[DataType]
    BOOL: _ClassVar[DataType]
    COMPLEX64: _ClassVar[DataType]
    COMPLEX128: _ClassVar[DataType]
    INT4: _ClassVar[DataType]
    UINT4: _ClassVar[DataType]
    INT2: _ClassVar[DataType]
    UINT2: _ClassVar[DataType]
    FLOAT8_E4M3FNUZ: _ClassVar[DataType]
    FLOAT8_E5M2FNUZ: _ClassVar[DataType]
    FLOAT8_E8M0FNU: _ClassVar[DataType]
    FLOAT4_E2M1FN: _ClassVar[DataType]
    FLOAT6_E2M3FN: _ClassVar[DataType]
    FLOAT6_E3M2FN: _ClassVar[DataType]
    FLOAT8_E3M4: _ClassVar[DataType]
    FLOAT8_E4M3: _ClassVar[DataType]
    FLOAT8_E4M3B11FNUZ: _ClassVar[DataType]
IR_VERSION_UNSPECIFIED: IrVersion
IR_VERSION_2026_11_22: IrVersion
DATA_TYPE_UNSPECIFIED: DataType
FLOAT32: DataType
FLOAT16: DataType
BFLOAT16: DataType
FLOAT64: DataType
FLOAT8_E4M3FN: DataType
FLOAT8_E5M2: DataType
INT8: DataType
INT16: DataType
INT32: DataType
INT64: DataType
UINT8: DataType
UINT16: DataType
UINT32: DataType
UINT64: DataType
BOOL: DataType
COMPLEX64: DataType
COMPLEX128: DataType
INT4: DataType
UINT4: DataType
INT2: DataType
UINT2: DataType
FLOAT8_E4M3FNUZ: DataType
FLOAT8_E5M2FNUZ: DataType
FLOAT8_E8M0FNU: DataType
FLOAT4_E2M1FN: DataType
FLOAT6_E2M3FN: DataType
FLOAT6_E3M2FN: DataType
FLOAT8_E3M4: DataType
FLOAT8_E4M3: DataType
FLOAT8_E4M3B11FNUZ: DataType

class SymbolicDim(_message.Message):
    __slots__ = ("name", "min", "max")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MIN_FIELD_NUMBER: _ClassVar[int]
    MAX_FIELD_NUMBER: _ClassVar[int]
    name: str
    min: int
    max: int
    def __init__(self, name: _Optional[str] = ..., min: _Optional[int] = ..., max: _Optional[int] = ...) -> None: ...

class Dim(_message.Message):
    __slots__ = ("size", "symbol")
    SIZE_FIELD_NUMBER: _ClassVar[int]
    SYMBOL_FIELD_NUMBER: _ClassVar[int]
    size: int
    symbol: SymbolicDim
    def __init__(self, size: _Optional[int] = ..., symbol: _Optional[_Union[SymbolicDim, _Mapping]] = ...) -> None: ...

class Shape(_message.Message):
    __slots__ = ("dims",)
    DIMS_FIELD_NUMBER: _ClassVar[int]
    dims: _containers.RepeatedCompositeFieldContainer[Dim]
    def __init__(self, dims: _Optional[_Iterable[_Union[Dim, _Mapping]]] = ...) -> None: ...

class TensorType(_message.Message):
    __slots__ = ("dtype", "shape")
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    dtype: DataType
    shape: Shape
    def __init__(self, dtype: _Optional[_Union[DataType, str]] = ..., shape: _Optional[_Union[Shape, _Mapping]] = ...) -> None: ...

class Value(_message.Message):
    __slots__ = ("name", "type")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    name: str
    type: TensorType
    def __init__(self, name: _Optional[str] = ..., type: _Optional[_Union[TensorType, _Mapping]] = ...) -> None: ...

class ExternalData(_message.Message):
    __slots__ = ("location", "offset", "length", "sha256")
    LOCATION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    location: str
    offset: int
    length: int
    sha256: str
    def __init__(self, location: _Optional[str] = ..., offset: _Optional[int] = ..., length: _Optional[int] = ..., sha256: _Optional[str] = ...) -> None: ...

class Tensor(_message.Message):
    __slots__ = ("name", "dtype", "dims", "raw", "external")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    DIMS_FIELD_NUMBER: _ClassVar[int]
    RAW_FIELD_NUMBER: _ClassVar[int]
    EXTERNAL_FIELD_NUMBER: _ClassVar[int]
    name: str
    dtype: DataType
    dims: _containers.RepeatedScalarFieldContainer[int]
    raw: bytes
    external: ExternalData
    def __init__(self, name: _Optional[str] = ..., dtype: _Optional[_Union[DataType, str]] = ..., dims: _Optional[_Iterable[int]] = ..., raw: _Optional[bytes] = ..., external: _Optional[_Union[ExternalData, _Mapping]] = ...) -> None: ...

class IntList(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, values: _Optional[_Iterable[int]] = ...) -> None: ...

class FloatList(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, values: _Optional[_Iterable[float]] = ...) -> None: ...

class StringList(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, values: _Optional[_Iterable[str]] = ...) -> None: ...

class GraphList(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedCompositeFieldContainer[Graph]
    def __init__(self, values: _Optional[_Iterable[_Union[Graph, _Mapping]]] = ...) -> None: ...

class Attribute(_message.Message):
    __slots__ = ("name", "i", "f", "s", "b", "ints", "floats", "strings", "tensor", "graph", "graphs", "dtype")
    NAME_FIELD_NUMBER: _ClassVar[int]
    I_FIELD_NUMBER: _ClassVar[int]
    F_FIELD_NUMBER: _ClassVar[int]
    S_FIELD_NUMBER: _ClassVar[int]
    B_FIELD_NUMBER: _ClassVar[int]
    INTS_FIELD_NUMBER: _ClassVar[int]
    FLOATS_FIELD_NUMBER: _ClassVar[int]
    STRINGS_FIELD_NUMBER: _ClassVar[int]
    TENSOR_FIELD_NUMBER: _ClassVar[int]
    GRAPH_FIELD_NUMBER: _ClassVar[int]
    GRAPHS_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    name: str
    i: int
    f: float
    s: str
    b: bool
    ints: IntList
    floats: FloatList
    strings: StringList
    tensor: Tensor
    graph: Graph
    graphs: GraphList
    dtype: DataType
    def __init__(self, name: _Optional[str] = ..., i: _Optional[int] = ..., f: _Optional[float] = ..., s: _Optional[str] = ..., b: _Optional[bool] = ..., ints: _Optional[_Union[IntList, _Mapping]] = ..., floats: _Optional[_Union[FloatList, _Mapping]] = ..., strings: _Optional[_Union[StringList, _Mapping]] = ..., tensor: _Optional[_Union[Tensor, _Mapping]] = ..., graph: _Optional[_Union[Graph, _Mapping]] = ..., graphs: _Optional[_Union[GraphList, _Mapping]] = ..., dtype: _Optional[_Union[DataType, str]] = ...) -> None: ...

class SourceLocation(_message.Message):
    __slots__ = ("file", "line", "code")
    FILE_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    file: str
    line: int
    code: str
    def __init__(self, file: _Optional[str] = ..., line: _Optional[int] = ..., code: _Optional[str] = ...) -> None: ...

class Provenance(_message.Message):
    __slots__ = ("source_format", "source_op", "source_node", "module_path", "module_class", "location")
    SOURCE_FORMAT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_OP_FIELD_NUMBER: _ClassVar[int]
    SOURCE_NODE_FIELD_NUMBER: _ClassVar[int]
    MODULE_PATH_FIELD_NUMBER: _ClassVar[int]
    MODULE_CLASS_FIELD_NUMBER: _ClassVar[int]
    LOCATION_FIELD_NUMBER: _ClassVar[int]
    source_format: str
    source_op: str
    source_node: str
    module_path: str
    module_class: str
    location: SourceLocation
    def __init__(self, source_format: _Optional[str] = ..., source_op: _Optional[str] = ..., source_node: _Optional[str] = ..., module_path: _Optional[str] = ..., module_class: _Optional[str] = ..., location: _Optional[_Union[SourceLocation, _Mapping]] = ...) -> None: ...

class Cost(_message.Message):
    __slots__ = ("macs", "matmul_flops", "other_flops", "bytes_read", "bytes_written", "param_bytes")
    MACS_FIELD_NUMBER: _ClassVar[int]
    MATMUL_FLOPS_FIELD_NUMBER: _ClassVar[int]
    OTHER_FLOPS_FIELD_NUMBER: _ClassVar[int]
    BYTES_READ_FIELD_NUMBER: _ClassVar[int]
    BYTES_WRITTEN_FIELD_NUMBER: _ClassVar[int]
    PARAM_BYTES_FIELD_NUMBER: _ClassVar[int]
    macs: int
    matmul_flops: int
    other_flops: int
    bytes_read: int
    bytes_written: int
    param_bytes: int
    def __init__(self, macs: _Optional[int] = ..., matmul_flops: _Optional[int] = ..., other_flops: _Optional[int] = ..., bytes_read: _Optional[int] = ..., bytes_written: _Optional[int] = ..., param_bytes: _Optional[int] = ...) -> None: ...

class NodeAnnotations(_message.Message):
    __slots__ = ("cost", "partition_id", "values")
    COST_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    cost: Cost
    partition_id: int
    values: _containers.RepeatedCompositeFieldContainer[Attribute]
    def __init__(self, cost: _Optional[_Union[Cost, _Mapping]] = ..., partition_id: _Optional[int] = ..., values: _Optional[_Iterable[_Union[Attribute, _Mapping]]] = ...) -> None: ...

class Node(_message.Message):
    __slots__ = ("id", "op", "domain", "inputs", "outputs", "attributes", "provenance", "annotations", "name")
    ID_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    DOMAIN_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    PROVENANCE_FIELD_NUMBER: _ClassVar[int]
    ANNOTATIONS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    id: int
    op: str
    domain: str
    inputs: _containers.RepeatedScalarFieldContainer[str]
    outputs: _containers.RepeatedScalarFieldContainer[str]
    attributes: _containers.RepeatedCompositeFieldContainer[Attribute]
    provenance: Provenance
    annotations: NodeAnnotations
    name: str
    def __init__(self, id: _Optional[int] = ..., op: _Optional[str] = ..., domain: _Optional[str] = ..., inputs: _Optional[_Iterable[str]] = ..., outputs: _Optional[_Iterable[str]] = ..., attributes: _Optional[_Iterable[_Union[Attribute, _Mapping]]] = ..., provenance: _Optional[_Union[Provenance, _Mapping]] = ..., annotations: _Optional[_Union[NodeAnnotations, _Mapping]] = ..., name: _Optional[str] = ...) -> None: ...

class Graph(_message.Message):
    __slots__ = ("name", "inputs", "outputs", "nodes", "value_info", "parameters", "break_reason")
    NAME_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    VALUE_INFO_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    BREAK_REASON_FIELD_NUMBER: _ClassVar[int]
    name: str
    inputs: _containers.RepeatedCompositeFieldContainer[Value]
    outputs: _containers.RepeatedCompositeFieldContainer[Value]
    nodes: _containers.RepeatedCompositeFieldContainer[Node]
    value_info: _containers.RepeatedCompositeFieldContainer[Value]
    parameters: _containers.RepeatedScalarFieldContainer[str]
    break_reason: str
    def __init__(self, name: _Optional[str] = ..., inputs: _Optional[_Iterable[_Union[Value, _Mapping]]] = ..., outputs: _Optional[_Iterable[_Union[Value, _Mapping]]] = ..., nodes: _Optional[_Iterable[_Union[Node, _Mapping]]] = ..., value_info: _Optional[_Iterable[_Union[Value, _Mapping]]] = ..., parameters: _Optional[_Iterable[str]] = ..., break_reason: _Optional[str] = ...) -> None: ...

class GraphLink(_message.Message):
    __slots__ = ("from_graph", "from_output", "to_graph", "to_input")
    FROM_GRAPH_FIELD_NUMBER: _ClassVar[int]
    FROM_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    TO_GRAPH_FIELD_NUMBER: _ClassVar[int]
    TO_INPUT_FIELD_NUMBER: _ClassVar[int]
    from_graph: int
    from_output: str
    to_graph: int
    to_input: str
    def __init__(self, from_graph: _Optional[int] = ..., from_output: _Optional[str] = ..., to_graph: _Optional[int] = ..., to_input: _Optional[str] = ...) -> None: ...

class Partition(_message.Message):
    __slots__ = ("id", "node_ids", "kind", "reason", "cost", "external_bytes", "internal_bytes", "graph_index")
    ID_FIELD_NUMBER: _ClassVar[int]
    NODE_IDS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_NUMBER: _ClassVar[int]
    EXTERNAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    INTERNAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    GRAPH_INDEX_FIELD_NUMBER: _ClassVar[int]
    id: int
    node_ids: _containers.RepeatedScalarFieldContainer[int]
    kind: str
    reason: str
    cost: Cost
    external_bytes: int
    internal_bytes: int
    graph_index: int
    def __init__(self, id: _Optional[int] = ..., node_ids: _Optional[_Iterable[int]] = ..., kind: _Optional[str] = ..., reason: _Optional[str] = ..., cost: _Optional[_Union[Cost, _Mapping]] = ..., external_bytes: _Optional[int] = ..., internal_bytes: _Optional[int] = ..., graph_index: _Optional[int] = ...) -> None: ...

class Estimate(_message.Message):
    __slots__ = ("partition_id", "compute_seconds", "memory_seconds", "latency_seconds", "bound")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LATENCY_SECONDS_FIELD_NUMBER: _ClassVar[int]
    BOUND_FIELD_NUMBER: _ClassVar[int]
    partition_id: int
    compute_seconds: float
    memory_seconds: float
    latency_seconds: float
    bound: str
    def __init__(self, partition_id: _Optional[int] = ..., compute_seconds: _Optional[float] = ..., memory_seconds: _Optional[float] = ..., latency_seconds: _Optional[float] = ..., bound: _Optional[str] = ...) -> None: ...

class HardwareMapping(_message.Message):
    __slots__ = ("target", "dtype", "strategy", "estimates", "total_latency_seconds")
    TARGET_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    ESTIMATES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_LATENCY_SECONDS_FIELD_NUMBER: _ClassVar[int]
    target: str
    dtype: DataType
    strategy: str
    estimates: _containers.RepeatedCompositeFieldContainer[Estimate]
    total_latency_seconds: float
    def __init__(self, target: _Optional[str] = ..., dtype: _Optional[_Union[DataType, str]] = ..., strategy: _Optional[str] = ..., estimates: _Optional[_Iterable[_Union[Estimate, _Mapping]]] = ..., total_latency_seconds: _Optional[float] = ...) -> None: ...

class Analysis(_message.Message):
    __slots__ = ("strategy", "partitions", "mappings")
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    MAPPINGS_FIELD_NUMBER: _ClassVar[int]
    strategy: str
    partitions: _containers.RepeatedCompositeFieldContainer[Partition]
    mappings: _containers.RepeatedCompositeFieldContainer[HardwareMapping]
    def __init__(self, strategy: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[Partition, _Mapping]]] = ..., mappings: _Optional[_Iterable[_Union[HardwareMapping, _Mapping]]] = ...) -> None: ...

class Model(_message.Message):
    __slots__ = ("ir_version", "producer_name", "producer_version", "source_format", "opset_version", "graphs", "links", "tensors", "metadata", "analysis", "name")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    IR_VERSION_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_NAME_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_VERSION_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FORMAT_FIELD_NUMBER: _ClassVar[int]
    OPSET_VERSION_FIELD_NUMBER: _ClassVar[int]
    GRAPHS_FIELD_NUMBER: _ClassVar[int]
    LINKS_FIELD_NUMBER: _ClassVar[int]
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    ANALYSIS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ir_version: IrVersion
    producer_name: str
    producer_version: str
    source_format: str
    opset_version: int
    graphs: _containers.RepeatedCompositeFieldContainer[Graph]
    links: _containers.RepeatedCompositeFieldContainer[GraphLink]
    tensors: _containers.RepeatedCompositeFieldContainer[Tensor]
    metadata: _containers.ScalarMap[str, str]
    analysis: Analysis
    name: str
    def __init__(self, ir_version: _Optional[_Union[IrVersion, str]] = ..., producer_name: _Optional[str] = ..., producer_version: _Optional[str] = ..., source_format: _Optional[str] = ..., opset_version: _Optional[int] = ..., graphs: _Optional[_Iterable[_Union[Graph, _Mapping]]] = ..., links: _Optional[_Iterable[_Union[GraphLink, _Mapping]]] = ..., tensors: _Optional[_Iterable[_Union[Tensor, _Mapping]]] = ..., metadata: _Optional[_Mapping[str, str]] = ..., analysis: _Optional[_Union[Analysis, _Mapping]] = ..., name: _Optional[str] = ...) -> None: ...
