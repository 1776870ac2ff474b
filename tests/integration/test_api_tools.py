"""Custom API tools (`provider_type: api`) from an OpenAPI document named in
the runtime settings, against a real loopback server: where each argument
goes, the key, casts, errors, and the refusal when the settings do not
define the provider."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from firstgate.common.problems import DslError
from firstgate.runtime import load_settings, load_workflow
from firstgate.runtime.execution import events as ev

from tests.connect_support import node_end, one_node_flow, settings
from tests.fakes.http_target import HttpTarget

PROVIDER = "7c2d0a41-weather"


def openapi(server: str) -> dict[str, Any]:
    return {
        "openapi": "3.0.1",
        "info": {"title": "Weather", "version": "1"},
        "servers": [{"url": server}],
        "components": {
            "schemas": {
                "Ticket": {
                    "type": "object",
                    "required": ["subject"],
                    "properties": {
                        "subject": {"type": "string"},
                        "priority": {"type": "integer", "default": 3},
                    },
                }
            }
        },
        "paths": {
            "/echo/{city}": {
                "get": {
                    "operationId": "getForecast",
                    "parameters": [
                        {"name": "city", "in": "path", "required": True,
                         "schema": {"type": "string"}},
                        {"name": "days", "in": "query", "schema": {"type": "integer"}},
                        {"name": "X-Units", "in": "header", "schema": {"type": "string"}},
                    ],
                }
            },
            "/echo": {
                "post": {
                    "operationId": "createTicket",
                    "requestBody": {
                        "content": {
                            "application/json": {"schema": {"$ref": "#/components/schemas/Ticket"}}
                        }
                    },
                }
            },
            "/status/503": {"get": {"operationId": "broken"}},
            "/redirect": {
                "get": {
                    "parameters": [{"name": "to", "in": "query", "schema": {"type": "string"}}]
                }
            },
        },
    }  # fmt: skip


@pytest.fixture
def target() -> Iterator[HttpTarget]:
    with HttpTarget() as server:
        yield server


@pytest.fixture
def api_settings(target: HttpTarget, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("FG_WEATHER_KEY", "wx-key-90817")
    document = tmp_path / "weather.yaml"
    document.write_text(yaml.safe_dump(openapi(target.url)))
    auth = {"type": "header", "name": "X-Api-Key", "key_env": "FG_WEATHER_KEY"}
    return settings(tools={"api_providers": {PROVIDER: {"openapi": str(document), "auth": auth}}})


def api_flow(tool: str, params: dict[str, Any]) -> dict[str, Any]:
    data = {
        "provider_id": PROVIDER,
        "provider_type": "api",
        "provider_name": "Weather API",
        "tool_name": tool,
        "tool_parameters": {k: {"type": "constant", "value": v} for k, v in params.items()},
    }
    return one_node_flow("tool", data, {"text": ["n", "text"], "json": ["n", "json"]})


def run(document: dict[str, Any], routes: Any) -> list[ev.Event]:
    return list(load_workflow(document, settings=routes).run({}, settings=routes))


def test_arguments_go_where_the_operation_declares_them(
    target: HttpTarget, api_settings: Any
) -> None:
    params = {"city": "São Paulo/Centro?x", "days": "3", "X-Units": "metric"}
    events = run(api_flow("getForecast", params), api_settings)
    out = events[-1].outputs
    echoed = out["json"][0]
    # a path parameter stays one path segment, whatever it contains
    assert echoed["path"] == "/echo/S%C3%A3o%20Paulo%2FCentro%3Fx"
    assert echoed["query"] == {"days": ["3"]}
    assert echoed["headers"]["x-units"] == "metric"
    assert echoed["headers"]["x-api-key"] == "wx-key-90817"
    assert json.loads(out["text"]) == echoed  # the raw text too, as Dify gives it
    # the key went to the server (which echoed it back); the node's own record
    # of the call (its parameters, process data) never holds it
    assert "wx-key-90817" not in json.dumps(node_end(events).process_data, default=str)


def test_a_json_body_from_the_request_schema(target: HttpTarget, api_settings: Any) -> None:
    events = run(api_flow("createTicket", {"subject": "leak", "priority": "1"}), api_settings)
    sent = target.requests[-1]
    assert sent["method"] == "POST" and sent["headers"]["content-type"] == "application/json"
    assert json.loads(sent["body"]) == {"subject": "leak", "priority": 1}
    defaulted = run(api_flow("createTicket", {"subject": "x"}), api_settings)
    assert json.loads(target.requests[-1]["body"]) == {"subject": "x", "priority": 3}
    assert isinstance(defaulted[-1], ev.WorkflowSucceeded)
    missing = run(api_flow("createTicket", {}), api_settings)
    assert "the tool parameter subject is required" in missing[-1].error_message
    assert isinstance(events[-1], ev.WorkflowSucceeded)


def test_a_failing_status_and_a_redirect_elsewhere_are_errors(
    target: HttpTarget, api_settings: Any
) -> None:
    events = run(api_flow("broken", {}), api_settings)
    assert "the API tool broken failed with status code 503" in events[-1].error_message
    with HttpTarget() as other:
        away = api_flow("get_redirect", {"to": f"{other.url}/json"})
        events = run(away, api_settings)
    # the provider's client is opened for its own server only
    assert node_end(events).error_type == "AddressRefusedError"


def test_without_a_definition_the_node_is_refused_naming_where_to_define_it(
    api_settings: Any,
) -> None:
    with pytest.raises(DslError) as caught:
        load_workflow(api_flow("getForecast", {}))
    message = caught.value.problems[0].render()
    assert "Weather API is a Dify api tool" in message
    assert f"tools.api_providers.{PROVIDER}" in message
    with pytest.raises(DslError, match="has no operation deleteCity"):
        load_workflow(api_flow("deleteCity", {}), settings=api_settings)


def test_a_broken_openapi_document_is_a_settings_problem(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"openapi": "3.0.0", "paths": {}}))
    settings_file = tmp_path / "settings.yaml"
    settings_file.write_text(
        yaml.safe_dump({"tools": {"api_providers": {"p": {"openapi": str(bad)}}}})
    )
    with pytest.raises(DslError, match="servers\\[0\\].url is not an http"):
        load_settings(settings_file)
    settings_file.write_text(
        yaml.safe_dump({"tools": {"api_providers": {"p": {"openapi": "nope.yml"}}}})
    )
    with pytest.raises(DslError, match="cannot use the OpenAPI document nope.yml"):
        load_settings(settings_file)
