"""Built-in tools that run in this process, with no network: Dify's `time`
provider (current_time, localtime_to_timestamp, timestamp_to_localtime,
timezone_conversion, weekday), with its parameters and its answers.

A tool node names a provider here either by its short id (`time`, what
Dify's own built-in exports say) or by the id of the same provider published
as a marketplace plugin (`langgenius/time/time`): both run locally.
"""

from __future__ import annotations

import calendar
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from firstgate.connectors.tool_messages import ToolError, ToolMessage, text
from firstgate.connectors.tool_parameters import ParamType, ToolParameter

_TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


@dataclass(frozen=True, slots=True)
class BuiltinTool:
    name: str
    parameters: tuple[ToolParameter, ...]
    run: Callable[[Mapping[str, Any]], Iterator[ToolMessage]]


def _invalid(tool: str, detail: str) -> ToolError:
    return ToolError("errors.tool.invalidInput", tool=tool, detail=detail)


def _zone(name: str, tool: str) -> tzinfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise _invalid(tool, f"Invalid timezone: {name!r}") from None


def _local_zone(name: Any, tool: str) -> tzinfo | None:
    """An empty timezone means the machine's own (as in Dify)."""
    return _zone(str(name), tool) if name else None


def _current_time(params: Mapping[str, Any]) -> Iterator[ToolMessage]:
    zone_name = str(params.get("timezone") or "UTC")
    fmt = str(params.get("format") or "%Y-%m-%d %H:%M:%S %Z")
    if zone_name == "UTC":
        yield text(datetime.now(UTC).strftime(fmt))
        return
    try:
        zone = ZoneInfo(zone_name)
    except (ZoneInfoNotFoundError, ValueError):
        # Dify answers this one in text rather than failing the node.
        yield text(f"Invalid timezone: {zone_name}")
        return
    yield text(datetime.now(zone).strftime(fmt))


def _localtime_to_timestamp(params: Mapping[str, Any]) -> Iterator[ToolMessage]:
    tool = "localtime_to_timestamp"
    local = str(params.get("localtime", ""))
    try:
        parsed = datetime.strptime(local, _TIME_FORMAT)
    except ValueError as exc:
        raise _invalid(tool, str(exc)) from None
    zone = _local_zone(params.get("timezone", "Asia/Shanghai"), tool)
    when = parsed.astimezone() if zone is None else parsed.replace(tzinfo=zone)
    yield text(str(int(when.timestamp())))


def _timestamp_to_localtime(params: Mapping[str, Any]) -> Iterator[ToolMessage]:
    tool = "timestamp_to_localtime"
    zone = _local_zone(params.get("timezone", "Asia/Shanghai"), tool)
    try:
        when = datetime.fromtimestamp(params.get("timestamp", 0), zone)
    except (OverflowError, OSError, ValueError, TypeError) as exc:
        raise _invalid(tool, str(exc)) from None
    yield text(when.strftime(_TIME_FORMAT))


def _timezone_conversion(params: Mapping[str, Any]) -> Iterator[ToolMessage]:
    tool = "timezone_conversion"
    source = _zone(str(params.get("current_timezone") or "Asia/Shanghai"), tool)
    target = _zone(str(params.get("target_timezone") or "Asia/Tokyo"), tool)
    try:
        parsed = datetime.strptime(str(params.get("current_time", "")), _TIME_FORMAT)
    except ValueError as exc:
        raise _invalid(tool, str(exc)) from None
    yield text(parsed.replace(tzinfo=source).astimezone(target).strftime(_TIME_FORMAT))


def _weekday(params: Mapping[str, Any]) -> Iterator[ToolMessage]:
    year, month, day = params.get("year"), params.get("month"), params.get("day")
    try:
        date = datetime(int(year), int(month), int(day))  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        yield text(f"Invalid date: Year {year}, Month {month}, Day {day}.")
        return
    name = calendar.day_name[date.weekday()]
    yield text(f"{calendar.month_name[date.month]} {date.day}, {date.year} is {name}.")


def _p(name: str, kind: ParamType = ParamType.STRING, **rest: Any) -> ToolParameter:
    return ToolParameter(name, kind, **rest)


_TIME: dict[str, BuiltinTool] = {
    tool.name: tool
    for tool in (
        BuiltinTool(
            "current_time",
            (
                _p("format", form="form", default=_TIME_FORMAT),
                _p("timezone", ParamType.SELECT, form="form", default="UTC"),
            ),
            _current_time,
        ),
        BuiltinTool(
            "localtime_to_timestamp",
            (_p("localtime", required=True), _p("timezone")),
            _localtime_to_timestamp,
        ),
        BuiltinTool(
            "timestamp_to_localtime",
            (_p("timestamp", ParamType.NUMBER, required=True), _p("timezone")),
            _timestamp_to_localtime,
        ),
        BuiltinTool(
            "timezone_conversion",
            (
                _p("current_time", required=True),
                _p("current_timezone", required=True, default="Asia/Shanghai"),
                _p("target_timezone", required=True, default="Asia/Tokyo"),
            ),
            _timezone_conversion,
        ),
        BuiltinTool(
            "weekday",
            tuple(_p(n, ParamType.NUMBER, required=True) for n in ("year", "month", "day")),
            _weekday,
        ),
    )
}

PROVIDERS: dict[str, dict[str, BuiltinTool]] = {"time": _TIME}
# The same providers under their marketplace plugin ids.
_PLUGIN_IDS = {"langgenius/time/time": "time"}


def provider(provider_id: str) -> dict[str, BuiltinTool] | None:
    """The local tools of `provider_id`, or None when it is not built in."""
    return PROVIDERS.get(_PLUGIN_IDS.get(provider_id, provider_id))
