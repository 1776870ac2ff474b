"""A child process for the checkpoint tests: runs or resumes a workflow whose
graph has the test-only pausing node (`tests/fakes/pausing_node.py`), against a
real store, and prints each event with its position as one JSON line.

    python -m tests.checkpoint_child run STORE DOC_JSON INPUTS_JSON
    python -m tests.checkpoint_child resume STORE DOC_JSON RUN_ID RESOLVED_JSON

RESOLVED_JSON maps a paused node id to {"outputs": {...}, "handle": "..."}. A
refused resume prints {"refused": message} and exits 3. CHECKPOINT_DURABILITY
(node, batched, end: the default) is the run's durability, CHECKPOINT_BATCH_MS
(0 unless given) its batch period."""

from __future__ import annotations

import json
import os
import sys

from tests.fakes import pausing_node


def main(argv: list[str]) -> int:
    pausing_node.register()
    from firstgate.runtime import RunOptions, RunResources, load_workflow
    from firstgate.runtime.execution.checkpoint import CheckpointError, Durability, Resolved
    from firstgate.store import open_store

    verb, location, doc_path = argv[:3]
    with open(doc_path, encoding="utf-8") as f:
        workflow = load_workflow(json.load(f))
    store = open_store(location)
    durability = Durability(os.environ.get("CHECKPOINT_DURABILITY", Durability.END.value))
    batch_ms = int(os.environ.get("CHECKPOINT_BATCH_MS", "0"))
    options = RunOptions(durability=durability, durability_batch_ms=batch_ms)
    try:
        with RunResources.open(store=store, clients=_NoModels()) as resources:
            if verb == "run":
                run = workflow.run(json.loads(argv[3]), options, resources)
            else:
                answers = {
                    node: Resolved(a.get("outputs", {}), a.get("handle"))
                    for node, a in json.loads(argv[4]).items()
                }
                try:
                    run = workflow.resume(argv[3], options, resources, resolved=answers)
                except CheckpointError as exc:
                    print(json.dumps({"refused": str(exc), "key": exc.message_key}), flush=True)
                    return 3
            for event in run:
                print(json.dumps({"position": run.position, **event.to_dict()}), flush=True)
    finally:
        store.close()
    return 0


class _NoModels:
    """These graphs call no model."""

    def client_for(self, provider: str) -> object:
        raise AssertionError(f"no model expected, asked for {provider}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
