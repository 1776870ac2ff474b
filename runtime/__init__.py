"""firstgate's workflow runtime: load Dify DSL, run it, iterate typed events.

from runtime import load_workflow
workflow = load_workflow("flow.yml")          # or a dict; raises DslError
run = workflow.run({"query": "hi"})           # raises InputError / RouteError
for event in run:                             # typed dataclasses, in order
    ...
run.abort()                                   # from any thread or greenlet
"""

from runtime.engine import WorkflowRun
from runtime.events import Event
from runtime.limits import RunLimits
from runtime.loader import load_workflow
from runtime.model_routes import ModelRoutes, RouteError, load_models
from runtime.problems import DslError, Problem
from runtime.workflow import Workflow

__all__ = [
    "DslError",
    "Event",
    "ModelRoutes",
    "Problem",
    "RouteError",
    "RunLimits",
    "Workflow",
    "WorkflowRun",
    "load_models",
    "load_workflow",
]
