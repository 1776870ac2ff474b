"""firstgate's workflow runtime: load Dify DSL, run it, iterate typed events.

from firstgate.runtime import load_workflow
workflow = load_workflow("flow.yml")          # or a dict; raises DslError
settings = load_settings("models.yaml")       # optional; raises DslError
run = workflow.run({"query": "hi"}, settings=settings)  # raises InputError / RouteError
for event in run:                             # typed dataclasses, in order
    ...
run.abort()                                   # from any thread or greenlet

Many runs share one `RunResources` (routes, code executor, store), opened and
closed by their caller; each run's own choices are a `RunOptions`:

with RunResources.open(settings, store=store, loader=load_workflow) as resources:
    run = workflow.run({}, RunOptions(query="hi", user_id="ada"), resources)
"""

from firstgate.common.problems import DslError, Problem
from firstgate.runtime.execution.engine import WorkflowRun
from firstgate.runtime.execution.events import Event
from firstgate.runtime.execution.limits import RunLimits
from firstgate.runtime.execution.resources import RunResources
from firstgate.runtime.execution.session import RunOptions
from firstgate.runtime.models.routes import RouteError
from firstgate.runtime.settings import RuntimeSettings, load_settings
from firstgate.runtime.workflow import Workflow, load_workflow

__all__ = [
    "DslError",
    "Event",
    "Problem",
    "RouteError",
    "RunLimits",
    "RunOptions",
    "RunResources",
    "RuntimeSettings",
    "Workflow",
    "WorkflowRun",
    "load_settings",
    "load_workflow",
]
