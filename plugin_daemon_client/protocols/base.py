"""The one interface every wire protocol implements.

A protocol turns a chat call into an HTTP request, an error status into a
typed error, and (per stream) response bytes into frames. `LLMClient` holds
one protocol object and only moves bytes to frames to the gate; nothing else
knows which protocol a route speaks.

Server text never reaches an error as a plain string: protocols wrap it in
`ServerText`, and the client's `Redactor` turns it into a credential-free
quote on the way out (see `common/redaction.py`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..errors import InvokeError
from .frames import Frame, FrameError
from .request import PreparedRequest

# A whole read of plain content tokens: (how many, their joined text).
TokenRun = tuple[int, str]
# What a stream decoder yields: a decoded frame, the text of one plain content
# token (no reasoning, finish reason or usage), or a run of them.
Item = Frame | str | TokenRun


# Who the plugin daemon is told makes a request, unless the settings say.
DEFAULT_USER_ID = "firstgate"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where a route's requests go and who makes them (protocol-neutral)."""

    base_url: str
    api_key: str | None = None
    tenant_id: str | None = None
    plugin_id: str | None = None
    user_id: str = DEFAULT_USER_ID


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A function the model may call: its name, what it does, and a JSON schema
    of its arguments (protocol-neutral; each protocol spells it its own way)."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ChatCall:
    """One chat completion, as a node asks for it.

    Messages are OpenAI-shaped (`role`, `content`; an assistant message may
    carry `tool_calls`, a `tool` message answers one by `tool_call_id`).
    `json_schema` asks the server to answer with JSON of that schema (the
    response format); `stream=False` asks for one JSON body instead of a stream.
    """

    model: str
    messages: list[dict[str, Any]]
    parameters: dict[str, Any] = field(default_factory=dict)
    stop: list[str] | None = None
    provider: str | None = None
    credentials: dict[str, Any] | None = None
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: str | None = None  # "auto", "required", "none"; None: the server's default
    json_schema: dict[str, Any] | None = None
    stream: bool = True


class StreamDecoder(ABC):
    """One response's bytes -> items. Made fresh for every stream: whatever it
    learns (the fast path's frame shape) lives and dies with that stream."""

    # The body's media type; another one on a body that does not parse is
    # reported as an unexpected content type.
    media_type: ClassVar[str] = "text/event-stream"

    @abstractmethod
    def feed(self, data: bytes) -> Iterable[Item]:
        """Items of the frames `data` completes. Decoding is lazy: the items
        before a bad frame are yielded before its error is raised."""

    @abstractmethod
    def close(self) -> Iterator[Item]:
        """The body ended: items of a last unterminated frame. A tail that does
        not decode raises `TruncatedFrame` (the body stopped mid-frame)."""


class TruncatedFrame(FrameError):
    """The body ended in the middle of a frame."""


class WireProtocol(ABC):
    """Build requests, map error statuses, make per-stream decoders."""

    kind: ClassVar[str]
    # The liveness probe a route of this protocol gets by default: `auto` where
    # the server doing the work answers the probe, `off` where it cannot.
    default_probe: ClassVar[str] = "auto"
    # Whether a route of this protocol takes a JSON schema as the response format
    # by default (a route's `json_schema` setting overrides it): where it does not,
    # a schema goes into the prompt.
    default_json_schema: ClassVar[bool] = True

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint

    @classmethod
    def schema_problem(cls, schema: dict[str, Any]) -> str | None:
        """Why this protocol cannot send `schema` (the answer's JSON schema), or
        None. The loader asks it for every node whose schema goes to a route of
        this protocol, so what cannot be said is a problem before any run."""
        return None

    @abstractmethod
    def request(self, call: ChatCall) -> PreparedRequest: ...

    @abstractmethod
    def status_error(
        self, status: int, body: bytes, *, retry_after_s: float | None
    ) -> InvokeError: ...

    @abstractmethod
    def decoder(self, max_line_bytes: int, *, stream: bool = True) -> StreamDecoder:
        """A fresh decoder for one response; `stream=False`: the call asked for
        one JSON body (a protocol that always streams ignores it)."""
