"""A run in Redis: who holds it, its events, its stop flag.

Keys (all under `firstgate:`), per task id:

- `run:<task>`: a hash: the request as queued, the app and user it belongs to,
  `state` (queued, running, finished), `owner` (the token of the claim that
  holds it: worker id and attempt), `attempts`, `seq` (events published), the
  run's identity once started (`info`);
- `lease:<task>`: the owner's token, with a time to live the owner renews;
  `leases` (a sorted set, task -> lease deadline) is where sweepers look;
- `events:<task>`: a Redis stream; the n-th event of the run has the id `0-n`,
  so a position in the stream is the number of events before it (what
  `EventSource.read(after)` and `Last-Event-ID` count), in every process;
- `stop:<task>`: set by a stop request (a worker that starts the run later
  still sees it); the channel `stops` tells the workers at once;
- `runid:<workflow_run_id>`: the task id.

A run that pauses (a human-input node) is let go, not ended: `state` becomes
`paused`, no worker holds it and its stream stays open (no end marker). A
form closed for it (`reopen`, any API process) names the form in `form` and
queues the run again; if its holder has not let it go yet, the holder finds
`form` set when it does and queues the run itself (one script each, so the
run is queued once whichever comes first).

Every write of a run's events goes through a script that checks `owner`
first: a worker that lost its hold on a run (it hung past its lease, another
took the run over) can publish nothing more, so a run's stream never mixes two
holders' events.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import redis
from firstgate.common import metrics
from firstgate.runtime.execution.events import RunInfo
from firstgate.serve.errors import ApiError, dump_json
from firstgate.serve.file_links import FileLinks
from firstgate.serve.launch import Launcher
from firstgate.serve.runs import EventSource

PREFIX = "firstgate:"
STOP_CHANNEL = PREFIX + "stops"
LEASES = PREFIX + "leases"
DEAD_LETTERS = PREFIX + "dead-letters"
DEAD_LETTER_MAX = 10_000  # entries kept (the oldest go first)
UNFINISHED_TTL_S = 7 * 24 * 3600.0  # a run's keys outlive any queue wait, not forever
END_FIELD = b"end"
EVENT_FIELD = b"e"
REFUSED_FIELD = b"r"


def run_key(task_id: str) -> str:
    return f"{PREFIX}run:{task_id}"


def lease_key(task_id: str) -> str:
    return f"{PREFIX}lease:{task_id}"


def events_key(task_id: str) -> str:
    return f"{PREFIX}events:{task_id}"


def stop_key(task_id: str) -> str:
    return f"{PREFIX}stop:{task_id}"


def run_id_key(workflow_run_id: str) -> str:
    return f"{PREFIX}runid:{workflow_run_id}"


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


# KEYS: run, lease, events, leases, stop; ARGV: owner, kind (e|r|end|pause), payload,
# keep_finished_ms, task, unfinished_ms. `pause` (payload: the form this attempt
# resumed with, or ''): let the run go; -2 when a newer form is waiting (queued again);
# -3 when a stop was asked for (the holder keeps it, to end it as stopped).
_PUBLISH = """
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then return -1 end
if ARGV[2] == 'pause' then
  if redis.call('EXISTS', KEYS[5]) == 1 then return -3 end
  redis.call('DEL', KEYS[2])
  redis.call('ZREM', KEYS[4], ARGV[5])
  redis.call('PEXPIRE', KEYS[1], ARGV[6])
  redis.call('PEXPIRE', KEYS[3], ARGV[6])
  local form = redis.call('HGET', KEYS[1], 'form')
  if form and form ~= '' and form ~= ARGV[3] then
    redis.call('HSET', KEYS[1], 'state', 'queued', 'owner', '', 'attempts', 0)
    return -2
  end
  redis.call('HSET', KEYS[1], 'state', 'paused', 'owner', '')
  return 0
end
local n = redis.call('HINCRBY', KEYS[1], 'seq', 1)
if ARGV[2] == 'end' then
  redis.call('XADD', KEYS[3], '0-' .. n, 'end', '1')
  redis.call('HSET', KEYS[1], 'state', 'finished', 'owner', '')
  redis.call('DEL', KEYS[2])
  redis.call('ZREM', KEYS[4], ARGV[5])
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
  redis.call('PEXPIRE', KEYS[3], ARGV[4])
else
  redis.call('XADD', KEYS[3], '0-' .. n, ARGV[2], ARGV[3])
  if n == 1 then redis.call('PEXPIRE', KEYS[3], ARGV[6]) end
