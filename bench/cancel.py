"""2. Cancel latency: from `gate.cancel()` (and from a workflow's `run.abort()`)
to the blocked read returning. Baseline: `response.close()` from another thread.
Also `run.abort()` inside a parallel iteration whose four rounds each block in
an LLM stream: the time until the last round's node has stopped (issue 13:
every in-flight child within 10 ms).

    python -m bench.cancel [--gevent] [--trials 50]
"""

from __future__ import annotations

from bench.common import patch_gevent_if_asked

patch_gevent_if_asked()

import argparse  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

import httpx  # noqa: E402
from firstgate.plugin_daemon_client import LLMClient, first_token_gate  # noqa: E402
from firstgate.plugin_daemon_client.errors import FirstGateError  # noqa: E402
from firstgate.runtime import RunOptions, load_workflow  # noqa: E402
from firstgate.runtime.execution import events as ev  # noqa: E402
from firstgate.runtime.settings import RuntimeSettings  # noqa: E402
from firstgate.runtime.settings.providers import ProviderRoute  # noqa: E402

from bench.common import (  # noqa: E402
    ServerProcess,
    header,
    line,
    ms,
    one_llm_flow,
    percentile,
    ratio,
)

SETTLE_S = 0.03  # let the read block before cancelling
BASELINE_WAIT_S = 3.0


def gate_cancel_latency(client: LLMClient) -> float:
    """The caller blocks in a read; another thread cancels its gate."""
    ready = threading.Event()
    returned: list[float] = []
    holder: list = []

    def reader() -> None:
        try:
            with first_token_gate(first_token_timeout=30.0) as gate:
                holder.append(gate)
                ready.set()
                for _ in client.invoke_llm("m", [{"role": "user", "content": "SILENCE"}]):
                    pass
        except FirstGateError:
            returned.append(time.perf_counter())

    thread = threading.Thread(target=reader)
    thread.start()
    ready.wait()
    time.sleep(SETTLE_S)
    start = time.perf_counter()
    holder[0].cancel("bench")
    thread.join(10)
    return returned[0] - start


def abort_latency(workflow, routes: RuntimeSettings) -> tuple[float, float]:
    """run.abort() while the LLM node blocks: (abort -> node's terminal event,
    abort -> run's terminal event), both as observed by the iterating thread."""
    run = workflow.run({"query": "SILENCE"}, settings=routes)
    start = node_done = 0.0
    for event in run:
        if isinstance(event, ev.NodeStarted) and event.node_id == "llm":
            time.sleep(SETTLE_S)
            start = time.perf_counter()
            run.abort("bench")
        elif isinstance(event, ev.NodeStopped) and event.node_id == "llm":
            node_done = time.perf_counter()
        elif isinstance(event, ev.WorkflowFinished):
            return node_done - start, time.perf_counter() - start
    raise RuntimeError("no terminal event")


ROUNDS = 4


def iteration_flow() -> dict:
    """start -> a parallel iteration of ROUNDS LLM calls (each blocks) -> end."""
    llm = one_llm_flow("cancel", provider="bench", model="m", first_token_timeout_ms=30000)
    ask = llm["workflow"]["graph"]["nodes"][1]
    ask["data"]["prompt_template"] = [{"role": "user", "text": "SILENCE {{#it.item#}}"}]
    nodes = [
        {"id": "start", "data": {"type": "start", "title": "s", "variables": []}},
        {
            "id": "it",
            "data": {
                "type": "iteration",
                "title": "it",
                "iterator_selector": ["conversation", "words"],
                "output_selector": ["ask", "text"],
                "start_node_id": "itstart",
                "is_parallel": True,
                "parallel_nums": ROUNDS,
            },
        },
        {"id": "itstart", "parentId": "it", "data": {"type": "iteration-start", "title": ""}},
        {"id": "ask", "parentId": "it", "data": ask["data"]},
    ]
    edges = [
        {"source": "start", "target": "it"},
        {"source": "itstart", "target": "ask"},
    ]
    words = [f"w{i}" for i in range(ROUNDS)]
    return {
        "version": "0.3.1",
        "kind": "app",
        "app": {"name": "cancel-in-iteration", "mode": "advanced-chat"},
        "workflow": {
            "conversation_variables": [
                {"id": "words", "name": "words", "value_type": "array[string]", "value": words}
            ],
            "graph": {"nodes": nodes, "edges": edges},
        },
    }


