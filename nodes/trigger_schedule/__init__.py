"""`trigger-schedule`: a workflow that starts on a schedule (Dify's schedule
trigger). The editor writes either a cron expression (`mode: cron`) or its
visual settings (`mode: visual`: `frequency` hourly, daily, weekly or monthly
and `visual_config` with `on_minute`, a 12-hour `time`, `weekdays`,
`monthly_days` with `last`), always with a `timezone`; both become one cron
expression (`cron_text`, as Dify's `visual_to_cron`), checked when the
workflow loads. `serve` runs the schedule (`serve/schedules.py`); a run has
no inputs and the node passes on the run's `sys.*` values as `sys.<name>`
(as Dify's node does).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from firstgate.common.dsl import DslModel, dsl_error, shown
from firstgate.nodes.base import NodeContext, NodeResult, Role, system_outputs
from firstgate.nodes.config import BaseNodeData
from firstgate.nodes.spec import NodeSpec
from firstgate.nodes.start import InputError
from firstgate.nodes.trigger_schedule.cron import Cron, CronError, time_24h
from pydantic import Field, model_validator

# Test-only: a sixth, leading field of seconds (so a test can watch ticks a few
# seconds apart through the code a minute schedule runs). Never set in production.
SECONDS_VARIABLE = "FIRSTGATE_SCHEDULE_SECONDS"
WEEKDAY_NUMBERS = {"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}


def seconds_field() -> bool:
    return os.environ.get(SECONDS_VARIABLE, "") == "1"


class VisualConfig(DslModel):
    on_minute: int | None = Field(default=0, ge=0, le=59)
    time: str | None = "12:00 AM"
    weekdays: list[Literal["sun", "mon", "tue", "wed", "thu", "fri", "sat"]] | None = None
    monthly_days: list[int | Literal["last"]] | None = None


class Data(BaseNodeData):
    mode: Literal["visual", "cron"] = "visual"
    frequency: Literal["hourly", "daily", "weekly", "monthly"] | None = None
    cron_expression: str | None = None
    visual_config: VisualConfig | None = None
    timezone: str = "UTC"
    # The editor's switch: a disabled schedule loads and never fires.
    enabled: bool = True

    @model_validator(mode="after")
    def _schedule_parses(self) -> Data:
        self.zone()
        self.schedule()
        return self

    def zone(self) -> ZoneInfo:
        try:
            return ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError, OSError):
            raise dsl_error(
                "dsl.schedule.timezone",
                "unknown time zone {timezone}",
                timezone=shown(self.timezone),
            ) from None

    def cron_text(self) -> str:
        """The schedule as one cron expression (visual settings as Dify converts them)."""
        if self.mode == "cron":
            return (self.cron_expression or "").strip()
        config = self.visual_config or VisualConfig()
        if self.frequency is None:
            raise _needs("visual", "frequency")
        lead = "0 " if seconds_field() else ""
        if self.frequency == "hourly":
            if config.on_minute is None:
                raise _needs(self.frequency, "on_minute")
            return f"{lead}{config.on_minute} * * * *"
        if not config.time:
            raise _needs(self.frequency, "time")
        try:
            hour, minute = time_24h(config.time)
        except CronError:
            raise dsl_error(
                "dsl.schedule.time",
                "the time {time} is not a 12-hour time such as 2:30 PM",
                time=shown(config.time),
            ) from None
        if self.frequency == "daily":
            return f"{lead}{minute} {hour} * * *"
        if self.frequency == "weekly":
            if not config.weekdays:
                raise _needs(self.frequency, "weekdays")
            days = sorted({WEEKDAY_NUMBERS[d] for d in config.weekdays})
            return f"{lead}{minute} {hour} * * {','.join(map(str, days))}"
        if not config.monthly_days:
            raise _needs(self.frequency, "monthly_days")
        numbers = sorted({d for d in config.monthly_days if d != "last"})
        if any(not isinstance(d, int) or not 1 <= d <= 31 for d in numbers):
            raise _needs(self.frequency, "monthly_days")
        parts = [str(d) for d in numbers] + (["L"] if "last" in config.monthly_days else [])
        return f"{lead}{minute} {hour} {','.join(parts)} * *"

    def schedule(self) -> Cron:
        text = self.cron_text()
        try:
            return Cron.parse(text, seconds=seconds_field())
        except CronError:
            raise dsl_error(
                "dsl.schedule.cron",
                "the cron expression {cron} does not parse: five fields (minute, hour, "
                "day of month, month, day of week) or @hourly, @daily, @weekly, @monthly, @yearly",
                cron=shown(text),
            ) from None


def _needs(frequency: str, field: str) -> Exception:
    return dsl_error(
        "dsl.schedule.needs",
        "a {frequency} schedule needs visual_config.{field}",
        frequency=frequency,
        field=field,
    )


def accepts(
    data: Data, inputs: Mapping[str, Any], upload_config: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A scheduled run has no inputs (Dify's schedule runs pass none)."""
    if inputs:
        raise InputError("dsl.input.unknown", name=sorted(inputs)[0], declared="(none)")
    return {}


def run(data: Data, ctx: NodeContext) -> NodeResult:
    # Dify's node passes on its inputs and the run's `sys.*` values, in both its
    # inputs and its outputs.
    inputs = {**ctx.inputs, **system_outputs(ctx)}
    return NodeResult(outputs=dict(inputs), inputs=inputs)


SPEC = NodeSpec(
    type="trigger-schedule",
    role=Role.ROOT,
    data_model=Data,
    run=run,
    supports_retry=False,
    inline=True,
    accepts=accepts,
    trigger=True,
)
