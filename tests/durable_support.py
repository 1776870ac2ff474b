"""What the durable-run tests share: an app whose every node is a real HTTP GET
to a loopback target (`tests/fakes/http_target.py`'s `/slow`), so the target
counts how often each node ran, in whatever process ran it; the settings that
let those requests reach loopback."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from tests.fakes.http_target import HttpTarget

CHAIN_KEY = "chain-key-0123456789"


def chain_app(target_url: str, count: int, delay: float) -> dict[str, Any]:
    """start -> h1 -> ... -> h<count> -> end: each node a GET of `/slow`, named in its query."""
    nodes: list[dict[str, Any]] = [
        {"id": "start", "data": {"type": "start", "title": "Start", "variables": []}}
    ]
    edges = []
    previous = "start"
    for i in range(1, count + 1):
        node_id = f"h{i}"
        url = f"{target_url}/slow?delay={delay}&node={node_id}"
        nodes.append(
            {"id": node_id, "data": {"type": "http-request", "title": node_id, "url": url}}
        )
        edges.append({"source": previous, "target": node_id, "sourceHandle": "source"})
        previous = node_id
    out = [{"variable": "status", "value_selector": [previous, "status_code"]}]
    nodes.append({"id": "end", "data": {"type": "end", "title": "End", "outputs": out}})
    edges.append({"source": previous, "target": "end", "sourceHandle": "source"})
    return {
        "kind": "app",
        "version": "0.1.5",
        "app": {"mode": "workflow", "name": "chain"},
        "workflow": {"graph": {"nodes": nodes, "edges": edges}},
    }


def write_chain(apps: Path, target: HttpTarget, count: int, delay: float) -> Path:
    apps.mkdir(parents=True, exist_ok=True)
    path = apps / "chain.yml"
    path.write_text(json.dumps(chain_app(target.url, count, delay)), encoding="utf-8")
    return path


def settings_file(directory: Path, target: HttpTarget) -> Path:
    """No model is called; the HTTP nodes may reach the target on loopback."""
    path = directory / "settings.yaml"
    path.write_text(
        "providers:\n  local: {kind: openai-compatible, base_url: 'http://127.0.0.1:9'}\n"
        f"default: local\nhttp_request:\n  allow: ['127.0.0.1:{target.port}']\n",
        encoding="utf-8",
    )
    return path


def runs_per_node(target: HttpTarget) -> Counter[str]:
    return Counter(r["query"].get("node", "?") for r in target.requests if r["path"] == "/slow")
