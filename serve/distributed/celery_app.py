"""The Celery application both sides build from the same settings: the API
process only sends `firstgate.run` messages, a worker also executes them.

Delivery: a message is acknowledged when its task returns (`acks_late`), so
one taken by a worker that dies is handed out again by the broker after the
visibility timeout: never lost. A run is never executed twice at once: the
task claims the run in Redis first (`run_state`), and a second delivery of
a run that is held, or finished, does nothing. A message that is not a run
(malformed, undecodable, for an unknown task) is written to the dead-letter
stream and acknowledged, never handed out again (`DeadLetterConsumer`).
"""

from __future__ import annotations

from typing import Any

from celery import Celery
from celery.worker.consumer import Consumer
from firstgate.serve.distributed.settings import DistributedSettings

TASK_NAME = "firstgate.run"
# Set by the worker process at start-up: where dead letters go.
_dead_letters: list[Any] = []


def make_celery(settings: DistributedSettings) -> Celery:
    app = Celery("firstgate", broker=settings.broker, set_as_current=False)
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,
        result_backend=None,
        task_acks_late=True,
        # One message taken ahead per free greenlet, no more: a worker that dies
        # strands few messages until the visibility timeout.
        worker_prefetch_multiplier=1,
        task_default_queue=settings.queue,
        broker_transport_options={
            "visibility_timeout": settings.visibility_timeout,
            "socket_keepalive": True,
            "retry_on_timeout": True,
            "health_check_interval": 15,
        },
        broker_connection_retry_on_startup=True,
        broker_connection_max_retries=None,
        broker_heartbeat=0,
        # The run's own limit ends it as `failed` (the engine's timer); Celery's
        # hard limit is the backstop for a task that does not end after that.
        task_time_limit=settings.time_limit + 60.0,
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
        worker_enable_remote_control=False,
        worker_consumer="firstgate.serve.distributed.celery_app:DeadLetterConsumer",
        worker_cancel_long_running_tasks_on_connection_loss=False,
    )
    return app


def set_dead_letter_sink(sink: Any) -> None:
    _dead_letters[:] = [sink]


def _dead_letter(reason: str, body: Any, **details: str) -> None:
    for sink in _dead_letters:
        sink(reason, body, **details)


class DeadLetterConsumer(Consumer):
    """Celery's consumer, with every message it cannot run recorded as a dead letter
    (then acknowledged by Celery as before, so it is not delivered again)."""

    def on_decode_error(self, message: Any, exc: Exception) -> None:
        _dead_letter("undecodable", _raw(message), error=f"{type(exc).__name__}: {exc}")
        super().on_decode_error(message, exc)

    def on_unknown_message(self, body: Any, message: Any) -> None:
        _dead_letter("unknown-message", _raw(message))
        super().on_unknown_message(body, message)

    def on_unknown_task(self, body: Any, message: Any, exc: Exception) -> None:
        _dead_letter("unknown-task", _raw(message), error=str(exc)[:500])
        super().on_unknown_task(body, message, exc)

    def on_invalid_task(self, body: Any, message: Any, exc: Exception) -> None:
        _dead_letter("invalid-task", _raw(message), error=str(exc)[:500])
        super().on_invalid_task(body, message, exc)


def _raw(message: Any) -> str:
    body = getattr(message, "body", b"")
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    return str(body)[:65536]
