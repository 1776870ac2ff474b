"""Which Jinja2 templates may render inside the runtime's process.

A template renders in-process ("inline") only when it can do no more than
read, filter and arrange its inputs: its output is then bounded by its inputs
times a constant the template's own text fixes, and its CPU time by its
loops, which are budgeted (`nodes/templates/jinja.py`). Anything that can compute or
amplify goes to the code sandbox, where CPU time and memory have real limits:

- operators `*`, `**`, `%` (repetition, huge powers, `%`-formatting), macros,
  call blocks, recursive loops, includes and imports;
- filters and methods outside the allow-lists below (`center`, `format`,
  `indent`, `wordwrap`, `ljust`, ... pad or format to a size the template
  chooses), or with non-constant arguments where the argument sets a size;
- more than `MAX_READS` variable reads in one expression;
- an assignment that reads a variable the template assigns (the way to
  double a string in a loop), except a counter: `ns.n + 1`.

Conservative by design: a template the rules do not understand is isolated,
which costs a process hand-off, never correctness.
"""

from __future__ import annotations

from jinja2 import nodes

MAX_READS = 8

# Filters whose output is at most proportional to their input (given constant arguments).
INLINE_FILTERS = frozenset(
    {
        "abs", "attr", "capitalize", "count", "d", "default", "dictsort", "e", "escape",
        "first", "float", "forceescape", "groupby", "int", "items", "join", "last",
        "length", "list", "lower", "map", "max", "min", "reject", "rejectattr", "replace",
        "reverse", "round", "safe", "select", "selectattr", "sort", "string", "striptags",
        "sum", "title", "tojson", "trim", "truncate", "unique", "upper", "urlencode",
        "wordcount",
    }
)  # fmt: skip
# Filters whose arguments must be constants (a separator or replacement the data picks
# could be as large as the data).
CONSTANT_ARGS = frozenset({"join", "replace", "map", "select", "reject", "truncate"})
INLINE_METHODS = frozenset(
    {
        "items", "keys", "values", "get", "lower", "upper", "strip", "lstrip", "rstrip",
        "title", "capitalize", "startswith", "endswith", "split", "rsplit", "splitlines",
        "count", "find", "rfind", "index", "isdigit", "isalpha", "isalnum", "isspace",
        "islower", "isupper", "replace",
    }
)  # fmt: skip
INLINE_FUNCTIONS = frozenset({"range", "namespace", "dict", "cycler", "joiner"})
# Node types that are always fine (checked children aside).
_PLAIN = (
    nodes.Template, nodes.Output, nodes.TemplateData, nodes.Const, nodes.Name, nodes.Getattr,
    nodes.Getitem, nodes.Slice, nodes.If, nodes.CondExpr, nodes.And, nodes.Or, nodes.Not,
    nodes.Neg, nodes.Pos, nodes.Compare, nodes.Operand, nodes.Test, nodes.Keyword, nodes.Tuple,
    nodes.List, nodes.Dict, nodes.Pair, nodes.NSRef, nodes.Concat, nodes.Add, nodes.Sub,
    nodes.Div, nodes.FloorDiv, nodes.Scope, nodes.ScopedEvalContextModifier,
    nodes.EvalContextModifier, nodes.With, nodes.MarkSafe, nodes.MarkSafeIfAutoescape,
    nodes.EnvironmentAttribute, nodes.InternalName, nodes.ContextReference,
)  # fmt: skip


class _Isolate(Exception):
    """The reason a template must render in the sandbox."""


def inline_reason(tree: nodes.Template) -> str | None:
    """None when the template may render in-process; else why it may not."""
    assigned = _assigned_names(tree)
    try:
        _check(tree, assigned)
    except _Isolate as why:
        return str(why)
    return None


def _assigned_names(tree: nodes.Template) -> set[str]:
    """`x` for `{% set x = ... %}`, `ns.x` for `{% set ns.x = ... %}`."""
    names: set[str] = set()
    for node in tree.find_all((nodes.Assign, nodes.AssignBlock)):
        for target in node.target.find_all(nodes.NSRef):
            names.add(f"{target.name}.{target.attr}")
        targets = [node.target, *node.target.find_all(nodes.Name)]
        names.update(t.name for t in targets if isinstance(t, nodes.Name))
        if isinstance(node.target, nodes.NSRef):
            names.add(f"{node.target.name}.{node.target.attr}")
    return names


