"""Chakra ET protobuf message classes, built at run time from the schema in ``et_def.proto``.

No generated ``_pb2`` module: generated code pins the protobuf runtime to protoc's major version, while a
descriptor built here works with any runtime >= 4.25 (tested with 7.x). The classes live in a private
descriptor pool, so an installed ``chakra`` package (which registers the same file name) never clashes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool

PACKAGE = "ChakraProtoMsg"
_F = descriptor_pb2.FieldDescriptorProto

# protobuf scalar type of each list message and of the matching oneof scalar
_LIST_TYPES = (("Double", _F.TYPE_DOUBLE), ("Float", _F.TYPE_FLOAT), ("Int32", _F.TYPE_INT32),
               ("Int64", _F.TYPE_INT64), ("Uint32", _F.TYPE_UINT32), ("Uint64", _F.TYPE_UINT64),
               ("Sint32", _F.TYPE_SINT32), ("Sint64", _F.TYPE_SINT64), ("Fixed32", _F.TYPE_FIXED32),
               ("Fixed64", _F.TYPE_FIXED64), ("Sfixed32", _F.TYPE_SFIXED32), ("Sfixed64", _F.TYPE_SFIXED64),
               ("Bool", _F.TYPE_BOOL), ("String", _F.TYPE_STRING), ("Bytes", _F.TYPE_BYTES))

NODE_TYPES = ("INVALID_NODE", "METADATA_NODE", "MEM_LOAD_NODE", "MEM_STORE_NODE", "COMP_NODE", "COMM_SEND_NODE",
              "COMM_RECV_NODE", "COMM_COLL_NODE", "STORAGE_NODE", "BATCH_NODE", "CHECKPOINT_NODE")
COLLECTIVE_COMM_TYPES = ("ALL_REDUCE", "REDUCE", "ALL_GATHER", "GATHER", "SCATTER", "BROADCAST", "ALL_TO_ALL",
                         "REDUCE_SCATTER", "REDUCE_SCATTER_BLOCK", "BARRIER")


def _field(msg: Any, name: str, number: int, ftype: int, *, repeated: bool = False, type_name: str = "",
           oneof_index: int | None = None) -> None:
    f = msg.field.add()
    f.name = name
    f.number = number
    f.type = ftype
    f.label = _F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
    if type_name:
        f.type_name = f".{PACKAGE}.{type_name}"
    if oneof_index is not None:
        f.oneof_index = oneof_index


def file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    """The schema of ``et_def.proto`` as a FileDescriptorProto."""
    fd = descriptor_pb2.FileDescriptorProto(name="genie_chakra_et_def.proto", package=PACKAGE, syntax="proto3")

    attr = fd.message_type.add(name="AttributeProto")
    _field(attr, "name", 1, _F.TYPE_STRING)
    _field(attr, "doc_string", 2, _F.TYPE_STRING)
    attr.oneof_decl.add(name="value")
    for i, (stem, ftype) in enumerate(_LIST_TYPES):
        lower = stem.lower()
        _field(attr, f"{lower}_val", 3 + 2 * i, ftype, oneof_index=0)
        _field(attr, f"{lower}_list", 4 + 2 * i, _F.TYPE_MESSAGE, type_name=f"{stem}List", oneof_index=0)
    for stem, ftype in _LIST_TYPES:
        lst = fd.message_type.add(name=f"{stem}List")
        _field(lst, "values", 1, ftype, repeated=True)

    meta = fd.message_type.add(name="GlobalMetadata")
    _field(meta, "version", 1, _F.TYPE_STRING)
    _field(meta, "attr", 2, _F.TYPE_MESSAGE, repeated=True, type_name="AttributeProto")

    for enum_name, values in (("NodeType", NODE_TYPES), ("CollectiveCommType", COLLECTIVE_COMM_TYPES)):
        enum = fd.enum_type.add(name=enum_name)
        for number, value_name in enumerate(values):
            enum.value.add(name=value_name, number=number)

    node = fd.message_type.add(name="Node")
    _field(node, "id", 1, _F.TYPE_UINT64)
    _field(node, "name", 2, _F.TYPE_STRING)
    _field(node, "type", 3, _F.TYPE_ENUM, type_name="NodeType")
    _field(node, "ctrl_deps", 4, _F.TYPE_UINT64, repeated=True)
    _field(node, "data_deps", 5, _F.TYPE_UINT64, repeated=True)
    _field(node, "start_time_micros", 6, _F.TYPE_UINT64)
    _field(node, "duration_micros", 7, _F.TYPE_UINT64)
    _field(node, "inputs", 8, _F.TYPE_MESSAGE, type_name="IOInfo")
    _field(node, "outputs", 9, _F.TYPE_MESSAGE, type_name="IOInfo")
    _field(node, "attr", 10, _F.TYPE_MESSAGE, repeated=True, type_name="AttributeProto")

    io = fd.message_type.add(name="IOInfo")
    for number, name in enumerate(("values", "shapes", "types"), start=1):
        _field(io, name, number, _F.TYPE_STRING)

    tensor = fd.message_type.add(name="Tensor")
    for number, name in enumerate(("tensor_id", "storage_id", "offset", "num_elem", "elem_bytes"), start=1):
        _field(tensor, name, number, _F.TYPE_UINT64)
    _field(tensor, "device", 6, _F.TYPE_STRING)
    return fd


@dataclass(frozen=True)
class EtMessages:
    GlobalMetadata: type
    Node: type
    AttributeProto: type
    IOInfo: type


def _message_class(descriptor: Any) -> type:
    try:
        from google.protobuf.message_factory import GetMessageClass  # protobuf >= 4.22
        return GetMessageClass(descriptor)
    except ImportError:  # pragma: no cover - older runtimes
        from google.protobuf import message_factory
        return message_factory.MessageFactory().GetPrototype(descriptor)


@cache
def messages() -> EtMessages:
    """The message classes (built once, on first use)."""
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file_descriptor())
    get = lambda name: _message_class(pool.FindMessageTypeByName(f"{PACKAGE}.{name}"))  # noqa: E731
    return EtMessages(get("GlobalMetadata"), get("Node"), get("AttributeProto"), get("IOInfo"))