def container_abort_latency(workflow, routes: RuntimeSettings) -> tuple[float, float]:
    """run.abort() while ROUNDS rounds block in their LLM streams: (abort -> the
    last round's NodeStopped, abort -> the run's terminal event)."""
    run = workflow.run({}, RunOptions(query="go"), settings=routes)
    start = last_stopped = 0.0
    started = 0
    for event in run:
        if isinstance(event, ev.NodeStarted) and event.node_id == "ask":
            started += 1
            if started == ROUNDS:
                time.sleep(SETTLE_S)
                start = time.perf_counter()
                run.abort("bench")
        elif isinstance(event, ev.NodeStopped) and event.node_id == "ask":
            last_stopped = time.perf_counter()
        elif isinstance(event, ev.WorkflowFinished):
            return last_stopped - start, time.perf_counter() - start
    raise RuntimeError("no terminal event")


def close_baseline(url: str) -> float | None:
    """httpx response.close() from another thread while a read blocks (read=None)."""
    client = httpx.Client(timeout=httpx.Timeout(None, connect=5.0))
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "SILENCE"}]}
    returned: list[float] = []
    holder: list = []
    ready = threading.Event()

    def reader() -> None:
        try:
            with client.stream("POST", url, json=body) as response:
                holder.append(response)
                ready.set()
                for _ in response.iter_raw():
                    pass
        except Exception:  # noqa: BLE001 - any way out counts
            pass
        returned.append(time.perf_counter())

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    ready.wait(5)
    time.sleep(SETTLE_S)
    start = time.perf_counter()
    holder[0].close()
    thread.join(BASELINE_WAIT_S)
    return returned[0] - start if returned else None


def flow() -> dict:
    return one_llm_flow("cancel", provider="bench", model="m", first_token_timeout_ms=30000)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--gevent", action="store_true")
    args = parser.parse_args()
    header(f"2. cancel latency ({args.trials} trials)")
    with ServerProcess("scenarios") as server:
        client = LLMClient(base_url=server.base_url)
        gate_cancel_latency(client)
        cancel = [gate_cancel_latency(client) for _ in range(args.trials)]
        routes = RuntimeSettings(
            providers={"bench": ProviderRoute(kind="openai-compatible", base_url=server.base_url)}
        )
        workflow = load_workflow(flow())
        aborts = [abort_latency(workflow, routes) for _ in range(args.trials)]
        in_iteration = load_workflow(iteration_flow())
        container_aborts = [
            container_abort_latency(in_iteration, routes) for _ in range(args.trials)
        ]
        baseline = close_baseline(f"{server.base_url}/chat/completions")
        client.close()
    p50, p99 = percentile(cancel, 50), percentile(cancel, 99)
    verdict = "ok" if p99 < 0.010 else "MISSED (target p99 < 10 ms)"
    line(f"gate.cancel() -> blocked read returns: p50 {ms(p50)}  p99 {ms(p99)}  [{verdict}]")
    node = [a[0] for a in aborts]
    whole = [a[1] for a in aborts]
    n99, w99 = percentile(node, 99), percentile(whole, 99)
    verdict = "ok" if n99 < 0.010 else "MISSED (target p99 < 10 ms)"
    line(
        f"run.abort() -> LLM node's NodeStopped event: p50 {ms(percentile(node, 50))}"
        f"  p99 {ms(n99)}  [{verdict}] (upper bound of the read returning)"
    )
    line(f"run.abort() -> WorkflowStopped: p50 {ms(percentile(whole, 50))}  p99 {ms(w99)}")
    last = [a[0] for a in container_aborts]
    l99 = percentile(last, 99)
    verdict = "ok" if l99 < 0.010 else "MISSED (target p99 < 10 ms)"
    line(
        f"run.abort() in a parallel iteration -> the last of {ROUNDS} rounds' NodeStopped:"
        f" p50 {ms(percentile(last, 50))}  p99 {ms(l99)}  [{verdict}]"
        f" (single node p99 {ms(n99)}: ratio {ratio(l99, n99)})"
    )
    whole = [a[1] for a in container_aborts]
    line(
        f"run.abort() in a parallel iteration -> WorkflowStopped: p50 {ms(percentile(whole, 50))}"
        f"  p99 {ms(percentile(whole, 99))}"
    )
    if baseline is None:
        line(
            f"baseline httpx response.close() from another thread: read still blocked after"
            f" {BASELINE_WAIT_S:.0f} s (never unblocks with read=None)"
        )
    else:
        line(
            f"baseline httpx response.close() from another thread: unblocked after {ms(baseline)}"
            f" (gate p99 / baseline {ratio(p99, baseline)})"
        )


if __name__ == "__main__":
    main()