end
return n
"""

# KEYS: run, lease, leases; ARGV: owner, lease_ms, deadline_ms, max_attempts, task
_CLAIM = """
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return 'unknown' end
if state == 'finished' then return 'finished' end
if redis.call('EXISTS', KEYS[2]) == 1 then return 'busy' end
local attempts = tonumber(redis.call('HGET', KEYS[1], 'attempts') or '0')
if state ~= 'queued' and attempts >= tonumber(ARGV[4]) then return 'exhausted' end
redis.call('HSET', KEYS[1], 'state', 'running', 'owner', ARGV[1])
redis.call('HINCRBY', KEYS[1], 'attempts', 1)
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[5])
return 'claimed'
"""

# KEYS: run, lease, leases; ARGV: owner, lease_ms, deadline_ms, task
_RENEW = """
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[4])
return 1
"""

# KEYS: run, lease, leases; ARGV: task, max_attempts, reaper token, lease_ms, deadline_ms
# A lease that lapsed: the run is re-queued (attempts left) or taken over by the
# reaper to be ended as failed. 'alive' when its holder renewed it after all.
_REAP = """
local ttl = redis.call('PTTL', KEYS[2])
if ttl > 0 then
  redis.call('ZADD', KEYS[3], ARGV[5] - ARGV[4] + ttl, ARGV[1])
  return 'alive'
end
redis.call('ZREM', KEYS[3], ARGV[1])
if redis.call('HGET', KEYS[1], 'state') ~= 'running' then return 'gone' end
local attempts = tonumber(redis.call('HGET', KEYS[1], 'attempts') or '0')
if attempts < tonumber(ARGV[2]) then
  redis.call('HSET', KEYS[1], 'state', 'queued', 'owner', '')
  return 'requeue'
end
redis.call('HSET', KEYS[1], 'owner', ARGV[3])
redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[4])
return 'fail'
"""


# KEYS: run; ARGV: form token. A closed form's run: queued again when paused
# ('queued': the caller sends the task), else noted for its holder ('pending').
_REOPEN = """
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return 'unknown' end
if state == 'finished' then return 'finished' end
if redis.call('HGET', KEYS[1], 'form') == ARGV[1] then return 'pending' end
redis.call('HSET', KEYS[1], 'form', ARGV[1])
if state ~= 'paused' then return 'pending' end
redis.call('HSET', KEYS[1], 'state', 'queued', 'attempts', 0)
return 'queued'
"""


# KEYS: run, stop, lease, leases; ARGV: reason, unfinished_ms, stopper, lease_ms,
# deadline_ms, task, channel. The stop flag (and the workers told); a paused run,
# which no worker holds to hear it, is taken by the stopper to end it (1).
_STOP = """
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
redis.call('PUBLISH', ARGV[7], ARGV[6])
if redis.call('HGET', KEYS[1], 'state') ~= 'paused' then return 0 end
redis.call('HSET', KEYS[1], 'state', 'running', 'owner', ARGV[3])
redis.call('SET', KEYS[3], ARGV[3], 'PX', ARGV[4])
redis.call('ZADD', KEYS[4], ARGV[5], ARGV[6])
return 1
"""

# KEYS: run, runid; ARGV: unfinished_ms, task, then the hash's fields and values.
# A run Redis no longer knows (its keys outlived), written again from the store's
# truth and queued (1); 0 when it is known after all (another process revived it).
_REVIVE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 3))
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[1])
return 1
"""


