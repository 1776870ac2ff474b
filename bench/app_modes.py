"""14. Easy app modes: a chat-mode app (`model_config`) against the
advanced-chat graph that does the same, measured in the same run.

- A turn: engine CPU (process time, all threads; the model server is another
  process) per chat turn of a conversation kept in a SQLite store, median of
  `--turns` turns after a warm-up, for the chat app and for the hand-drawn
  chatflow (start -> LLM with the same system prompt, memory and query ->
  answer). Target (issue 22): at most 1.1x.
- Loading: reading, parsing and validating the export file, best of
  `--repeat` x 20 loads, the chat app (compiled to its graph first) against
  the chatflow's export. Target: at most 1.2x.

    python -m bench.app_modes [--turns 200] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from firstgate.runtime import RunOptions, RunResources, load_workflow
from firstgate.runtime.settings import RuntimeSettings
from firstgate.runtime.settings.providers import ProviderRoute
from firstgate.store import open_store

from bench.common import ServerProcess, header, line, ratio

TURN_TARGET = 1.1
LOAD_TARGET = 1.2
PRE_PROMPT = "You are a helpful assistant for {{name}}, who likes {{topic}}."
FORM = [
    {"text-input": {"variable": "name", "label": "Name", "required": True, "max_length": 48}},
    {"select": {"variable": "topic", "label": "Topic", "options": ["tea", "maps"]}},
]


def chat_app() -> dict[str, Any]:
    """A chat app as the basic editor exports it (every block present, most off)."""
    return {
        "version": "0.1.5",
        "kind": "app",
        "app": {"name": "bench chat", "mode": "chat", "icon": "🤖"},
        "model_config": {
            "model": {"provider": "bench", "name": "m", "mode": "chat", "completion_params": {}},
            "prompt_type": "simple",
            "pre_prompt": PRE_PROMPT,
            "user_input_form": FORM,
            "chat_prompt_config": {},
            "completion_prompt_config": {},
            "dataset_configs": {"datasets": {"datasets": []}, "retrieval_model": "multiple"},
            "agent_mode": {"enabled": False, "tools": []},
            "opening_statement": "Hello!",
            "suggested_questions": ["What is tea?"],
            "retriever_resource": {"enabled": True},
            "sensitive_word_avoidance": {"enabled": False, "type": "", "configs": []},
            "speech_to_text": {"enabled": False},
            "text_to_speech": {"enabled": False},
            "more_like_this": {"enabled": False},
            "file_upload": {"image": {"enabled": False, "number_limits": 3}},
            "external_data_tools": [],
        },
    }


def chatflow() -> dict[str, Any]:
    """The chatflow someone would draw for the same app."""
    variables = [{**spec, "type": kind} for item in FORM for kind, spec in item.items()]
    system = PRE_PROMPT.replace("{{name}}", "{{#start.name#}}").replace(
        "{{topic}}", "{{#start.topic#}}"
    )
    llm = {
        "type": "llm",
        "title": "LLM",
        "model": {"provider": "bench", "name": "m", "mode": "chat", "completion_params": {}},
        "prompt_template": [{"role": "system", "text": system + "\n"}],
        "memory": {"window": {"enabled": False}, "query_prompt_template": "{{#sys.query#}}"},
        "context": {"enabled": False, "variable_selector": []},
        "vision": {"enabled": False},
    }
    nodes = [
        {"id": "start", "data": {"type": "start", "title": "Start", "variables": variables}},
        {"id": "llm", "data": llm},
        {"id": "answer", "data": {"type": "answer", "title": "Answer", "answer": "{{#llm.text#}}"}},
    ]
    edges = [
        {"source": "start", "target": "llm", "sourceHandle": "source"},
        {"source": "llm", "target": "answer", "sourceHandle": "source"},
    ]
    return {
        "version": "0.1.5",
        "kind": "app",
        "app": {"name": "bench chatflow", "mode": "advanced-chat"},
        "workflow": {"graph": {"nodes": nodes, "edges": edges}, "features": {}},
    }


def turn_cpu(document: dict[str, Any], settings: RuntimeSettings, turns: int, db: Path) -> float:
    """Median process CPU seconds per turn of one conversation."""
    workflow = load_workflow(document)
    store = open_store(db)
    resources = RunResources.open(settings, store=store, loader=load_workflow)
    inputs = {"name": "Ada", "topic": "tea"}
    conversation = "bench"
    samples: list[float] = []
    for index in range(turns + 5):  # 5 warm-up turns
        started = time.process_time()
        options = RunOptions(query=f"question {index}", conversation_id=conversation)
        events = list(workflow.run(inputs, options, resources))
        spent = time.process_time() - started
        assert events[-1].to_dict()["event"] == "message_end", events[-1]
        if index >= 5:
            samples.append(spent)
    resources.close()
    store.close()
    return statistics.median(samples)


def load_cpu(path: Path, repeat: int) -> float:
    """Best process CPU seconds to read, parse and validate the file."""
    best = float("inf")
    for _ in range(repeat):
        started = time.process_time()
        for _ in range(20):
            load_workflow(path)
        best = min(best, (time.process_time() - started) / 20)
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    header(f"14. easy app modes: a chat app against the same chatflow ({args.turns} turns)")
    failed = False
    with ServerProcess("scenarios") as server, tempfile.TemporaryDirectory() as tmp:
        route = ProviderRoute(kind="openai-compatible", base_url=server.base_url, probe="off")
        settings = RuntimeSettings(providers={"bench": route})
        # Interleaved, so a noisy neighbour hits both sides alike.
        app_turns, flow_turns = [], []
        for round_ in range(4):
            pair = [(chat_app, app_turns, "a"), (chatflow, flow_turns, "f")]
            for make, found, tag in pair if round_ % 2 == 0 else pair[::-1]:
                db = Path(tmp) / f"{tag}{round_}.db"
                found.append(turn_cpu(make(), settings, args.turns // 4, db))
        app_turn, flow_turn = min(app_turns), min(flow_turns)
        line(f"chat app turn:  {app_turn * 1000:.2f} ms CPU (median)")
        line(f"chatflow turn:  {flow_turn * 1000:.2f} ms CPU (median)")
        verdict = app_turn <= TURN_TARGET * flow_turn
        failed |= not verdict
        line(
            f"ratio {ratio(app_turn, flow_turn)} (target <= {TURN_TARGET}x): "
            f"{'ok' if verdict else 'MISSED'}"
        )
        app_file, flow_file = Path(tmp) / "app.yml", Path(tmp) / "flow.yml"
        app_file.write_text(yaml.safe_dump(chat_app(), allow_unicode=True))
        flow_file.write_text(yaml.safe_dump(chatflow(), allow_unicode=True))
        app_load, flow_load = load_cpu(app_file, args.repeat), load_cpu(flow_file, args.repeat)
        line(f"load chat app:  {app_load * 1e6:.0f} µs CPU (best)")
        line(f"load chatflow:  {flow_load * 1e6:.0f} µs CPU (best)")
        verdict = app_load <= LOAD_TARGET * flow_load
        failed |= not verdict
        line(
            f"ratio {ratio(app_load, flow_load)} (target <= {LOAD_TARGET}x): "
            f"{'ok' if verdict else 'MISSED'}"
        )
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
