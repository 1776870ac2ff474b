"""What each model node was given: reads `firstgate run ... --json` on stdin and
prints the prompt messages of every node that called a model (Dify's
`process_data.prompts`), memory included.

    .venv/bin/firstgate run examples/chat_memory.yml --query "What is my name?" \
        --conversation demo --json | .venv/bin/python examples/show_prompts.py
"""

from __future__ import annotations

import json
import sys

from firstgate import locales


def main() -> int:
    locale = locales.locale_from_env()
    for line in sys.stdin:
        event = json.loads(line)
        data = event.get("data") or {}
        if event.get("event") != "node_finished":
            continue
        prompts = (data.get("process_data") or {}).get("prompts")
        if not prompts:
            continue
        where = locales.t(
            "dsl.location.node",
            locale,
            id=data.get("node_id"),
            title=data.get("title"),
            type=data.get("node_type"),
        )
        print(f"{where}:")
        for message in prompts:
            text = str(message.get("content", ""))
            print(f"  {message.get('role', '?'):>9}: " + text.replace("\n", "\n" + " " * 13))
    return 0


if __name__ == "__main__":
    sys.exit(main())
