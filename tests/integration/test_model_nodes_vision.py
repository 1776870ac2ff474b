"""Vision on the classifier and the extractor, as on the LLM node: the image
files the vision selector names (`sys.files` by default) go with the last
user message as `image_url` parts, a local file as a data URI; the node's
process data shows the prompt without the image's bytes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from firstgate.runtime import RunOptions, load_workflow
from firstgate.runtime.execution import events as ev
from firstgate.runtime.settings import load_settings

from tests import model_flows as mf
from tests.fakes import llm_server as fake
from tests.fakes import model_answers as ma

NODES = pytest.mark.parametrize(
    "node",
    [mf.CLASSIFIER, mf.EXTRACTOR, mf.EXTRACTOR_FUNCTION_CALL],
    ids=lambda n: n.type,
)
IMAGES = {"enabled": True, "number_limits": 2, "transfer_methods": ["local_file", "remote_url"]}


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FIRSTGATE_FIRST_TOKEN_TIMEOUT_S", raising=False)


def run(
    tmp_path: Path, node: mf.ModelNode, files: list[str], vision: dict[str, Any]
) -> tuple[list[ev.Event], dict[str, Any]]:
    doc = mf.workflow(
        [
            {"id": "n", "data": {**node.data(), "vision": vision}},
            mf.end("out", v=["n", node.output]),
        ],
        [("start", "n", "source"), ("n", "out", node.success_handle)],
    )
    doc["workflow"]["features"] = {"file_upload": {"enabled": False, "image": IMAGES}}
    flow_path, settings_path = tmp_path / "flow.yml", tmp_path / "settings.yml"
    flow_path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    with fake.FakeLLMServer(ma.in_turn(node.answer())) as srv:
        settings_path.write_text(yaml.safe_dump(mf.routes(srv)), encoding="utf-8")
        workflow = load_workflow(flow_path)
        events = list(
            workflow.run(
                {"q": "what is this?"},
                RunOptions(files=files),
                settings=load_settings(settings_path),
            )
        )
        body = json.loads(srv.requests[0].body)
    return events, body


@NODES
def test_vision_sends_the_images_with_the_last_user_message(
    node: mf.ModelNode, tmp_path: Path
) -> None:
    picture = tmp_path / "cat.png"
    picture.write_bytes(b"\x89PNG\r\n\x1a\nfake")
    vision = {"enabled": True, "configs": {"detail": "low", "variable_selector": []}}
    events, body = run(tmp_path, node, [str(picture), "https://example.com/dog.jpg"], vision)
    done = mf.final(events)
    assert isinstance(done, ev.WorkflowSucceeded), done
    assert done.outputs == {"v": node.expected}
    last = body["messages"][-1]
    assert last["role"] == "user"
    text, local, remote = last["content"]
    assert text["type"] == "text" and "what is this?" in text["text"]
    assert local["image_url"] == {"url": "data:image/png;base64,iVBORw0KGgpmYWtl", "detail": "low"}
    assert remote["image_url"]["url"] == "https://example.com/dog.jpg"
    (succeeded,) = [e for e in mf.of(events, ev.NodeSucceeded) if e.node_id == "n"]
    shown = succeeded.process_data["prompts"][-1]["content"][1]["image_url"]["url"]
    assert shown.startswith("data:image/png;base64,<") and "iVBOR" not in shown


@NODES
def test_without_vision_the_files_stay_out_of_the_prompt(
    node: mf.ModelNode, tmp_path: Path
) -> None:
    _, body = run(tmp_path, node, ["https://example.com/dog.jpg"], {"enabled": False})
    assert isinstance(body["messages"][-1]["content"], str)
