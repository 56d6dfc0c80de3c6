"""Messages as Triton's JSON: field names as in the proto, every field printed, and 64-bit
integers as numbers (proto3 JSON quotes them; Triton's HTTP front end and the config it hands to
Python models do not)."""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

_INT64_TYPES = frozenset(
    {
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_FIXED64,
        FieldDescriptor.TYPE_SFIXED64,
    }
)


def message_json(message: Message) -> dict[str, Any]:
    """The message as a JSON-ready dict, as Triton prints it."""
    printed = json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    return _numbers(message.DESCRIPTOR, printed)


def _numbers(descriptor: Any, printed: dict[str, Any]) -> dict[str, Any]:
    # Any: protobuf's C descriptor type and its Python stub type are not one class.
    for field in descriptor.fields:
        if field.name not in printed:
            continue
        value = printed[field.name]
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            printed[field.name] = {key: _convert(value_field, item) for key, item in value.items()}
        elif field.is_repeated:
            printed[field.name] = [_convert(field, item) for item in value]
        else:
            printed[field.name] = _convert(field, value)
    return printed


def _convert(field: FieldDescriptor, value: Any) -> Any:
    if field.message_type is not None and isinstance(value, dict):
        return _numbers(field.message_type, value)
    if field.type in _INT64_TYPES and isinstance(value, str):
        return int(value)
    return value