class RunStore:
    """The Redis side of runs, for API processes and workers alike."""

    def __init__(self, client: redis.Redis, *, keep_finished: float) -> None:
        self.redis = client
        self.keep_finished_ms = _ms(keep_finished)
        self._publish = client.register_script(_PUBLISH)
        self._claim = client.register_script(_CLAIM)
        self._renew = client.register_script(_RENEW)
        self._reap = client.register_script(_REAP)
        self._reopen = client.register_script(_REOPEN)
        self._stop = client.register_script(_STOP)
        self._revive = client.register_script(_REVIVE)

    # ---- queueing (API side)

    def queue(self, task_id: str, workflow_run_id: str, meta: Mapping[str, str]) -> None:
        ttl = _ms(UNFINISHED_TTL_S)
        pipe = self.redis.pipeline()
        pipe.hset(run_key(task_id), mapping={**meta, "state": "queued", "attempts": 0, "seq": 0})
        pipe.pexpire(run_key(task_id), ttl)
        pipe.set(run_id_key(workflow_run_id), task_id, px=ttl)
        pipe.execute()

    def meta(self, task_id: str) -> dict[str, str]:
        raw = self.redis.hgetall(run_key(task_id))
        return {k.decode(): v.decode() for k, v in raw.items()}

    def task_for_run(self, workflow_run_id: str) -> str | None:
        found = self.redis.get(run_id_key(workflow_run_id))
        return found.decode() if found else None

    def set_field(self, task_id: str, name: str, value: str) -> None:
        self.redis.hset(run_key(task_id), name, value)

    # ---- holding a run (workers)

    def claim(self, task_id: str, owner: str, lease: float, max_attempts: int) -> str:
        deadline = _ms(time.time() + lease)
        keys = [run_key(task_id), lease_key(task_id), LEASES]
        args = [owner, _ms(lease), deadline, max_attempts, task_id]
        return self._claim(keys=keys, args=args).decode()

    def renew(self, task_id: str, owner: str, lease: float) -> bool:
        deadline = _ms(time.time() + lease)
        keys = [run_key(task_id), lease_key(task_id), LEASES]
        return bool(self._renew(keys=keys, args=[owner, _ms(lease), deadline, task_id]))

    def reap(self, task_id: str, max_attempts: int, token: str, lease: float) -> str:
        deadline = _ms(time.time() + lease)
        keys = [run_key(task_id), lease_key(task_id), LEASES]
        return self._reap(keys=keys, args=[task_id, max_attempts, token, _ms(lease), deadline])

    def lapsed(self, limit: int = 100) -> list[str]:
        """Runs whose lease deadline has passed (their holder may be gone)."""
        found = self.redis.zrangebyscore(LEASES, "-inf", _ms(time.time()), start=0, num=limit)
        return [t.decode() for t in found]

    def _publish_keys(self, task_id: str) -> list[str]:
        return [
            run_key(task_id),
            lease_key(task_id),
            events_key(task_id),
            LEASES,
            stop_key(task_id),
        ]

    def publish(self, task_id: str, owner: str, kind: str, payload: bytes = b"") -> bool:
        """Append to the run's stream as its holder; False when `owner` holds it no more."""
        keys = self._publish_keys(task_id)
        args = [owner, kind, payload, self.keep_finished_ms, task_id, _ms(UNFINISHED_TTL_S)]
        return int(self._publish(keys=keys, args=args)) >= 0

    def pause(self, task_id: str, owner: str, resumed_with: str) -> str | None:
        """Let a paused run go as its holder: 'paused' (it waits for its form),
        'requeue' (a form was closed for it meanwhile: send the task again), 'stop'
        (a stop was asked for: it is still held, to be ended as stopped), None when
        `owner` holds it no more."""
        keys = self._publish_keys(task_id)
        args = [owner, "pause", resumed_with, self.keep_finished_ms, task_id]
        found = int(self._publish(keys=keys, args=[*args, _ms(UNFINISHED_TTL_S)]))
        return {0: "paused", -2: "requeue", -3: "stop"}.get(found)

    def revive(self, task_id: str, workflow_run_id: str, fields: Mapping[str, str]) -> bool:
        """Write a run's hash again, `queued` with `fields` (its request, identity and
        position, from the store), when Redis no longer knows it: True when written
        (send the task), False when the run is known after all."""
        ttl = _ms(UNFINISHED_TTL_S)
        flat = [item for pair in fields.items() for item in pair]
        keys = [run_key(task_id), run_id_key(workflow_run_id)]
        return bool(self._revive(keys=keys, args=[ttl, task_id, *flat]))

    def reopen(self, task_id: str, form_token: str) -> str:
        """A form of the run was closed: 'queued' (send the task), 'pending' (its
        holder queues it when it lets it go), 'finished' or 'unknown'."""
        return self._reopen(keys=[run_key(task_id)], args=[form_token]).decode()

    # ---- stopping

    def request_stop(self, task_id: str, reason: str, stopper: str, lease: float) -> bool:
        """Ask for the run's stop (its holder, or the worker that takes it later, ends
        it). True when the run was paused: no worker holds it, and `stopper` now
        does (with a lease, as a worker's) and must end it as stopped."""
        keys = [run_key(task_id), stop_key(task_id), lease_key(task_id), LEASES]
        deadline = _ms(time.time() + lease)
        args = [reason, _ms(UNFINISHED_TTL_S), stopper, _ms(lease), deadline, task_id]
        return bool(self._stop(keys=keys, args=[*args, STOP_CHANNEL]))

    def stop_reason(self, task_id: str) -> str | None:
        found = self.redis.get(stop_key(task_id))
        return found.decode() if found is not None else None

    # ---- poison messages

    def dead_letter(self, reason: str, body: Any, **details: str) -> None:
        metrics.dead_letter()
        text = body if isinstance(body, str) else json.dumps(body, default=repr)
        self.redis.xadd(
            DEAD_LETTERS,
            {"reason": reason, "body": text[:65536], "at": f"{time.time():.3f}", **details},
            maxlen=DEAD_LETTER_MAX,
            approximate=True,
        )


