"""Webhook and schedule triggers without a server: the cron reader (Dify's
dialect, time zones, daylight saving), the schedule node's visual settings,
the webhook node's checks of a request (Dify's `WebhookService` rules) and
outputs, and how a workflow rooted at triggers loads."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from firstgate.nodes import trigger_schedule, trigger_webhook
from firstgate.nodes.start import InputError
from firstgate.nodes.trigger_schedule.cron import Cron, CronError
from firstgate.runtime import DslError, RunOptions, load_workflow

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
UTC = ZoneInfo("UTC")


def ticks(expression: str, start: dt.datetime, zone: str = "UTC", count: int = 3) -> list[str]:
    cron, place = Cron.parse(expression), ZoneInfo(zone)
    found, moment = [], start
    for _ in range(count):
        moment = cron.next_after(moment, place)
        found.append(moment.isoformat())
    return found


def at(*parts: int) -> dt.datetime:
    return dt.datetime(*parts, tzinfo=dt.UTC)


# ---- cron


def test_a_cron_expression_names_its_times() -> None:
    assert ticks("*/20 9-10 * * MON-FRI", at(2026, 12, 4, 10, 30)) == [
        "2026-12-04T10:40:00+00:00",
        "2026-12-07T09:00:00+00:00",  # Friday, then Monday
        "2026-12-07T09:20:00+00:00",
    ]
    assert ticks("@monthly", at(2026, 1, 15), count=2) == [
        "2026-02-01T00:00:00+00:00",
        "2026-03-01T00:00:00+00:00",
    ]
    # Sunday as 7, month names, a list with a range and a step.
    assert ticks("0 12 * JAN,jul 7", at(2026, 6, 30), count=1) == ["2026-07-05T12:00:00+00:00"]
    assert ticks("5 0-23/12 * * *", at(2026, 1, 1), count=2) == [
        "2026-01-01T00:05:00+00:00",
        "2026-01-01T12:05:00+00:00",
    ]


def test_the_last_day_of_the_month_and_either_day_rule() -> None:
    assert ticks("0 9 L * *", at(2028, 1, 31, 10)) == [
        "2028-02-29T09:00:00+00:00",  # a leap year
        "2028-03-31T09:00:00+00:00",
        "2028-04-30T09:00:00+00:00",
    ]
    # Both day fields restricted: either matches (cron's rule, croniter's default).
    assert ticks("0 0 13 * 5", at(2026, 1, 1), count=3) == [
        "2026-01-02T00:00:00+00:00",
        "2026-01-09T00:00:00+00:00",
        "2026-01-13T00:00:00+00:00",
    ]


def test_times_are_wall_clock_times_in_the_zone() -> None:
    # 9:00 in New York is 14:00 UTC in winter and 13:00 in summer.
    assert ticks("0 9 * * *", at(2026, 3, 7, 15), "America/New_York", 2) == [
        "2026-03-08T09:00:00-04:00",
        "2026-03-09T09:00:00-04:00",
    ]
    assert ticks("0 9 * * *", at(2026, 3, 6, 15), "America/New_York", 1) == [
        "2026-03-07T09:00:00-05:00"
    ]


def test_a_time_the_clocks_skip_is_not_run_and_one_they_repeat_runs_once() -> None:
    # Berlin: 2026-03-29 02:00 -> 03:00; 2026-10-25 03:00 -> 02:00.
    assert ticks("30 2 * * *", at(2026, 3, 28, 12), "Europe/Berlin", 2) == [
        "2026-03-30T02:30:00+02:00",
        "2026-03-31T02:30:00+02:00",
    ]
    assert ticks("30 2 * * *", at(2026, 10, 24, 12), "Europe/Berlin", 2) == [
        "2026-10-25T02:30:00+02:00",
        "2026-10-26T02:30:00+01:00",
    ]


@pytest.mark.parametrize(
    "expression",
    ["", "* * * *", "* * * * * *", "60 * * * *", "* 24 * * *", "1-0 * * * *", "*/0 * * * *"]
    + ["@often", "0 0 30 2 *", "0 0 * FOO *", "0 0 32 * *", "x" * 300],
)
def test_an_expression_that_does_not_parse_is_refused(expression: str) -> None:
    with pytest.raises(CronError):
        Cron.parse(expression)


def test_a_seconds_field_only_when_asked() -> None:
    cron = Cron.parse("*/2 * * * * *", seconds=True)
    assert cron.next_after(at(2026, 1, 1, 0, 0, 1), UTC).isoformat() == "2026-01-01T00:00:02+00:00"


# ---- the schedule node


def schedule(**data: Any) -> trigger_schedule.Data:
    return trigger_schedule.Data.model_validate({"type": "trigger-schedule", **data})


def test_the_visual_settings_become_difys_cron_expressions() -> None:
    hourly = schedule(frequency="hourly", visual_config={"on_minute": 15})
    assert hourly.cron_text() == "15 * * * *"
    daily = schedule(frequency="daily", visual_config={"time": "12:05 AM"})
    assert daily.cron_text() == "5 0 * * *"
    weekly = schedule(
        frequency="weekly", visual_config={"time": "2:30 PM", "weekdays": ["thu", "mon"]}
    )
    assert weekly.cron_text() == "30 14 * * 1,4"
    monthly = schedule(
        frequency="monthly", visual_config={"time": "12:00 PM", "monthly_days": [15, "last", 1]}
    )
    assert monthly.cron_text() == "0 12 1,15,L * *"
    assert schedule(mode="cron", cron_expression=" 0 7 * * 1-5 ").cron_text() == "0 7 * * 1-5"


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"mode": "cron", "cron_expression": "every day"}, "dsl.schedule.cron"),
        ({"mode": "cron"}, "dsl.schedule.cron"),
        ({"frequency": "daily", "visual_config": {"time": "25:00 PM"}}, "dsl.schedule.time"),
        ({"frequency": "daily", "visual_config": {"time": "9:00"}}, "dsl.schedule.time"),
        ({"frequency": "weekly", "visual_config": {"weekdays": []}}, "dsl.schedule.needs"),
        ({"frequency": "monthly", "visual_config": {"monthly_days": [0]}}, "dsl.schedule.needs"),
        ({"visual_config": {}}, "dsl.schedule.needs"),
        ({"frequency": "daily", "timezone": "Mars/Olympus"}, "dsl.schedule.timezone"),
    ],
)
def test_a_schedule_that_cannot_run_is_a_located_load_problem(data: dict, key: str) -> None:
    document = workflow(
        [{"id": "tick", "data": {"type": "trigger-schedule", "title": "Tick", **data}}]
    )
    with pytest.raises(DslError) as caught:
        load_workflow(document)
    (problem,) = caught.value.problems
    assert problem.message_key == key and problem.node is not None and problem.node.id == "tick"


def test_a_bad_cron_in_a_file_names_its_line(tmp_path: Path) -> None:
    text = (CORPUS / "trigger_schedule_workflow.yml").read_text()
    path = tmp_path / "bad.yml"
    path.write_text(text.replace("cron_expression: 0 18 L * *", "cron_expression: 0 18 L * * *"))
    with pytest.raises(DslError) as caught:
        load_workflow(path)
    (problem,) = caught.value.problems
    assert problem.message_key == "dsl.schedule.cron"
    assert problem.place is not None and problem.place.line > 1
    assert "0 18 L * * *" in str(problem) and "1764591000002" in str(problem)


# ---- the webhook node


def hook(**data: Any) -> trigger_webhook.Data:
    return trigger_webhook.Data.model_validate({"type": "trigger-webhook", **data})


def request(**raw: Any) -> dict[str, Any]:
    base = {"method": "POST", "headers": {"Content-Type": "application/json"}, "query_params": {}}
    return {"webhook_data": {**base, "body": {}, "files": {}, **raw}}


def refusal(data: trigger_webhook.Data, inputs: dict[str, Any]) -> InputError:
    with pytest.raises(InputError) as caught:
        trigger_webhook.accepts(data, inputs)
    return caught.value


def test_the_method_and_the_content_type_must_be_the_configured_ones() -> None:
    data = hook(method="POST")
    assert refusal(data, request(method="GET")).message_key == "dsl.webhook.method"
    typed = request(headers={"content-type": "text/plain; charset=utf-8"})
    error = refusal(data, typed)
    assert error.message_key == "dsl.webhook.contentType" and "text/plain" in error.render()
    # No content type reads as JSON (Dify); parameters of the type do not count.
    trigger_webhook.accepts(data, request(headers={}))
    trigger_webhook.accepts(
        data, request(headers={"Content-Type": "application/json; charset=utf-8"})
    )


def test_required_fields_and_declared_types() -> None:
    data = hook(
        method="post",
        headers=[{"name": "X-Token", "required": True}],
        params=[
            {"name": "page", "type": "number", "required": True},
            {"name": "dry", "type": "boolean"},
        ],
        body=[{"name": "ids", "type": "array[number]", "required": True}, {"name": "note"}],
    )
    headers = {"Content-Type": "application/json", "x_token": "t"}  # `_` for `-`, any case
    good = trigger_webhook.accepts(
        data,
        request(
            headers=headers,
            query_params={"page": "3", "dry": "yes", "extra": "x"},
            body={"ids": [1, 2.5]},
        ),
    )
    assert good["webhook_data"]["query_params"] == {"page": 3, "dry": True, "extra": "x"}
    assert good["webhook_body"] == {"ids": [1, 2.5]}
    assert (
        refusal(data, request(query_params={"page": "1"}, body={"ids": []})).params["name"]
        == "X-Token"
    )
    missing = refusal(data, request(headers=headers, body={"ids": []}))
    assert missing.message_key == "dsl.webhook.missing" and missing.params["name"] == "page"
    bad = refusal(data, request(headers=headers, query_params={"page": "two"}, body={"ids": []}))
    assert bad.message_key == "dsl.webhook.badValue" and bad.params["name"] == "page"
    wrong = refusal(
        data, request(headers=headers, query_params={"page": "1"}, body={"ids": [1, "2"]})
    )
    assert wrong.message_key == "dsl.webhook.badValue" and wrong.params["name"] == "ids"
    nan = refusal(data, request(headers=headers, query_params={"page": "nan"}, body={"ids": []}))
    assert nan.params["name"] == "page"


def test_form_text_and_a_whole_text_body() -> None:
    form = hook(
        method="put",
        content_type="application/x-www-form-urlencoded",
        body=[{"name": "n", "type": "number"}],
    )
    typed = request(
        method="PUT",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        body={"n": "4.5"},
    )
    assert trigger_webhook.accepts(form, typed)["webhook_body"] == {"n": 4.5}
    text = hook(
        content_type="text/plain", method="POST", body=[{"name": "content", "required": True}]
    )
    empty = request(headers={"Content-Type": "text/plain"}, body={"raw": ""})
    assert refusal(text, empty).message_key == "dsl.webhook.missing"


def test_a_webhook_workflow_runs_from_a_request_and_a_caller_cannot_skip_the_checks() -> None:
    workflow_ = load_workflow(CORPUS / "trigger_webhook_workflow.yml")
    assert workflow_.triggered and workflow_.input_variables == []
    raw = request(
        headers={
            "Content-Type": "application/json",
            "X-Shop-Signature": "sig",
            "user-agent": "shop/1",
        },
        query_params={"attempt": "2"},
        body={"event": "paid", "amount": 12, "tags": ["a", "b"]},
    )
    events = [e.to_dict() for e in workflow_.run(raw)]
    end = events[-1]["data"]
    assert end["status"] == "succeeded", end
    assert end["outputs"]["summary"] == "paid of 12 (a,b), attempt 2, signed sig"
    assert end["outputs"]["raw"]["body"]["event"] == "paid"
    trigger = next(e for e in events if e["event"] == "node_finished")
    assert trigger["data"]["outputs"]["User_Agent"] == "shop/1"
    with pytest.raises(InputError) as caught:
        workflow_.run({"event": "paid"})  # inputs as for a start node
    assert caught.value.message_key == "dsl.webhook.notRequest"


# ---- loading


def workflow(
    nodes: list[dict[str, Any]], mode: str = "workflow", edges: list | None = None
) -> dict:
    return {
        "version": "0.5.0",
        "kind": "app",
        "app": {"name": "t", "mode": mode},
        "workflow": {"graph": {"nodes": nodes, "edges": edges or []}},
    }


WEBHOOK = {"id": "hook", "data": {"type": "trigger-webhook", "title": "Hook", "method": "POST"}}
START = {"id": "start", "data": {"type": "start", "title": "Start"}}


def test_a_start_node_and_a_trigger_do_not_share_a_workflow() -> None:
    with pytest.raises(DslError) as caught:
        load_workflow(workflow([START, WEBHOOK]))
    (problem,) = caught.value.problems
    assert problem.message_key == "dsl.graph.startWithTrigger" and problem.node.id == "hook"


def test_a_trigger_starts_only_a_workflow_app() -> None:
    with pytest.raises(DslError) as caught:
        load_workflow(workflow([WEBHOOK], mode="advanced-chat"))
    assert [p.message_key for p in caught.value.problems] == ["dsl.trigger.notWorkflow"]


def test_a_run_from_one_trigger_runs_only_what_it_reaches() -> None:
    reports = load_workflow(CORPUS / "trigger_schedule_workflow.yml")
    assert [n.id for n in reports.roots] == ["1764591000001", "1764591000002"]
    for root in ("1764591000001", "1764591000002"):
        events = [e.to_dict() for e in reports.run({}, RunOptions(root=root))]
        started = [e["data"]["node_id"] for e in events if e["event"] == "node_started"]
        assert started == [root, "1764591000003", "1764591000004"]
        assert events[-1]["data"]["status"] == "succeeded"
    with pytest.raises(InputError) as caught:
        reports.run({}, RunOptions(root="1764591000003"))
    assert caught.value.message_key == "dsl.input.noRoot"
    with pytest.raises(InputError):
        reports.run({"x": 1}, RunOptions(root="1764591000001"))  # a schedule takes no inputs


def hooks(count: int) -> list[dict[str, Any]]:
    return [
        {"id": f"hook{i}", "data": {"type": "trigger-webhook", "title": f"Hook {i}"}}
        for i in range(1, count + 1)
    ]


def test_a_workflow_holds_at_most_five_webhook_triggers() -> None:
    assert [n.id for n in load_workflow(workflow(hooks(5))).roots] == [
        f"hook{i}" for i in range(1, 6)
    ]
    with pytest.raises(DslError) as caught:
        load_workflow(workflow(hooks(7)))
    (problem,) = caught.value.problems  # one problem, at the first one too many
    assert problem.message_key == "dsl.graph.tooMany" and problem.node.id == "hook6"
    assert problem.params == {"type": "trigger-webhook", "count": 7, "limit": 5}
    assert "7" in problem.render("de-DE") and "5" in problem.render("ja-JP")
    # Schedules have no such limit (Dify counts webhook and plugin triggers).
    many = [
        {"id": f"tick{i}", "data": {"type": "trigger-schedule", "frequency": "hourly"}}
        for i in range(8)
    ]
    assert len(load_workflow(workflow(many)).roots) == 8


def test_the_limit_names_its_line_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "hooks.yml"
    nodes = "".join(
        f"    - id: hook{i}\n      data: {{type: trigger-webhook, title: Hook {i}}}\n"
        for i in range(1, 7)
    )
    path.write_text(
        "app: {mode: workflow, name: t}\nkind: app\nversion: 0.5.0\n"
        f"workflow:\n  graph:\n    edges: []\n    nodes:\n{nodes}"
    )
    with pytest.raises(DslError) as caught:
        load_workflow(path)
    (problem,) = caught.value.problems
    assert problem.place is not None and problem.place.line == 8 + 2 * 5


SYS_NAMES = {"sys.files", "sys.user_id", "sys.app_id", "sys.workflow_id", "sys.workflow_run_id"}


def test_trigger_nodes_pass_on_the_runs_system_variables() -> None:
    hooked = load_workflow(CORPUS / "trigger_webhook_workflow.yml")
    raw = request(
        headers={"Content-Type": "application/json", "X-Shop-Signature": "s"},
        body={"event": "paid", "amount": 1, "tags": []},
    )
    options = RunOptions(user_id="caller-7", run_id="run-hooked")
    events = [e.to_dict() for e in hooked.run(raw, options)]
    node = next(e for e in events if e["event"] == "node_finished")["data"]
    outputs = node["outputs"]
    assert SYS_NAMES <= set(outputs) and not any(
        k.startswith("sys.") and k not in SYS_NAMES for k in outputs
    )
    assert outputs["sys.workflow_run_id"] == "run-hooked"
    assert outputs["sys.user_id"] == "caller-7"
    assert outputs["sys.app_id"] == hooked.app_id
    assert outputs["sys.workflow_id"] == hooked.workflow_id
    assert outputs["sys.files"] == [] and outputs["event"] == "paid"

    reports = load_workflow(CORPUS / "trigger_schedule_workflow.yml")
    root = "1764591000002"
    events = [e.to_dict() for e in reports.run({}, RunOptions(root=root, run_id="run-ticked"))]
    node = next(e for e in events if e["event"] == "node_finished")["data"]
    assert node["node_id"] == root
    # Dify's schedule node shows them as its inputs and its outputs.
    assert set(node["outputs"]) == SYS_NAMES == set(node["inputs"])
    assert node["outputs"]["sys.workflow_run_id"] == "run-ticked"


def test_every_trigger_names_the_system_variables_through_itself() -> None:
    # The older `[node, "sys.x"]` form, through the second trigger too: each
    # trigger starts runs of its own.
    nodes = [
        {"id": "a", "data": {"type": "trigger-schedule", "frequency": "hourly"}},
        {"id": "b", "data": {"type": "trigger-schedule", "frequency": "daily"}},
        {
            "id": "end",
            "data": {
                "type": "end",
                "outputs": [
                    {"variable": "run", "value_selector": ["b", "sys.workflow_run_id"]},
                    {"variable": "user", "value_selector": ["a", "sys.user_id"]},
                ],
            },
        },
    ]
    edges = [
        {"id": "e1", "source": "a", "target": "end"},
        {"id": "e2", "source": "b", "target": "end"},
    ]
    loaded = load_workflow(workflow(nodes, edges=edges))
    events = [e.to_dict() for e in loaded.run({}, RunOptions(root="b", run_id="run-b"))]
    assert events[-1]["data"]["status"] == "succeeded", events[-1]
    assert events[-1]["data"]["outputs"]["run"] == "run-b"
