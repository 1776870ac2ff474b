"""OTLP's trace export request (`ExportTraceServiceRequest`, protobuf), written
by hand: the few message types a span needs are varints, fixed64 times and
length-delimited fields, and writing them directly is several times cheaper
than building protobuf message objects (it runs on the export thread, but it
is this process's CPU all the same).

The field numbers are OTLP's (opentelemetry-proto `trace/v1/trace.proto`,
`common/v1/common.proto`, `resource/v1/resource.proto`); a unit test decodes
what this writes with the reference message classes.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any, Protocol


class Span(Protocol):
    """What is read of a span (`common/telemetry.py:Span`, which imports this module)."""

    trace_id: int
    span_id: int
    parent_id: int
    name: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: Mapping[str, Any]
    events: list[tuple[int, str, Mapping[str, Any]]] | None
    status: int
    status_message: str


_pack_fixed64 = struct.Struct("<Q").pack
_pack_double = struct.Struct("<d").pack
_pack_times = struct.Struct("<BQBQ").pack  # start and end: tag, fixed64, tag, fixed64
# Cached encodings are bounded: attribute values repeat (node types, routes),
# ids do not, so a full cache is simply emptied.
_CACHE_LIMIT = 16384
# Only strings this short are cached: names, types, titles, routes repeat;
# ids (a UUID is 36 characters) never do and would only churn the cache.
_CACHED_TEXT = 32
_SCOPE = "firstgate"


def varint(value: int) -> bytes:
    if value < 0:
        value &= (1 << 64) - 1  # int64 as protobuf writes it: ten bytes
    if value < 0x80:
        return _SMALL[value] if value < len(_SMALL) else bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL = [bytes((i,)) for i in range(0x80)]
_LENGTHS = [varint(i) if i < 0x80 else b"" for i in range(0x80)]
for _i in range(0x80, 1 << 14):
    _LENGTHS.append(bytes(((_i & 0x7F) | 0x80, _i >> 7)))


def _length(size: int) -> bytes:
    return _LENGTHS[size] if size < 16384 else varint(size)


def _field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field: its tag, the payload's length, the payload."""
    return tag + _length(len(payload)) + payload


def _any_value(value: Any) -> bytes:
    """An `AnyValue`'s bytes (without its own tag and length)."""
    kind = type(value)
    if kind is str:
        return _field(b"\x0a", value.encode("utf-8", "replace"))
    if kind is bool:
        return b"\x10\x01" if value else b"\x10\x00"
    if kind is int:
        return b"\x18" + varint(value)
    if kind is float:
        return b"\x21" + _pack_double(value)
    if kind in (list, tuple):
        values = b"".join(_field(b"\x0a", _any_value(item)) for item in value)
        return _field(b"\x2a", values)  # ArrayValue
    return _field(b"\x0a", str(value).encode("utf-8", "replace"))


class Encoder:
    """Writes export requests for one service; keeps the encodings of repeated
    keys and values."""

    def __init__(self, service_name: str) -> None:
        resource = _field(b"\x0a", self._key_value("service.name", service_name))  # Resource
        scope = _field(b"\x0a", _field(b"\x0a", _SCOPE.encode()))  # InstrumentationScope
        self._resource = _field(b"\x0a", resource)
        self._scope = scope
        self._keys: dict[str, bytes] = {}
        # Per field tag (a span's attributes, an event's): the bytes include it.
        self._pairs: dict[bytes, dict[tuple[str, Any, type], bytes]] = {b"\x4a": {}, b"\x1a": {}}
        self._names: dict[str, bytes] = {}

    def encode(self, spans: Sequence[Span]) -> bytes:
        # A batch's spans share a few traces and parents: their ids' bytes, once.
        ids: dict[int, bytes] = {}
        body = b"".join([_field(b"\x12", self._span(span, ids)) for span in spans])
        scope_spans = self._scope + body
        resource_spans = self._resource + _field(b"\x12", scope_spans)
        return _field(b"\x0a", resource_spans)

    def _key_value(self, key: str, value: Any) -> bytes:
        """A `KeyValue`'s bytes (without its own tag and length)."""
        return _field(b"\x0a", key.encode()) + _field(b"\x12", _any_value(value))

    def _attributes(self, tag: bytes, attributes: Mapping[str, Any]) -> list[bytes]:
        pairs = self._pairs[tag]
        keys = self._keys
        out: list[bytes] = []
        for key, value in attributes.items():
            if value is None:
                continue
            kind = type(value)
            if kind is str and len(value) <= _CACHED_TEXT or kind is int or kind is bool:
                pair = (key, value, kind)  # the type too: True == 1
                found = pairs.get(pair)
                if found is None:
                    if len(pairs) >= _CACHE_LIMIT:
                        pairs.clear()
                    found = pairs[pair] = _field(tag, self._key_value(key, value))
                out.append(found)
                continue
            prefix = keys.get(key)
            if prefix is None:
                if len(keys) >= _CACHE_LIMIT:
                    keys.clear()
                prefix = keys[key] = _field(b"\x0a", key.encode())
            kv = prefix + _field(b"\x12", _any_value(value))
            out.append(tag + _length(len(kv)) + kv)
        return out

    def _name(self, name: str) -> bytes:
        found = self._names.get(name)
        if found is None:
            if len(self._names) >= _CACHE_LIMIT:
                self._names.clear()
            found = self._names[name] = _field(b"\x2a", name.encode("utf-8", "replace"))
        return found

    def _span(self, span: Span, ids: dict[int, bytes]) -> bytes:
        """A `Span`'s bytes (without its own tag and length)."""
        trace = ids.get(span.trace_id)
        if trace is None:
            trace = ids[span.trace_id] = b"\x0a\x10" + span.trace_id.to_bytes(16, "big")
        parts = [trace, b"\x12\x08", span.span_id.to_bytes(8, "big")]
        if span.parent_id:
            parent = ids.get(-span.parent_id)  # negative: not mistaken for a trace id
            if parent is None:
                parent = ids[-span.parent_id] = b"\x22\x08" + span.parent_id.to_bytes(8, "big")
            parts.append(parent)
        parts.append(self._name(span.name))
        parts.append(b"\x30" + _SMALL[span.kind])
        parts.append(_pack_times(0x39, span.start_ns, 0x41, span.end_ns))
        parts.extend(self._attributes(b"\x4a", span.attributes))
        events = span.events
        if events:
            for at, name, attributes in events:
                event = b"".join(
                    [
                        b"\x09",
                        _pack_fixed64(at),
                        _field(b"\x12", name.encode("utf-8", "replace")),
                        *self._attributes(b"\x1a", attributes),
                    ]
                )
                parts.append(_field(b"\x5a", event))
        if span.status:
            status = _field(b"\x12", span.status_message.encode("utf-8", "replace"))
            parts.append(_field(b"\x7a", status + b"\x18" + _SMALL[span.status]))
        return b"".join(parts)