def _reads(node: nodes.Node, assigned: set[str]) -> tuple[int, int]:
    """(variable reads, reads of template-assigned variables) in an expression;
    `ns.x` is one read of `ns.x`."""
    total = mine = 0
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, nodes.Getattr) and isinstance(current.node, nodes.Name):
            total += 1
            mine += f"{current.node.name}.{current.attr}" in assigned
        elif isinstance(current, nodes.Name) and current.ctx == "load":
            total += 1
            mine += current.name in assigned
        else:
            stack.extend(current.iter_child_nodes())
    return total, mine


def _check(node: nodes.Node, assigned: set[str]) -> None:
    if isinstance(node, nodes.For):
        if node.recursive:
            raise _Isolate("recursive loop")
    elif isinstance(node, (nodes.Assign, nodes.AssignBlock)):
        _check_assignment(node, assigned)
    elif isinstance(node, nodes.Filter):
        _check_filter(node)
    elif isinstance(node, nodes.Call):
        _check_call(node)
    elif isinstance(node, nodes.FilterBlock):
        _check_filter(node.filter)
    elif not isinstance(node, _PLAIN):
        raise _Isolate(type(node).__name__)
    if isinstance(node, nodes.Expr) and not isinstance(node, nodes.Const):
        total, _ = _reads(node, assigned)
        if total > MAX_READS:
            raise _Isolate(f"{total} variable reads in one expression")
    for child in node.iter_child_nodes():
        _check(child, assigned)


def _check_assignment(node: nodes.Assign | nodes.AssignBlock, assigned: set[str]) -> None:
    value: nodes.Node = node.node if isinstance(node, nodes.Assign) else nodes.Output(node.body)
    _, mine = _reads(value, assigned)
    if mine == 0:
        return
    # The one growth a loop may do in-process: a counter, `x + 1` / `x - 1`.
    if (
        isinstance(value, (nodes.Add, nodes.Sub))
        and isinstance(value.right, nodes.Const)
        and isinstance(value.right.value, (int, float))
        and mine == 1
    ):
        return
    raise _Isolate("an assignment reads an assigned variable")


def _constant(args: list[nodes.Expr]) -> bool:
    return all(isinstance(arg, nodes.Const) for arg in args)


def _check_filter(node: nodes.Filter) -> None:
    if node.name not in INLINE_FILTERS:
        raise _Isolate(f"filter {node.name}")
    if node.dyn_args is not None or node.dyn_kwargs is not None:
        raise _Isolate(f"filter {node.name} with * or ** arguments")
    if node.name in CONSTANT_ARGS:
        values = [*node.args, *(kw.value for kw in node.kwargs)]
        if not _constant(values):
            raise _Isolate(f"filter {node.name} with computed arguments")
        if node.name in ("map", "select", "reject") and node.args:
            first = node.args[0]
            if isinstance(first, nodes.Const) and first.value not in INLINE_FILTERS | _TESTS:
                raise _Isolate(f"{node.name} applies {first.value}")


# Tests only answer yes or no; `map('x')` may name one of them through select/reject.
_TESTS = frozenset(
    {
        "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "escaped", "even",
        "false", "filter", "float", "ge", "greaterthan", "gt", "in", "integer", "iterable",
        "le", "lessthan", "lower", "lt", "mapping", "ne", "none", "number", "odd", "sameas",
        "sequence", "string", "test", "true", "undefined", "upper",
    }
)  # fmt: skip


def _check_call(node: nodes.Call) -> None:
    if node.dyn_args is not None or node.dyn_kwargs is not None:
        raise _Isolate("call with * or ** arguments")
    target = node.node
    if isinstance(target, nodes.EnvironmentAttribute):
        return  # the loop budget's own wrapper
    if isinstance(target, nodes.Name):
        if target.name not in INLINE_FUNCTIONS:
            raise _Isolate(f"call of {target.name}")
        return
    if isinstance(target, nodes.Getattr):
        if (
            isinstance(target.node, nodes.Name)
            and target.node.name == "loop"
            and target.attr == "cycle"
        ):
            return
        if target.attr == "join" and isinstance(target.node, nodes.Const):
            return  # ", ".join(items): a constant separator
        if target.attr.startswith("_"):
            return  # Jinja's sandbox refuses private attributes before any call
        if target.attr not in INLINE_METHODS:
            raise _Isolate(f"method {target.attr}")
        if target.attr == "replace" and not _constant(
            [*node.args, *(k.value for k in node.kwargs)]
        ):
            raise _Isolate("replace with computed arguments")
        return
    raise _Isolate("call of a computed callable")
