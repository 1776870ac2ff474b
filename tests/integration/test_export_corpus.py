"""The export corpus (tests/corpus/): every file loads, or is refused with one
problem per node of a type firstgate does not run yet, naming type and node."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import yaml
from firstgate.common.problems import DslError
from firstgate.runtime import RunOptions, RunResources, load_workflow
from firstgate.runtime.settings import RuntimeSettings
from firstgate.runtime.settings.providers import ProviderRoute
from firstgate.store import open_store

from tests.fakes import llm_server as fake
from tests.integration.test_cli import firstgate
from tests.run_events import final

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
EXPECTED: dict[str, object] = yaml.safe_load((CORPUS / "expected.yml").read_text())
FILES = sorted(p.name for p in CORPUS.glob("*.yml") if p.name != "expected.yml")


def test_every_corpus_file_has_an_expectation() -> None:
    assert FILES and set(FILES) == set(EXPECTED)


def outcome(name: str) -> dict[str, list[str]] | str:
    try:
        load_workflow(CORPUS / name)
    except DslError as exc:
        refused: dict[str, list[str]] = {}
        for problem in exc.problems:
            assert problem.message_key == "dsl.node.unsupportedType", str(problem)
            assert problem.node is not None
            refused.setdefault(problem.params["type"], []).append(problem.node.id)
            # The message names the type and the node.
            text = str(problem)
            assert problem.params["type"] in text and problem.node.id in text
        return refused
    return "valid"


@pytest.mark.parametrize("name", FILES)
def test_a_corpus_file_loads_or_is_refused_by_node_type(name: str) -> None:
    assert outcome(name) == EXPECTED[name]


def test_corpus_counts(capsys: pytest.CaptureFixture[str]) -> None:
    results = {name: outcome(name) for name in FILES}
    valid = [n for n, r in results.items() if r == "valid"]
    refused = {n: r for n, r in results.items() if r != "valid"}
    types: Counter[str] = Counter()
    for found in refused.values():
        assert isinstance(found, dict)
        for kind, nodes in found.items():
            types[kind] += len(nodes)
    with capsys.disabled():
        print(
            f"\nexport corpus: {len(results)} files, {len(valid)} load, {len(refused)} refused "
            f"by node type ({', '.join(f'{k} x{v}' for k, v in sorted(types.items()))})"
        )
    assert len(valid) + len(refused) == len(FILES) and valid and refused
    # Webhook and schedule triggers load; a plugin's trigger is refused by name.
    assert {"trigger_webhook_workflow.yml", "trigger_schedule_workflow.yml"} <= set(valid)
    assert types["trigger-plugin"] == 1
    # The human-input export loads (it was refused by name before the node ran).
    assert "human_input_workflow.yml" in valid


def test_validate_on_the_command_line(tmp_path: Path) -> None:
    loads = firstgate("validate", str(CORPUS / "editor_defaults_chat.yml"))
    assert loads.returncode == 0, loads.stderr
    assert firstgate("validate", str(CORPUS / "human_input_workflow.yml")).returncode == 0
    export = yaml.safe_load((CORPUS / "human_input_workflow.yml").read_text())
    review = export["workflow"]["graph"]["nodes"][2]
    review["data"]["type"] = "trigger-plugin"  # still refused by name
    path = tmp_path / "plugin_trigger.yml"
    path.write_text(yaml.safe_dump(export, allow_unicode=True))
    refused = firstgate("validate", str(path))
    assert refused.returncode == 2
    assert "has 1 problem(s)" in refused.stderr
    assert 'node type "trigger-plugin" is not supported yet' in refused.stderr
    assert "Traceback" not in refused.stderr


def _settings(server: fake.FakeLLMServer, default: bool = False) -> RuntimeSettings:
    route = ProviderRoute(kind="openai-compatible", base_url=server.base_url, probe="off")
    return RuntimeSettings(providers={"any": route}, default="any" if default else None)


def test_an_unconfigured_model_runs_on_the_default_route() -> None:
    workflow = load_workflow(CORPUS / "editor_defaults_chat.yml")
    with fake.FakeLLMServer(fake.tokens(["hi ", "there"])) as server:
        events = list(
            workflow.run({}, RunOptions(query="hello"), settings=_settings(server, default=True))
        )
        body = server.requests[0].json()
    assert final(events).outputs == {"answer": "hi there"}
    # The empty system message is dropped; memory adds the query (and the empty files line).
    assert body["messages"] == [{"role": "user", "content": "hello\n\n"}]


def test_older_export_runs() -> None:
    workflow = load_workflow(CORPUS / "older_workflow_no_kind.yml")
    urgent = list(workflow.run({"text": "urgent: the roof"}))
    calm = list(workflow.run({"text": "all fine"}))
    assert final(urgent).outputs == {"result": "URGENT: urgent: the roof"}
    assert final(calm).outputs == {"result": "all fine"}


def test_variables_export_keeps_its_conversation(tmp_path: Path) -> None:
    store = open_store(tmp_path / "state.db")
    workflow = load_workflow(CORPUS / "variables_chat.yml")
    env = {"FIRSTGATE_ENV_service_key": "sk-corpus-1234"}
    with RunResources.open(store=store) as resources:
        options = RunOptions(query="tea", user_id="ann", environ=env)
        first = list(workflow.run({}, options, resources))
        conversation = first[0].run.conversation_id
        options = RunOptions(query="cake", conversation_id=conversation, user_id="ann", environ=env)
        second = list(workflow.run({}, options, resources))
    assert final(first).outputs == {"answer": "Welcome back, ann (visit 2, limit 5): - tea"}
    assert final(second).outputs == {
        "answer": "Welcome back, ann (visit 6, limit 5): - tea\n- cake"
    }
    stored = {k: v.value for k, v in store.variables(conversation).items()}
    assert stored == {
        "visits": 6,
        "topics": ["tea", "cake"],
        "scores": [3, 4, 3, 4],
        "subscribed": True,
        "prefs": {"lang": "de"},
        "notes": [],
        "name": "ann",
    }
