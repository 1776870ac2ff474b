"""The knowledge-retrieval node against both backends: the local FTS5 index built
by `firstgate index`, and a real-socket External Knowledge API service."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from firstgate.connectors.local_index import LocalIndex
from firstgate.runtime.execution import events as ev

from tests.connect_support import node_end, one_node_flow, run_events, settings
from tests.fakes.knowledge_api import KnowledgeApi

ROOT = Path(__file__).resolve().parents[2]
QUERY_INPUT = [{"variable": "q", "type": "text-input", "label": "q", "required": True}]


def kr_flow(dataset_ids: list[str], **data: Any) -> dict[str, Any]:
    fields = {
        "query_variable_selector": ["start", "q"],
        "dataset_ids": dataset_ids,
        "retrieval_mode": "multiple",
        "multiple_retrieval_config": {"top_k": 3, "score_threshold": None},
        **data,
    }
    return one_node_flow(
        "knowledge-retrieval", fields, {"result": ["n", "result"]}, start_variables=QUERY_INPUT
    )


def firstgate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from firstgate.runtime.cli.command import main; sys.exit(main())",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "LANG": "C"},
    )


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    (folder / "sub").mkdir(parents=True)
    (folder / "sky.md").write_text("# Sky\n\nThe sky is blue because of Rayleigh scattering.\n")
    (folder / "grass.txt").write_text("Grass is green because of chlorophyll.\n")
    (folder / "sub" / "sea.md").write_text("The sea looks blue, reflecting the sky above.\n")
    (folder / "image.png").write_bytes(b"\x89PNG not text")
    return folder


def test_index_cli_builds_and_updates_incrementally(docs: Path, tmp_path: Path) -> None:
    index = tmp_path / "kb.sqlite"
    done = firstgate("index", str(docs), "--dataset", "ds1", "--index", str(index))
    assert done.returncode == 0, done.stderr
    assert "3 added, 0 updated, 0 removed, 0 unchanged" in done.stdout
    (docs / "grass.txt").write_text("Grass is green; chlorophyll absorbs red light.\n")
    (docs / "sub" / "sea.md").unlink()
    (docs / "new.md").write_text("A new note about the blue sky at dusk.\n")
    os.utime(docs / "grass.txt", ns=(1, 2))  # a changed mtime, whatever the clock
    again = firstgate("index", str(docs), "--dataset", "ds1", "--index", str(index))
    assert "1 added, 1 updated, 1 removed, 1 unchanged" in again.stdout, again.stdout
    hits = LocalIndex(index).search("sea", top_k=5)
    assert hits == []  # the removed file is gone from the index


def test_index_cli_takes_the_path_from_settings_and_refuses_without_one(
    docs: Path, tmp_path: Path
) -> None:
    settings_file = tmp_path / "settings.yaml"
    index = tmp_path / "from-settings.sqlite"
    settings_file.write_text(
        yaml.safe_dump({"knowledge": {"datasets": {"ds1": {"kind": "local", "index": str(index)}}}})
    )
    done = firstgate("index", str(docs), "--dataset", "ds1", "--models", str(settings_file))
    assert done.returncode == 0, done.stderr
    assert index.is_file()
    missing = firstgate("index", str(docs), "--dataset", "other", "--models", str(settings_file))
    assert missing.returncode == 2
    assert "--index PATH" in missing.stderr and "Traceback" not in missing.stderr


@pytest.fixture
def local_index(docs: Path, tmp_path: Path) -> Path:
    """The documents of `docs` in a local index."""
    index = tmp_path / "kb.sqlite"
    LocalIndex(index, create=True).update(docs)
    return index


def test_local_dataset_through_the_node(local_index: Path) -> None:
    routes = settings(
        knowledge={
            "datasets": {"ds1": {"kind": "local", "index": str(local_index), "name": "Notes"}}
        }
    )
    events = run_events(kr_flow(["ds1"]), routes, q="why is the sky blue")
    result = events[-1].outputs["result"]
    assert [r["title"] for r in result][:2] == ["sky.md", "sea.md"]
    first = result[0]
    assert first["content"].startswith("# Sky")
    meta = first["metadata"]
    assert meta["_source"] == "knowledge" and meta["retriever_from"] == "workflow"
    assert meta["dataset_id"] == "ds1" and meta["dataset_name"] == "Notes"
    assert meta["document_name"] == "sky.md" and meta["position"] == 1
    assert 0 < meta["score"] < 1
    assert [r["metadata"]["position"] for r in result] == list(range(1, len(result) + 1))
    scores = [r["metadata"]["score"] for r in result]
    assert scores == sorted(scores, reverse=True)


def test_local_metadata_filter_and_threshold(local_index: Path) -> None:
    routes = settings(knowledge={"datasets": {"ds1": {"kind": "local", "index": str(local_index)}}})
    manual = {
        "metadata_filtering_mode": "manual",
        "metadata_filtering_conditions": {
            "logical_operator": "and",
            "conditions": [{"name": "extension", "comparison_operator": "is", "value": ".txt"}],
        },
    }
    events = run_events(kr_flow(["ds1"], **manual), routes, q="blue green")
    assert [r["title"] for r in events[-1].outputs["result"]] == ["grass.txt"]
    strict = {"multiple_retrieval_config": {"top_k": 3, "score_threshold": 0.999}}
    events = run_events(kr_flow(["ds1"], **strict), routes, q="blue")
    assert events[-1].outputs["result"] == []


def test_external_api_request_shape_and_result(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("KB_TEST_KEY", "kb-secret-123")
    documents = [
        {
            "content": "blue sky facts",
            "title": "Sky",
            "metadata": {"lang": "en", "document_id": "d1"},
        },
        {"content": "blue sea facts", "title": "Sea", "metadata": {"lang": "fr"}},
    ]
    with KnowledgeApi(documents) as api:
        routes = settings(
            knowledge={
                "datasets": {
                    "ext": {
                        "kind": "external",
                        "endpoint": api.endpoint,
                        "api_key_env": "KB_TEST_KEY",
                        "knowledge_id": "kb-7",
                        "name": "Outside",
                    }
                }
            }
        )
        manual = {
            "metadata_filtering_mode": "manual",
            "metadata_filtering_conditions": {
                "conditions": [{"name": "lang", "comparison_operator": "is", "value": "en"}]
            },
            "multiple_retrieval_config": {"top_k": 2, "score_threshold": 0.5},
        }
        events = run_events(kr_flow(["ext"], **manual), routes, q="blue sky")
        request = api.requests[-1]
        assert request["path"] == "/api/retrieval"
        assert request["headers"]["Authorization"] == "Bearer kb-secret-123"
        assert request["body"]["knowledge_id"] == "kb-7"
        assert request["body"]["query"] == "blue sky"
        assert request["body"]["retrieval_setting"] == {"top_k": 2, "score_threshold": 0.5}
        assert request["body"]["metadata_condition"]["conditions"][0]["value"] == "en"
        result = events[-1].outputs["result"]
        assert len(result) == 1
        assert result[0]["title"] == "Sky" and result[0]["content"] == "blue sky facts"
        meta = result[0]["metadata"]
        assert meta["data_source_type"] == "external" and meta["document_id"] == "d1"
        assert meta["score"] == 1.0 and meta["doc_metadata"]["lang"] == "en"
        # an error answer is an error, never an empty success; the key is not shown
        api.fail_with(403)
        fail = kr_flow(["ext"], error_strategy="fail-branch")
        fail["workflow"]["graph"]["nodes"][2]["data"]["outputs"].append(
            {"variable": "err", "value_selector": ["n", "error_message"]}
        )
        events = run_events(fail, routes, q="blue")
        end = node_end(events)
        assert isinstance(end, ev.NodeException) and end.error_type == "KnowledgeError"
        assert "HTTP 403" in end.error_message and "Authorization failed" in end.error_message
        assert "kb-secret-123" not in json.dumps([e.to_dict() for e in events], default=str)


def test_multiple_mode_merges_datasets_and_single_mode_picks_the_best(local_index: Path) -> None:
    with KnowledgeApi([{"content": "zebra stripes", "title": "Zebra", "metadata": {}}]) as api:
        routes = settings(
            knowledge={
                "datasets": {
                    "local": {"kind": "local", "index": str(local_index)},
                    "ext": {"kind": "external", "endpoint": api.endpoint, "knowledge_id": "k"},
                }
            }
        )
        events = run_events(kr_flow(["local", "ext"]), routes, q="zebra sky")
        titles = [r["title"] for r in events[-1].outputs["result"]]
        assert titles[0] == "Zebra"  # score 0.5 from the service beats the BM25 hits
        assert {"sky.md", "sea.md"} <= set(titles) and len(titles) == 3
        single = kr_flow(["local", "ext"], retrieval_mode="single")
        events = run_events(single, routes, q="zebra")
        assert [r["metadata"]["dataset_id"] for r in events[-1].outputs["result"]] == ["ext"]
        # both answer; the node's top_k cuts the merged list
        two = kr_flow(["local", "ext"], multiple_retrieval_config={"top_k": 2})
        titles = [r["title"] for r in run_events(two, routes, q="zebra sky")[-1].outputs["result"]]
        assert len(titles) == 2 and titles[0] == "Zebra"


def test_single_mode_takes_the_dataset_with_the_best_hit(local_index: Path) -> None:
    sky = [{"content": "zebra stripes in the sky", "title": "Striped sky", "metadata": {}}]
    with KnowledgeApi(sky) as api:
        routes = settings(
            knowledge={
                "datasets": {
                    "local": {"kind": "local", "index": str(local_index)},
                    "ext": {"kind": "external", "endpoint": api.endpoint, "knowledge_id": "k"},
                }
            }
        )
        local_only = run_events(kr_flow(["local"]), routes, q="zebra stripes sky")
        assert local_only[-1].outputs["result"]  # the local index answers too...
        single = kr_flow(["local", "ext"], retrieval_mode="single")
        events = run_events(single, routes, q="zebra stripes sky")
        # ...but the service's hit (every word, score 1.0) is the best one
        assert [r["title"] for r in events[-1].outputs["result"]] == ["Striped sky"]


def test_or_conditions_and_the_answer_size_cap(local_index: Path) -> None:
    routes = settings(knowledge={"datasets": {"ds1": {"kind": "local", "index": str(local_index)}}})
    either = {
        "metadata_filtering_mode": "manual",
        "metadata_filtering_conditions": {
            "logical_operator": "or",
            "conditions": [
                {"name": "extension", "comparison_operator": "is", "value": ".txt"},
                {"name": "name", "comparison_operator": "is", "value": "sky.md"},
            ],
        },
    }
    events = run_events(kr_flow(["ds1"], **either), routes, q="blue green")
    assert sorted(r["title"] for r in events[-1].outputs["result"]) == ["grass.txt", "sky.md"]
    with KnowledgeApi([]) as api:
        api.pad_answer(17 * 1024 * 1024)
        routes = settings(
            knowledge={"datasets": {"ext": {"kind": "external", "endpoint": api.endpoint,
                                            "knowledge_id": "k"}}}
        )  # fmt: skip
        events = run_events(kr_flow(["ext"]), routes, q="anything")
        assert "the answer is larger than 16777216 bytes" in events[-1].error_message


def test_unknown_dataset_and_non_text_query_are_errors(
    docs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = run_events(kr_flow(["nope"]), settings(), q="x")
    end = node_end(events)
    assert isinstance(end, ev.NodeFailed)
    assert "knowledge.datasets" in end.error_message
    assert isinstance(events[-1], ev.WorkflowFailed)
    number = one_node_flow(
        "knowledge-retrieval",
        {"query_variable_selector": ["start", "n"], "dataset_ids": ["nope"]},
        {"result": ["n", "result"]},
        start_variables=[{"variable": "n", "type": "number", "label": "n", "required": True}],
    )
    events = run_events(number, settings(), n=7)
    assert "the query variable is not text" in events[-1].error_message
    monkeypatch.delenv("KB_UNSET_KEY", raising=False)
    keyed = {"ext": {"kind": "external", "endpoint": "http://127.0.0.1:9/api",
                     "knowledge_id": "k", "api_key_env": "KB_UNSET_KEY"}}  # fmt: skip
    events = run_events(kr_flow(["ext"]), settings(knowledge={"datasets": keyed}), q="x")
    assert "KB_UNSET_KEY" in events[-1].error_message


def test_automatic_metadata_filtering_is_refused_by_name() -> None:
    from firstgate.common.problems import DslError
    from firstgate.runtime import load_workflow

    with pytest.raises(DslError, match="automatic metadata filtering"):
        load_workflow(kr_flow(["x"], metadata_filtering_mode="automatic"))


def test_single_mode_takes_the_datasets_own_top_k(local_index: Path) -> None:
    """Single mode does not cut the dataset's answer again: the backend's
    `top_k` (the dataset's setting) is what limits it."""
    for top_k, expected in ((1, 1), (2, 2)):
        spec = {"kind": "local", "index": str(local_index), "top_k": top_k}
        routes = settings(knowledge={"datasets": {"ds1": spec}})
        events = run_events(kr_flow(["ds1"], retrieval_mode="single"), routes, q="blue sky")
        assert len(events[-1].outputs["result"]) == expected
