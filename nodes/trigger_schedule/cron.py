"""Cron expressions as Dify's schedule trigger reads them (croniter's dialect,
five fields): minute, hour, day of month, month, day of week; `*`, `?`,
numbers, ranges, steps, lists, month and day names, Sunday as 0 or 7, `L`
(the month's last day) in the day of month, and the `@hourly`, `@daily`
(`@midnight`), `@weekly`, `@monthly`, `@yearly` (`@annually`) shorthands.
When both day fields are restricted a day matching either runs (cron's rule).

`seconds=True` reads a sixth field in front, the second: only for tests
(`FIRSTGATE_SCHEDULE_SECONDS`, see `serve/schedules.py`), so a schedule
can tick every few seconds through exactly the code a minute schedule runs.

`Cron.next_after(moment, zone)` is the first matching wall-clock time in
`zone` strictly after `moment`: a time the clocks skip (spring forward) is
not run that day, a time they repeat (fall back) runs once, at its first
occurrence. Computed day by day over the fields' sets, never minute by
minute; a schedule that never matches (`0 0 30 2 *`) is refused at parse.
"""

from __future__ import annotations

import calendar
import datetime as dt
from dataclasses import dataclass
from zoneinfo import ZoneInfo

MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_abbr) if name}
DAYS = {"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}
SHORTHANDS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
# How far ahead a match is looked for: past every leap-day schedule (`0 0 29 2 *`).
_SEARCH_DAYS = 366 * 8 + 2
MAX_EXPRESSION_CHARS = 200


class CronError(ValueError):
    """The expression does not parse, or never matches."""


@dataclass(frozen=True, slots=True)
class _Field:
    low: int
    high: int
    names: dict[str, int] | None = None


_SECOND = _Field(0, 59)
_MINUTE = _Field(0, 59)
_HOUR = _Field(0, 23)
_DOM = _Field(1, 31)
_MONTH = _Field(1, 12, MONTHS)
_DOW = _Field(0, 7, DAYS)


def _value(text: str, field: _Field) -> int:
    lowered = text.lower()
    if field.names and lowered in field.names:
        return field.names[lowered]
    if not text.isdigit():
        raise CronError(text)
    number = int(text)
    if not field.low <= number <= field.high:
        raise CronError(text)
    return number


def _parse_field(text: str, field: _Field, *, last: bool = False) -> tuple[frozenset[int], bool]:
    """The field's values, and whether it was restricted (anything but `*`/`?`);
    with `last`, `L` is the month's last day (kept as 32)."""
    if not text:
        raise CronError(text)
    values: set[int] = set()
    for part in text.split(","):
        base, slash, step_text = part.partition("/")
        step = 1
        if slash:
            if not step_text.isdigit() or int(step_text) == 0:
                raise CronError(part)
            step = int(step_text)
        if base in ("*", "?"):
            low, high = field.low, field.high
        elif last and base.upper() == "L" and not slash:
            values.add(32)
            continue
        elif "-" in base:
            start, _, end = base.partition("-")
            low, high = _value(start, field), _value(end, field)
            if low > high:
                raise CronError(part)
        else:
            low = _value(base, field)
            high = field.high if slash else low
        values.update(range(low, high + 1, step))
    restricted = text not in ("*", "?")
    return frozenset(values), restricted


@dataclass(frozen=True, slots=True)
class Cron:
    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]  # 32: the month's last day
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    days_restricted: bool
    weekdays_restricted: bool

    @classmethod
    def parse(cls, expression: str, *, seconds: bool = False) -> Cron:
        text = expression.strip()
        if len(text) > MAX_EXPRESSION_CHARS:
            raise CronError(text[:MAX_EXPRESSION_CHARS])
        if text.startswith("@"):
            if text.lower() not in SHORTHANDS:
                raise CronError(text)
            text = ("0 " if seconds else "") + SHORTHANDS[text.lower()]
        parts = text.split()
        if len(parts) != (6 if seconds else 5):
            raise CronError(text)
        second_text = parts.pop(0) if seconds else "0"
        minute, hour, dom, month, dow = parts
        day_values, days_restricted = _parse_field(dom, _DOM, last=True)
        week_values, weekdays_restricted = _parse_field(dow, _DOW)
        cron = cls(
            seconds=_parse_field(second_text, _SECOND)[0],
            minutes=_parse_field(minute, _MINUTE)[0],
            hours=_parse_field(hour, _HOUR)[0],
            days=day_values,
            months=_parse_field(month, _MONTH)[0],
            weekdays=frozenset(0 if d == 7 else d for d in week_values),
            days_restricted=days_restricted,
            weekdays_restricted=weekdays_restricted,
        )
        cron._check_reachable()
        return cron

    def _check_reachable(self) -> None:
        """Some month has some day the fields allow (`0 0 31 2 *` never runs)."""
        if not self.days_restricted or self.weekdays_restricted or 32 in self.days:
            return  # every month has a last day; a weekday rule matches any month
        if not any(d <= _month_days(2024, m) for m in self.months for d in self.days):
            raise CronError("never")

    def day_matches(self, day: dt.date) -> bool:
        if day.month not in self.months:
            return False
        last = _month_days(day.year, day.month)
        in_month = day.day in self.days or (32 in self.days and day.day == last)
        weekday = (day.weekday() + 1) % 7  # Python's Monday 0 -> cron's Sunday 0
        in_week = weekday in self.weekdays
        if self.days_restricted and self.weekdays_restricted:
            return in_month or in_week
        if self.weekdays_restricted:
            return in_week
        return in_month

    def next_after(self, moment: dt.datetime, zone: ZoneInfo) -> dt.datetime:
        """The first matching time strictly after `moment` (aware), in `zone`."""
        local = moment.astimezone(zone)
        after = local.replace(tzinfo=None, microsecond=0)
        day = after.date()
        for _ in range(_SEARCH_DAYS):
            if self.day_matches(day):
                found = self._first_on(day, after, zone, moment)
                if found is not None:
                    return found
            day += dt.timedelta(days=1)
        raise CronError("never")

    def _first_on(
        self, day: dt.date, after: dt.datetime, zone: ZoneInfo, moment: dt.datetime
    ) -> dt.datetime | None:
        same_day = day == after.date()
        for hour in sorted(self.hours):
            if same_day and hour < after.hour:
                continue
            for minute in sorted(self.minutes):
                if same_day and (hour, minute) < (after.hour, after.minute):
                    continue
                for second in sorted(self.seconds):
                    wall = dt.datetime.combine(day, dt.time(hour, minute, second))
                    if wall <= after and same_day:
                        continue
                    candidate = wall.replace(tzinfo=zone)
                    if not _exists(candidate):
                        continue  # the clocks skip it today
                    if candidate.astimezone(dt.UTC) > moment.astimezone(dt.UTC):
                        return candidate
        return None


def _month_days(year: int, month: int) -> int:
    return calendar.monthrange(year, month)[1]


def _exists(moment: dt.datetime) -> bool:
    """Whether a wall-clock time happens in its zone (a skipped hour does not)."""
    back = moment.astimezone(dt.UTC).astimezone(moment.tzinfo)
    return back.replace(tzinfo=None) == moment.replace(tzinfo=None)


def time_24h(text: str) -> tuple[int, int]:
    """The editor's 12-hour time (`2:30 PM`) as (hour, minute)."""
    parts = text.strip().split()
    if len(parts) != 2 or parts[1].upper() not in ("AM", "PM"):
        raise CronError(text)
    clock, period = parts[0], parts[1].upper()
    hour_text, colon, minute_text = clock.partition(":")
    if not colon or not hour_text.isdigit() or not minute_text.isdigit():
        raise CronError(text)
    hour, minute = int(hour_text), int(minute_text)
    if not 1 <= hour <= 12 or not 0 <= minute <= 59:
        raise CronError(text)
    if period == "PM" and hour != 12:
        hour += 12
    elif period == "AM" and hour == 12:
        hour = 0
    return hour, minute