@dataclass(slots=True)
class EventSink:
    """A run's events into its Redis stream, as the claim `owner`; `lost` is called
    once if the run turns out to be held by someone else (nothing more is published)."""

    runs: RunStore
    task_id: str
    owner: str
    lost: Callable[[], None]
    fenced: bool = False
    ended: bool = False

    def _put(self, kind: str, payload: bytes = b"") -> None:
        if self.fenced or self.ended:
            return
        if not self.runs.publish(self.task_id, self.owner, kind, payload):
            self.fenced = True
            self.lost()

    def publish(self, event: dict[str, Any]) -> None:
        self._put("e", dump_json(event))

    def refuse(self, error: ApiError) -> None:
        """The run could not start: the API process that queued it answers with `error`."""
        self._put("r", json.dumps(error.to_dict()).encode())

    def end(self) -> None:
        self._put("end")
        self.ended = True

    def pause(self, resumed_with: str) -> str | None:
        """The run paused: let it go, its stream left open (`RunStore.pause`); on
        'stop' it is still held here, and the stream open for its stopped end."""
        if self.fenced or self.ended:
            return None
        verdict = self.runs.pause(self.task_id, self.owner, resumed_with)
        self.ended = verdict != "stop"
        if verdict is None:
            self.fenced = True
            self.lost()
        return verdict


def info_dict(info: RunInfo) -> dict[str, Any]:
    """A run's identity as its hash keeps it (`info`; `RunInfo(**it)` reads it back)."""
    return asdict(info)


FILES_SECRET = PREFIX + "files-secret"


def share_file_links(launcher: Launcher, client: redis.Redis) -> None:
    """Links to uploaded files that every process signs and checks alike: the
    operator's `FIRSTGATE_FILES_SECRET`, else one secret kept in Redis."""
    if os.environ.get("FIRSTGATE_FILES_SECRET"):
        return
    client.set(FILES_SECRET, secrets.token_bytes(32), nx=True)
    launcher.links = FileLinks(client.get(FILES_SECRET))


def refusal_event(task_id: str, refused: dict[str, Any]) -> dict[str, Any]:
    """A refusal read after the reply began: Dify's `error` event."""
    error = ApiError.from_dict(refused)
    return {"event": "error", "task_id": task_id, **error.body()}


class RedisEventStream(EventSource):
    """A run's events read from its Redis stream (any process, any position)."""

    def __init__(self, client: redis.Redis, task_id: str, first: int = 0) -> None:
        self.redis = client
        self.task_id = task_id
        # A run written to Redis again (`RunStore.revive`): its stream starts at the
        # position it paused at (the earlier events are gone), as `EventStream`'s.
        self.first = first
        self.key = events_key(task_id)
        self._ended = False
        self.refused: dict[str, Any] | None = None

    @property
    def ended(self) -> bool:
        return self._ended

    def read(self, after: int, timeout: float) -> tuple[list[bytes], bool]:
        block = _ms(timeout) if timeout > 0 else None
        reply = self.redis.xread({self.key: f"0-{after}"}, block=block, count=512)
        if not reply and timeout > 0:
            return [], self._ended
        if not reply:
            # XREAD without BLOCK on an empty stream: nothing yet.
            return [], self._ended
        events: list[bytes] = []
        for _id, fields in reply[0][1]:
            if END_FIELD in fields:
                self._ended = True
                break
            if REFUSED_FIELD in fields:
                self.refused = json.loads(fields[REFUSED_FIELD])
                refusal = refusal_event(self.task_id, self.refused)
                events.append(json.dumps(refusal, ensure_ascii=False).encode())
                continue
            events.append(fields[EVENT_FIELD])
        return events, self._ended
