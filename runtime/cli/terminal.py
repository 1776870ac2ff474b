"""What `firstgate run` shows while a run goes: streamed answer text, a
waiting line on a TTY, retry and error notes, then outputs and run stats."""

from __future__ import annotations

import json
import math
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, TextIO

from firstgate.runtime.cli.messages import render_error
from firstgate.runtime.execution import events as ev
from firstgate.runtime.execution.redaction import NO_SECRETS, Redactor

from firstgate import locales


@dataclass(slots=True)
class Stats:
    """Time to first token and token rate of the first model call that finished."""

    ttft: float | None = None
    rate: float | None = None
    # node -> (its latest attempt's ttft, run time at that first token)
    _first: dict[str, tuple[float, float]] = field(default_factory=dict)

    def observe(self, event: ev.Event) -> None:
        if isinstance(event, ev.NodeFirstToken):
            self._first[event.node_id] = (event.ttft, event.elapsed)
        elif (
            isinstance(event, ev.NodeSucceeded)
            and self.ttft is None
            and event.node_id in self._first
        ):
            self.ttft, first_at = self._first[event.node_id]
            usage = event.outputs.get("usage")
            tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
            duration = event.elapsed - first_at
            self.rate = tokens / duration if duration > 0 and tokens else None


class WaitingLine:
    """A self-updating status line on stderr while an LLM node waits for its first token."""

    def __init__(self, stream: TextIO, locale: str, enabled: bool) -> None:
        self.stream = stream
        self.locale = locale
        self.enabled = enabled
        self._since: float | None = None
        self._note = ""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._shown = False
        self._thread: threading.Thread | None = None

    def start_waiting(self) -> None:
        if not self.enabled:
            return
        with self._lock:
            self._since = time.monotonic()
            self._note = ""
        if self._thread is None:
            self._thread = threading.Thread(target=self._tick, daemon=True)
            self._thread.start()

    def note(self, text: str) -> None:
        with self._lock:
            self._note = terminal_safe(text)

    def clear(self) -> None:
        with self._lock:
            self._since = None
            if self._shown:
                self.stream.write("\r\033[K")
                self.stream.flush()
                self._shown = False

    def close(self) -> None:
        self._stop.set()
        self.clear()

    def _tick(self) -> None:
        while not self._stop.wait(0.2):
            with self._lock:
                if self._since is None:
                    continue
                line = locales.t(
                    "cli.waitingFirstToken",
                    self.locale,
                    elapsed=f"{time.monotonic() - self._since:.1f}",
                )
                if self._note:
                    line = f"{line}  {self._note}"
                self.stream.write("\r\033[K" + line)
                self.stream.flush()
                self._shown = True


