"""Dify's tool messages: what every tool backend (built-in, MCP, plugin daemon)
hands back, one message at a time, and the errors of tool calls.

A tool answers with a stream of messages: text, JSON objects, links, images
and binary blobs (whole, or in chunks that `merge_blob_chunks` reassembles
under a size cap), and variables (whole, or streamed as text pieces). The
plugin daemon sends them as JSON (`parse_wire_message`: blobs base64-encoded);
the local backends build them directly. The tool node turns the stream into
its outputs (`text`, `files`, `json` and the variables).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from firstgate.connectors.errors import ConnectorError


class ToolError(ConnectorError):
    """A tool call failed (the node's retry and error strategy handle it)."""

    message_key = "errors.tool.failed"


class ToolTimeoutError(ToolError):
    message_key = "errors.tool.timeout"


class ToolCancelledError(ToolError):
    message_key = "errors.tool.cancelled"


class ToolMessageError(ToolError):
    """A backend sent a message that is not one of Dify's tool messages."""

    message_key = "errors.tool.badMessage"


class MessageType(StrEnum):
    TEXT = "text"
    JSON = "json"
    LINK = "link"
    IMAGE = "image"
    IMAGE_LINK = "image_link"
    BINARY_LINK = "binary_link"
    BLOB = "blob"
    BLOB_CHUNK = "blob_chunk"
    VARIABLE = "variable"
    FILE = "file"
    LOG = "log"
    RETRIEVER_RESOURCES = "retriever_resources"


@dataclass(frozen=True, slots=True)
class BlobChunk:
    id: str
    sequence: int
    total_length: int
    end: bool


@dataclass(frozen=True, slots=True)
class ToolMessage:
    """One message. Which fields are set depends on `type`:
    text/link/image/*_link: `text`; json: `json`; blob, blob_chunk: `blob`
    (and `chunk`); variable: `name`, `value`, `stream`."""

    type: MessageType
    text: str = ""
    json: dict[str, Any] | list[Any] | None = None
    blob: bytes = b""
    chunk: BlobChunk | None = None
    name: str = ""
    value: Any = None
    stream: bool = False
    meta: Mapping[str, Any] = field(default_factory=dict)
    # A json message that repeats what a text message says (Dify's workflow
    # tool): an agent's observation leaves it out; the node's `json` keeps it.
    suppress_output: bool = False

    @property
    def mime_type(self) -> str:
        meta = self.meta
        return str(meta.get("mime_type") or meta.get("mimetype") or "application/octet-stream")

    @property
    def filename(self) -> str | None:
        name = self.meta.get("filename")
        return name if isinstance(name, str) and name else None


def text(value: str) -> ToolMessage:
    return ToolMessage(MessageType.TEXT, text=value)


def json_message(
    value: dict[str, Any] | list[Any], *, suppress_output: bool = False
) -> ToolMessage:
    return ToolMessage(MessageType.JSON, json=value, suppress_output=suppress_output)


def blob(data: bytes, mime_type: str) -> ToolMessage:
    return ToolMessage(MessageType.BLOB, blob=data, meta={"mime_type": mime_type})


def variable(name: str, value: Any) -> ToolMessage:
    return ToolMessage(MessageType.VARIABLE, name=name, value=value)


# --- the wire shape (the plugin daemon's ToolInvokeMessage) -----------------------


def _bad(detail: str) -> ToolMessageError:
    return ToolMessageError(detail=detail)


def _decode_blob(raw: object) -> bytes:
    if not isinstance(raw, str):
        raise _bad("a blob is not a base64 string")
    try:
        return base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise _bad("a blob is not valid base64") from None


def _int(payload: Mapping[str, Any], key: str) -> int:
    value = payload.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(f"a blob chunk's {key} is not an integer")
    return value


def parse_wire_message(raw: object) -> ToolMessage:
    """A message as JSON-decoded from the wire: `{"type", "message", "meta"}`."""
    if not isinstance(raw, Mapping):
        raise _bad("not an object")
    try:
        kind = MessageType(str(raw.get("type")))
    except ValueError:
        raise _bad(f"unknown message type {str(raw.get('type'))[:40]!r}") from None
    payload = raw.get("message")
    payload = payload if isinstance(payload, Mapping) else {}
    meta = raw.get("meta")
    meta = dict(meta) if isinstance(meta, Mapping) else {}
    match kind:
        case (
            MessageType.TEXT
            | MessageType.LINK
            | MessageType.IMAGE
            | MessageType.IMAGE_LINK
            | MessageType.BINARY_LINK
        ):
            value = payload.get("text")
            if not isinstance(value, str):
                raise _bad(f"a {kind.value} message without text")
            return ToolMessage(kind, text=value, meta=meta)
        case MessageType.JSON:
            value = payload.get("json_object")
            if not isinstance(value, dict | list):
                raise _bad("a json message without a JSON object")
            quiet = payload.get("suppress_output") is True
            return ToolMessage(kind, json=value, meta=meta, suppress_output=quiet)
        case MessageType.BLOB:
            return ToolMessage(kind, blob=_decode_blob(payload.get("blob")), meta=meta)
        case MessageType.BLOB_CHUNK:
            chunk_id = payload.get("id")
            if not isinstance(chunk_id, str) or not chunk_id:
                raise _bad("a blob chunk without an id")
            chunk = BlobChunk(
                chunk_id,
                _int(payload, "sequence"),
                _int(payload, "total_length"),
                bool(payload.get("end")),
            )
            return ToolMessage(kind, blob=_decode_blob(payload.get("blob")), chunk=chunk, meta=meta)
        case MessageType.VARIABLE:
            name = payload.get("variable_name")
            if not isinstance(name, str) or not name:
                raise _bad("a variable message without a name")
            stream = bool(payload.get("stream"))
            value = payload.get("variable_value")
            if stream and not isinstance(value, str):
                raise _bad(f"the streamed variable {name} is not text")
            return ToolMessage(kind, name=name, value=value, stream=stream, meta=meta)
        case MessageType.LOG:  # an agent strategy's step: kept whole for its agent_log
            return ToolMessage(kind, json=dict(payload), meta=meta)
        case _:  # file, retriever resources: carried, not interpreted
            return ToolMessage(kind, meta=meta)


# --- blob chunks ----------------------------------------------------------------------


@dataclass(slots=True)
class _Pending:
    total_length: int
    data: bytearray


def merge_blob_chunks(messages: Iterable[ToolMessage], max_bytes: int) -> Iterator[ToolMessage]:
    """Reassemble `blob_chunk` messages into whole `blob` messages.

    A declared or received size over `max_bytes`, a chunk past its declared
    length, or a stream that ends with a blob unfinished is a `ToolError`
    naming the blob; memory never grows past the cap.
    """
    pending: dict[str, _Pending] = {}
    for message in messages:
        chunk = message.chunk
        if message.type is not MessageType.BLOB_CHUNK or chunk is None:
            if message.type is MessageType.BLOB and len(message.blob) > max_bytes:
                raise ToolError("errors.tool.fileTooLarge", limit=max_bytes)
            yield message
            continue
        if chunk.total_length < 0 or chunk.total_length > max_bytes:
            raise ToolError("errors.tool.fileTooLarge", limit=max_bytes)
        state = pending.get(chunk.id)
        if state is None:
            state = pending[chunk.id] = _Pending(chunk.total_length, bytearray())
        elif state.total_length != chunk.total_length:
            raise _bad(f"blob {chunk.id[:40]} changed its total length")
        if len(state.data) + len(message.blob) > state.total_length:
            raise _bad(f"blob {chunk.id[:40]} is longer than its declared length")
        state.data += message.blob
        if chunk.end:
            del pending[chunk.id]
            yield ToolMessage(MessageType.BLOB, blob=bytes(state.data), meta=message.meta)
    if pending:
        raise _bad(f"the stream ended inside blob {sorted(pending)[0][:40]}")
