"""An easy-mode export (`app.mode: chat`, `agent-chat`, `completion`, with a
`model_config` instead of a graph) as the graph document Dify's editor would
draw for it: a chatflow (`advanced-chat`) for chat and agent apps, a workflow
for completion apps. The loader validates and runs it like any other.

    start -> [keyword check on the inputs] -> [knowledge-retrieval] -> llm | agent
          -> [keyword check on the answer] -> answer (chat) | end `text` (completion)

A keyword check is a template that renders the preset response when a
keyword occurs (case-insensitive, as Dify's keywords moderation), and an
if-else that answers with it instead of going on.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from firstgate.common.dsl import DslModel
from firstgate.common.problems import DslError, Problem, problems_from_validation
from firstgate.common.sections import Sections, validation_context
from firstgate.locales import t
from firstgate.runtime.dsl.app_modes.model_config import (
    EASY_MODES,
    ModelConfigSection,
    ignored,
)
from firstgate.runtime.dsl.app_modes.prompts import START, app_text, build_prompt, variables_of
from pydantic import Field, ValidationError

log = logging.getLogger("firstgate.app_modes")

# The `model_config` blocks `/v1/parameters` reports, as the export wrote them.
FEATURE_KEYS = (
    "opening_statement",
    "suggested_questions",
    "suggested_questions_after_answer",
    "speech_to_text",
    "text_to_speech",
    "retriever_resource",
    "annotation_reply",
    "more_like_this",
    "sensitive_word_avoidance",
    "file_upload",
)
TEXT_INPUTS = ("text-input", "paragraph", "select")
KNOWLEDGE = "knowledge"
FLAGGED = "flagged"
MODERATION = "moderation_"
# Where the answer comes from when the output's keyword check answered with its
# preset: a chat app streams that as Dify's `message_replace`.
OUTPUT_PRESET_SELECTOR = (f"{MODERATION}output", "output")


@dataclass(frozen=True, slots=True)
class EasyApp:
    """What an easy-mode export declares beyond its graph."""

    mode: str  # chat | agent-chat | completion
    ignored: tuple[str, ...] = ()
    # The node whose `result` is the app's retrieved knowledge (completion replies).
    knowledge_node: str | None = None
    shows_retriever_resources: bool = False
    features: Mapping[str, Any] = field(default_factory=dict)
    # What Dify loads and runs without (the loader reports them as warnings).
    warnings: tuple[Problem, ...] = ()


class EasyAppSection(DslModel):
    name: str = ""
    description: str = ""
    mode: Literal["chat", "agent-chat", "completion"]


class EasyDocument(DslModel):
    version: Any = ""
    kind: Literal["app"] = "app"
    app: EasyAppSection
    config: ModelConfigSection = Field(alias="model_config")
    dependencies: list[Any] | None = None


def is_easy(raw: Mapping[str, Any]) -> bool:
    app = raw.get("app")
    return isinstance(app, Mapping) and app.get("mode") in EASY_MODES


def compile_document(
    raw: Mapping[str, Any], sections: Sections | None = None
) -> tuple[dict[str, Any], EasyApp | None]:
    """The graph document for an easy-mode export (raises DslError with every
    problem of its `model_config`); any other document as it is, and None."""
    if not is_easy(raw):
        return dict(raw), None
    try:
        document = EasyDocument.model_validate(
            raw, context=validation_context(sections or Sections())
        )
    except ValidationError as exc:
        raise DslError(problems_from_validation(exc)) from None
    config = document.config
    mode = document.app.mode
    problems = _problems(config, mode)
    if problems:
        raise DslError(problems)
    raw_config = raw.get("model_config") or {}
    features = {k: raw_config[k] for k in FEATURE_KEYS if raw_config.get(k) is not None}
    graph = _Builder(config, mode).build()
    easy = EasyApp(
        mode=mode,
        ignored=tuple(ignored(config)),
        knowledge_node=KNOWLEDGE if config.datasets else None,
        shows_retriever_resources=config.retriever_resource.enabled,
        features=features,
        warnings=tuple(_absent_tools(config)),
    )
    for name in easy.ignored:
        log.warning(t("dsl.app.ignoredFeature", app=document.app.name, feature=name))
    return {
        "version": str(document.version or ""),
        "kind": "app",
        "app": {
            "name": document.app.name,
            "description": document.app.description,
            "mode": "workflow" if mode == "completion" else "advanced-chat",
        },
        "workflow": {
            "graph": graph,
            "features": {**features, "file_upload": _file_upload(raw_config)},
            "environment_variables": [],
            "conversation_variables": [],
        },
        "dependencies": document.dependencies or [],
    }, easy


def _file_upload(raw_config: Mapping[str, Any]) -> Any:
    block = raw_config.get("file_upload")
    return dict(block) if isinstance(block, Mapping) else {}


def _absent_tools(config: ModelConfigSection) -> list[Problem]:
    return [
        Problem(
            "dsl.app.workflowToolAbsent",
            {"tool": tool.tool_name, "provider": tool.provider_name or tool.provider_id},
            field=f"model_config.agent_mode.tools[{index}]",
        )
        for index, tool in config.absent_tools
    ]


def _problems(config: ModelConfigSection, mode: str) -> list[Problem]:
    found: list[Problem] = []
    if mode == "completion" and config.datasets:
        name = config.dataset_query_variable
        if name not in variables_of(config):
            found.append(
                Problem(
                    "dsl.app.datasetQuery",
                    {"variable": name or "(none)"},
                    field="model_config.dataset_query_variable",
                )
            )
    return found


class _Builder:
    """The nodes and edges, appended in the order they run."""

    def __init__(self, config: ModelConfigSection, mode: str) -> None:
        self.config = config
        self.mode = mode
        self.chat = mode != "completion"
        self.nodes: list[dict[str, Any]] = []
        self.edges: list[dict[str, Any]] = []
        self.tail: tuple[str, str] | None = None  # (node, handle) the next node follows

    def build(self) -> dict[str, Any]:
        self._add(START, "start", "Start", variables=self._start_variables())
        moderation = self.config.sensitive_word_avoidance
        keywords = moderation.keywords if moderation.enabled else []
        if keywords and moderation.config.inputs_config.enabled:
            texts = [("sys", "query")] if self.chat else []
            texts += [(START, name) for name in self._text_inputs()]
            self._check("input", texts, keywords, moderation.config.inputs_config.preset_response)
        has_context = bool(self.config.datasets)
        if has_context:
            self._knowledge()
        model_node = self._agent() if self.mode == "agent-chat" else self._llm(has_context)
        answer = (model_node, "text")
        if keywords and moderation.config.outputs_config.enabled:
            preset = moderation.config.outputs_config.preset_response
            self._check("output", [answer], keywords, preset)
        self._respond("answer", answer)
        return {"nodes": self.nodes, "edges": self.edges}

    # ---- nodes

    def _add(self, node_id: str, kind: str, title: str, **data: Any) -> str:
        self.nodes.append(
            {"id": node_id, "type": "custom", "data": {"type": kind, "title": title, **data}}
        )
        if self.tail is not None:
            source, handle = self.tail
            self.edges.append(
                {
                    "id": f"{source}-{handle}-{node_id}",
                    "source": source,
                    "sourceHandle": handle,
                    "target": node_id,
                    "targetHandle": "target",
                }
            )
        self.tail = (node_id, "source")
        return node_id

    def _start_variables(self) -> list[dict[str, Any]]:
        variables = []
        for item in self.config.user_input_form:
            for kind, spec in item.items():
                variables.append({**spec, "type": kind})
        return variables

    def _text_inputs(self) -> list[str]:
        return [
            str(spec.get("variable"))
            for item in self.config.user_input_form
            for kind, spec in item.items()
            if kind in TEXT_INPUTS and spec.get("variable")
        ]

    def _check(
        self, where: str, texts: list[tuple[str, str]], keywords: list[str], preset: str
    ) -> None:
        """A template rendering `preset` when a keyword occurs, and the branch on it."""
        names = [f"v{i}" for i in range(len(texts))]
        tests = "".join(
            f"{{%- if k in (({name} or '') ~ '') | lower -%}}{{%- set ns.hit = true -%}}"
            "{%- endif -%}"
            for name in names
        )
        template = (
            "{%- set ns = namespace(hit=false) -%}"
            f"{{%- for k in {json.dumps(keywords, ensure_ascii=False)} -%}}{tests}{{%- endfor -%}}"
            f"{{{{ {json.dumps(preset, ensure_ascii=False)} if ns.hit else '' }}}}"
        )
        check = f"{MODERATION}{where}"
        self._add(
            check,
            "template-transform",
            f"Keywords in the {where}",
            template=template,
            variables=[
                {"variable": n, "value_selector": list(s)}
                for n, s in zip(names, texts, strict=True)
            ],
        )
        branch = self._add(
            f"{check}_branch",
            "if-else",
            f"Keywords in the {where}?",
            cases=[
                {
                    "case_id": FLAGGED,
                    "logical_operator": "and",
                    "conditions": [
                        {
                            "variable_selector": [check, "output"],
                            "comparison_operator": "not empty",
                            "value": "",
                        }
                    ],
                }
            ],
        )
        self.tail = (branch, FLAGGED)
        self._respond(f"preset_{where}", (check, "output"))
        self.tail = (branch, "false")

    def _knowledge(self) -> None:
        datasets = self.config.dataset_configs
        query = ["sys", "query"] if self.chat else [START, self.config.dataset_query_variable]
        self._add(
            KNOWLEDGE,
            "knowledge-retrieval",
            "Knowledge",
            query_variable_selector=query,
            dataset_ids=self.config.datasets,
            retrieval_mode=datasets.retrieval_model,
            multiple_retrieval_config={
                "top_k": datasets.top_k,
                "score_threshold": datasets.threshold,
                "reranking_enable": False,
            },
        )

    def _model(self, stops: list[str]) -> dict[str, Any]:
        model = self.config.model
        params = dict(model.completion_params)
        if stops:
            given = [s for s in params.get("stop") or [] if isinstance(s, str)]
            params["stop"] = list(dict.fromkeys(given + stops))
        return {
            "provider": model.provider,
            "name": model.name,
            "mode": model.mode,
            "completion_params": params,
        }

    def _llm(self, has_context: bool) -> str:
        prompt = build_prompt(self.config, chat=self.chat, has_context=has_context)
        upload = self.config.file_upload
        return self._add(
            "llm",
            "llm",
            "LLM",
            model=self._model(prompt.stops),
            prompt_template=prompt.template,
            memory=prompt.memory,
            context={
                "enabled": has_context,
                "variable_selector": [KNOWLEDGE, "result"] if has_context else [],
            },
            vision={"enabled": upload.images, "configs": {"detail": upload.image.detail}},
        )

    def _agent(self) -> str:
        agent = self.config.agent_mode
        model = self._model([])
        strategy = "ReAct" if agent.strategy == "react" else "function_calling"
        upload = self.config.file_upload
        instruction = app_text(self.config.pre_prompt, variables_of(self.config), chat=True)
        parameters: dict[str, Any] = {
            "model": {
                "type": "constant",
                "value": {**model, "model": model["name"], "model_type": "llm"},
            },
            "tools": {"type": "constant", "value": [t.entry() for t in self.config.tools]},
            "instruction": {"type": "mixed", "value": instruction},
            "query": {"type": "mixed", "value": "{{#sys.query#}}"},
            "maximum_iterations": {"type": "constant", "value": agent.max_iteration},
        }
        if self.config.datasets:
            parameters["context"] = {"type": "variable", "value": [KNOWLEDGE, "result"]}
        return self._add(
            "agent",
            "agent",
            "Agent",
            agent_strategy_provider_name="langgenius/agent/agent",
            agent_strategy_name=strategy,
            agent_parameters=parameters,
            memory={"window": {"enabled": False}},
            vision={"enabled": upload.images, "configs": {"detail": upload.image.detail}},
            replay_rounds=True,
        )

    def _respond(self, node_id: str, selector: tuple[str, str]) -> None:
        shown = "{{#" + ".".join(selector) + "#}}"
        if self.chat:
            self._add(node_id, "answer", "Answer", answer=shown)
        else:
            self._add(
                node_id,
                "end",
                "End",
                outputs=[{"variable": "text", "value_selector": list(selector)}],
            )