class HumanView:
    def __init__(
        self,
        locale: str,
        out: TextIO = sys.stdout,
        err: TextIO = sys.stderr,
        calls_model: frozenset[str] = frozenset(),
        redactor: Redactor = NO_SECRETS,
    ) -> None:
        self.locale = locale
        self.redact = redactor.text
        self.out = out
        self.err = err
        self.calls_model = calls_model  # nodes that wait on a model server
        self.stats = Stats()
        self.waiting = WaitingLine(err, locale, enabled=err.isatty())
        self._streamed = False

    def show(self, event: ev.Event) -> None:
        self.stats.observe(event)
        if isinstance(event, ev.NodeStarted) and event.node_id in self.calls_model:
            self.waiting.start_waiting()
        elif isinstance(event, ev.NodeWaiting):
            self.waiting.note(
                _localized(event.message_key, event.params, event.message, self.locale)
            )
        elif isinstance(event, ev.NodeFallback):
            self._fallback(event)
        elif isinstance(event, ev.NodeFirstToken):
            self.waiting.clear()
        elif isinstance(event, ev.TextChunk):
            self.waiting.clear()
            self.out.write(terminal_safe(event.text))
            self.out.flush()
            self._streamed = True
        elif isinstance(event, ev.NodeRetry):
            self._note_line(
                locales.t(
                    "cli.retrying",
                    self.locale,
                    title=event.title or event.node_id,
                    attempt=event.attempt,
                    error=render_error(event.error, self.locale, event.error_message),
                )
            )
            self.waiting.start_waiting()
        elif isinstance(event, ev.NodeException):
            self._note_line(
                locales.t(
                    "cli.nodeException",
                    self.locale,
                    title=event.title or event.node_id,
                    strategy=event.strategy,
                    error=render_error(event.error, self.locale, event.error_message),
                )
            )
        elif isinstance(event, ev.NodeFailed):
            self._note_line(
                locales.t(
                    "cli.nodeFailed",
                    self.locale,
                    title=event.title or event.node_id,
                    error=render_error(event.error, self.locale, event.error_message),
                )
            )
        elif isinstance(event, ev.NodeFinished):
            self.waiting.clear()
        elif isinstance(event, ev.WorkflowFinished):
            self._summary(event)

    def _fallback(self, event: ev.NodeFallback) -> None:
        # Every decision of the chain gets a line, except the routine "trying X
        # for at most N s" before each attempt (it is in --json).
        if event.kind == "cap":
            return
        message = _localized(event.message_key, event.params, event.message, self.locale)
        self._note_line(
            locales.t(
                "cli.fallback", self.locale, title=event.title or event.node_id, message=message
            )
        )
        if event.kind == "swap":
            self.waiting.start_waiting()

    def _note_line(self, text: str) -> None:
        self.waiting.clear()
        if self._streamed:
            self.out.write("\n")
            self._streamed = False
        self.err.write(terminal_safe(self.redact(text)) + "\n")
        self.err.flush()

    def _summary(self, event: ev.WorkflowFinished) -> None:
        self.waiting.close()
        if self._streamed:
            self.out.write("\n")
        outputs = event.outputs
        lines = [
            "",
            locales.t("cli.outputs", self.locale) + ":",
            json.dumps(outputs, ensure_ascii=False, indent=2, default=str),
        ]
        if self.stats.ttft is not None:
            lines.append(locales.t("cli.ttft", self.locale, seconds=f"{self.stats.ttft:.2f}"))
        if self.stats.rate is not None:
            lines.append(
                locales.t("cli.tokensPerSecond", self.locale, rate=f"{self.stats.rate:.1f}")
            )
        if event.run.conversation_id:
            lines.append(locales.t("cli.conversation", self.locale, id=event.run.conversation_id))
        lines.append(status_line(event, self.locale))
        self.out.write(terminal_safe(self.redact("\n".join(lines))) + "\n")
        self.out.flush()


def _localized(key: str, params: dict[str, Any], english: str, locale: str) -> str:
    """An event's message in the user's locale; its English text if the key is unknown."""
    if not key:
        return english
    try:
        return locales.t(key, locale, **params)
    except (KeyError, ValueError):
        return english


def status_line(event: ev.Event, locale: str) -> str:
    if isinstance(event, ev.WorkflowSucceeded):
        return locales.t("cli.status.succeeded", locale)
    if isinstance(event, ev.WorkflowPartialSucceeded):
        return locales.t("cli.status.partialSucceeded", locale, num=event.exceptions_count)
    if isinstance(event, ev.WorkflowStopped):
        return locales.t("cli.status.aborted", locale, reason=event.reason)
    assert isinstance(event, ev.WorkflowFailed)
    return locales.t(
        "cli.status.failed", locale, error=render_error(event.error, locale, event.error_message)
    )


def json_line(event: ev.Event) -> str:
    """One event as one line of JSON: Dify's streaming event (`event.to_dict()`)."""
    return strict_json(event.to_dict())


def strict_json(value: Any) -> str:
    """JSON that every parser reads: NaN and ±Infinity (which Python would write
    as bare words) become null, as JavaScript's JSON.stringify writes them."""
    try:
        return json.dumps(value, ensure_ascii=False, default=str, allow_nan=False)
    except ValueError:
        return json.dumps(_finite(value), ensure_ascii=False, default=str, allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


# What a model (or any server) sends must not drive the terminal: escape
# sequences could clear the screen, retitle the window, or rewrite what was
# shown. C0 controls other than tab and newline become their visible symbols
# (ESC is ␛), DEL and C1 controls and bidirectional overrides are spelled out,
# and carriage returns are dropped. Only the human view does this; --json
# carries the text exactly (JSON escapes controls itself).
_NEUTRAL: dict[int, str | None] = {
    **{code: chr(0x2400 + code) for code in range(0x20) if code not in (0x09, 0x0A)},
    0x0D: None,
    0x7F: "\u2421",
    **{code: f"\\x{code:02x}" for code in range(0x80, 0xA0)},
    **{code: f"\\u{code:04x}" for code in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))},
}


def terminal_safe(text: str) -> str:
    return text.translate(_NEUTRAL)
