"""The one reader every YAML file goes through: workflow files and the models file.

YAML files are untrusted. Reading one is bounded and strict:

- at most `MAX_BYTES` are read (Dify's own import limit), however big the file;
- the text must be UTF-8 (a byte-order mark is allowed); a bad byte is located;
- nesting is at most `MAX_DEPTH` levels, counted through aliases (a 1 KB file
  nested 600 deep must not reach the recursive code that consumes it);
- aliases may add at most `MAX_ALIAS_GROWTH` to the document's size, counted
  as if every alias were written out (an alias bomb is refused after a walk
  linear in the document, before anything is expanded); an alias to a node
  that contains it (a recursive structure) is refused;
- a mapping may not repeat a key (Python would silently keep the last one);
- every problem names the file, line and column, and quotes at most a short
  prefix of any value.

Events come from libyaml when PyYAML was built with it (about 2.7 times
faster), else from PyYAML's pure-Python parser; the tree is composed here,
iteratively, so that the checks run before PyYAML's recursive code sees it.
Construction is PyYAML's safe constructor (YAML 1.1 scalars, merge keys).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from firstgate.common.dsl import QUOTE_LIMIT, shown
from firstgate.common.nesting import MAX_DEPTH
from firstgate.common.problems import DslError, Problem, SourcePlace
from yaml.nodes import ScalarNode

# Dify refuses DSL files over 10 MB before parsing them; so do we, for every YAML file.
MAX_BYTES = 10 * 1024 * 1024
# How much aliases may add, in the unit of `_size`: about 1 MB of written-out YAML.
MAX_ALIAS_GROWTH = 1_000_000
# How much of a key or detail a message quotes.
QUOTE_CHARS = 80

_MERGE_TAG = "tag:yaml.org,2002:merge"

try:  # PyYAML built with libyaml
    from yaml import CSafeLoader as _FastLoader
except ImportError:  # pragma: no cover - depends on how PyYAML was built
    _FastLoader = None  # type: ignore[assignment,misc]

LOADERS: tuple[type[Any], ...] = tuple(x for x in (_FastLoader, yaml.SafeLoader) if x is not None)


class YamlProblem(Exception):
    """A problem found while reading; `where` is (line, column), both from 1."""

    def __init__(self, message_key: str, where: tuple[int, int], /, **params: Any) -> None:
        super().__init__(message_key)
        self.message_key = message_key
        self.where = where
        self.params = params


class Places:
    """Where the mappings that are items of a sequence begin (a workflow's nodes and
    edges): filled while reading when passed to `read_yaml`. Looked up by identity,
    so it answers only while the document it was filled from is alive."""

    __slots__ = ("path", "_starts")

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._starts: dict[int, tuple[int, int]] = {}

    def of(self, value: Any) -> SourcePlace | None:
        start = self._starts.get(id(value))
        return None if start is None else SourcePlace(self.path, *start)


def read_yaml(source: str | Path, *, places: Places | None = None) -> Any:
    """The document in a YAML file (None when empty). Raises DslError naming the file."""
    path = Path(source)
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise DslError([Problem("dsl.file.missing", {"path": str(path)})], source=path) from None
    except IsADirectoryError:
        raise DslError([Problem("dsl.file.notFile", {"path": str(path)})], source=path) from None
    except OSError as exc:
        detail = shown(exc.strerror or str(exc), QUOTE_CHARS)
        raise DslError(
            [Problem("dsl.file.unreadable", {"path": str(path), "detail": detail})], source=path
        ) from None
    return parse_yaml(raw, path, places=places)


def read_yaml_mapping(
    source: str | Path,
    *,
    empty: dict[str, Any] | None = None,
    not_mapping: str = "dsl.file.notMapping",
    places: Places | None = None,
) -> dict[str, Any]:
    """`read_yaml` for files whose top level must be a mapping.

    An empty file gives `empty` when given (e.g. `{}` for an optional settings
    file), else it is refused like any other non-mapping document, with the
    message `not_mapping` (which says what the file should have been).
    """
    document = read_yaml(source, places=places)
    if document is None and empty is not None:
        return dict(empty)
    if not isinstance(document, dict):
        raise DslError([Problem(not_mapping, {"path": str(source)})], source=source)
    return document


def parse_yaml(
    raw: bytes | str,
    source: str | Path,
    *,
    loader: type[Any] | None = None,
    places: Places | None = None,
) -> Any:
    """The document in `raw` (bytes are decoded as UTF-8), with every check above.

    `source` names the document in messages; `loader` picks a PyYAML loader
    class from `LOADERS` (default: the fastest); `places`, when given, is filled
    with where the document's sequence items that are mappings begin.
    """
    path = str(source)
    if len(raw) > MAX_BYTES:
        problem = Problem("dsl.file.tooLarge", {"path": path, "limit": MAX_BYTES})
        raise DslError([problem], source=source)
    text = ""
    try:
        text = _decode(raw) if isinstance(raw, bytes) else raw.removeprefix("\ufeff")
        return _load(text, loader or LOADERS[0], places)
    except YamlProblem as exc:
        line, column = exc.where
        problem = Problem(exc.message_key, exc.params, place=SourcePlace(path, line, column))
        raise DslError([problem], source=source) from None
    except yaml.YAMLError as exc:
        line, column, detail = _syntax_error(exc, text)
        problem = Problem(
            "dsl.file.yaml", {"detail": detail}, place=SourcePlace(path, line, column)
        )
        raise DslError([problem], source=source) from None


# --- decoding -----------------------------------------------------------------


def _decode(raw: bytes) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        offset = exc.start
        line_start = raw.rfind(b"\n", 0, offset) + 1
        column = len(raw[line_start:offset].decode("utf-8", errors="replace")) + 1
        where = (raw.count(b"\n", 0, offset) + 1, column)
        raise YamlProblem(
            "dsl.file.encoding", where, byte=f"0x{raw[offset]:02x}", offset=offset
        ) from None


def _syntax_error(error: yaml.YAMLError, text: str) -> tuple[int, int, str]:
    """Line, column and a bounded English detail of a parser's error."""
    if isinstance(error, yaml.reader.ReaderError):  # a character YAML does not allow
        before = text[: error.position]
        line = before.count("\n") + 1
        column = error.position - (before.rfind("\n") + 1) + 1
        character = error.character
        code = ord(character) if isinstance(character, str) else int(character)
        return line, column, _bounded(f"character #x{code:04x}: {error.reason}")
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    line, column = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
    detail = getattr(error, "problem", None) or type(error).__name__
    context = getattr(error, "context", None)
    if context:
        detail = f"{detail} ({context})"
    return line, column, _bounded(detail)


def _bounded(text: str) -> str:
    return text if len(text) <= QUOTE_LIMIT else text[:QUOTE_LIMIT] + "…"


# --- building the document from events, with bounds -------------------------------

_STR_TAG = "tag:yaml.org,2002:str"
_SEQ_TAGS = (None, "!", "tag:yaml.org,2002:seq")
_MAP_TAGS = (None, "!", "tag:yaml.org,2002:map")
_PLAIN = (True, False)
# Plain scalars repeat a lot in exports (false, custom, source, 244...): their
# resolved values are immutable, so each distinct text is resolved once.
_CACHE_ENTRIES = 4096


@dataclass(slots=True)
class _Open:
    """A collection being built."""

    value: list[Any] | dict[Any, Any]
    anchor: str | None
    size_at_start: int  # the expanded size before this collection began
    height: int = 0  # the tallest child so far
    # Mappings only: keys seen (-> their line), the key waiting for its value,
    # and what `<<` merge keys bring in (lower priority than the mapping's own keys).
    keys: dict[Any, int] = field(default_factory=dict)
    key: Any = None
    expect_key: bool = True
    merge_next: bool = False
    merged: dict[Any, Any] | None = None


@dataclass(slots=True)
class _Anchored:
    value: Any
    size: int  # expanded
    height: int
    open: bool  # still being built: an alias to it would be recursive


class _Builder:
    """Builds Python objects from parser events without recursion, checking the
    bounds on the way: nothing is expanded before the limits are known to hold.

    Aliases share the object they refer to (as PyYAML's loaders do).
    """

    def __init__(self, loader: Any, places: Places | None = None) -> None:
        self.loader = loader
        # Where a mapping inside a sequence begins, by the mapping's identity.
        self.starts = None if places is None else places._starts
        self.stack: list[_Open] = []
        self.anchors: dict[str, _Anchored] = {}
        self.plain: dict[str, Any] = {}
        self.expanded = 0  # the document's size with every alias written out
        self.written = 0  # the same without expanding aliases

    def build(self) -> Any:
        get_event: Callable[[], Any] = self.loader.get_event
        get_event()  # StreamStart
        if isinstance(get_event(), yaml.StreamEndEvent):
            return None
        root: Any = None
        while True:
            event = get_event()
            if isinstance(event, yaml.DocumentEndEvent):
                break
            done, value = self._step(event)
            if done:
                root = value
        following = get_event()
        if not isinstance(following, yaml.StreamEndEvent):
            raise yaml.composer.ComposerError(
                None, None, "found a second document; a file holds one", following.start_mark
            )
        return root

    def _step(self, event: Any) -> tuple[bool, Any]:
        """Handles one event; (True, root) once the root value is complete."""
        kind = type(event)
        if kind is yaml.ScalarEvent:
            size = 1 + len(event.value)
            self._grow(size, event.start_mark, written=True)
            value = self._scalar(event)
            if event.anchor is not None:
                self.anchors[event.anchor] = _Anchored(value, size, 0, open=False)
            return self._add(value, 0, event.start_mark, is_scalar=True)
        if kind is yaml.AliasEvent:
            target = self.anchors.get(event.anchor)
            if target is None:
                raise YamlProblem(
                    "dsl.file.undefinedAlias", _where(event.start_mark), anchor=_q(event.anchor)
                )
            if target.open:
                raise YamlProblem(
                    "dsl.file.recursiveAlias", _where(event.start_mark), anchor=_q(event.anchor)
                )
            self.written += 1
            self._grow(target.size, event.start_mark, written=False)
            return self._add(target.value, target.height, event.start_mark, is_scalar=True)
        if kind is yaml.SequenceStartEvent or kind is yaml.MappingStartEvent:
            return self._open(event, kind is yaml.MappingStartEvent)
        if kind is yaml.SequenceEndEvent or kind is yaml.MappingEndEvent:
            closed = self.stack.pop()
            if closed.merged:  # the mapping's own keys win over merged ones
                assert isinstance(closed.value, dict)
                own = dict(closed.value)
                closed.value.clear()
                closed.value.update(closed.merged)
                closed.value.update(own)
            height = closed.height + 1
            if closed.anchor is not None:
                anchored = self.anchors[closed.anchor]
                anchored.size = self.expanded - closed.size_at_start
                anchored.height = height
                anchored.open = False
            return self._add(closed.value, height, event.end_mark, is_scalar=False)
        raise yaml.composer.ComposerError(None, None, f"unexpected {kind.__name__}", None)

    def _scalar(self, event: Any) -> Any:
        tag = event.tag
        if tag is None or tag == "!":
            if event.implicit[0]:  # plain: resolved by its text
                value = self.plain.get(event.value, self)
                if value is self:
                    value = self._construct(
                        self.loader.resolve(ScalarNode, event.value, _PLAIN), event
                    )
                    if len(self.plain) < _CACHE_ENTRIES:
                        self.plain[event.value] = value
                return value
            return event.value  # quoted: text
        if tag == _STR_TAG:
            return event.value
        return self._construct(tag, event)

    def _construct(self, tag: str, event: Any) -> Any:
        if tag == _STR_TAG:
            return event.value
        if tag == _MERGE_TAG:
            return _MERGE
        node = ScalarNode(tag, event.value, event.start_mark, event.end_mark, style=event.style)
        return self.loader.construct_object(node)

    def _open(self, event: Any, is_map: bool) -> tuple[bool, Any]:
        if len(self.stack) >= MAX_DEPTH:
            raise YamlProblem("dsl.file.tooDeep", _where(event.start_mark), limit=MAX_DEPTH)
        if event.tag not in (_MAP_TAGS if is_map else _SEQ_TAGS):
            # !!set, !!omap, !!pairs and custom tags: never written by the editor.
            raise YamlProblem("dsl.file.tag", _where(event.start_mark), tag=_q(event.tag))
        self._grow(1, event.start_mark, written=True)
        value: list[Any] | dict[Any, Any] = {} if is_map else []
        if self.starts is not None and is_map and self.stack and type(self.stack[-1].value) is list:
            self.starts[id(value)] = _where(event.start_mark)
        self.stack.append(_Open(value, event.anchor, self.expanded - 1))
        if event.anchor is not None:
            self.anchors[event.anchor] = _Anchored(value, 0, 0, open=True)
        return False, None

    def _grow(self, size: int, mark: Any, *, written: bool) -> None:
        self.expanded += size
        if written:
            self.written += size
        elif self.expanded - self.written > MAX_ALIAS_GROWTH:
            raise YamlProblem("dsl.file.tooExpanded", _where(mark), limit=MAX_ALIAS_GROWTH)

    def _add(self, value: Any, height: int, mark: Any, *, is_scalar: bool) -> tuple[bool, Any]:
        """Puts a finished value into its parent; the root is returned."""
        if not self.stack:
            return True, value
        parent = self.stack[-1]
        if height and len(self.stack) + height > MAX_DEPTH:  # an alias brings its depth along
            raise YamlProblem("dsl.file.tooDeep", _where(mark), limit=MAX_DEPTH)
        if height > parent.height:
            parent.height = height
        container = parent.value
        if type(container) is list:
            container.append(value)
        elif parent.expect_key:
            self._key(parent, value, mark)
        else:
            parent.expect_key = True
            if parent.merge_next:
                parent.merge_next = False
                self._merge(parent, value, mark)
            else:
                container[parent.key] = value
        return False, None

    def _key(self, parent: _Open, key: Any, mark: Any) -> None:
        parent.expect_key = False
        try:
            first = parent.keys.get(key)
        except TypeError:  # a list or mapping as a key
            raise YamlProblem("dsl.file.unhashableKey", _where(mark)) from None
        if first is not None:
            raise YamlProblem("dsl.file.duplicateKey", _where(mark), key=_q(key), first=first)
        parent.keys[key] = mark.line + 1
        if key is _MERGE:
            parent.merged = {}
            parent.merge_next = True
        else:
            parent.key = key

    def _merge(self, parent: _Open, value: Any, mark: Any) -> None:
        # `<<: *a` or `<<: [*a, *b]`: the mapping's own keys win, then earlier
        # mappings in the list over later ones (the merge-key spec; PyYAML 6.0.4 agrees).
        sources = value if isinstance(value, list) else [value]
        if not all(isinstance(source, dict) for source in sources):
            raise YamlProblem("dsl.file.badMerge", _where(mark))
        assert parent.merged is not None
        for source in sources:
            for key, item in source.items():
                parent.merged.setdefault(key, item)


class _MergeKey:
    """The value a plain `<<` key resolves to."""

    def __repr__(self) -> str:
        return "<<"


_MERGE = _MergeKey()


def _where(mark: Any) -> tuple[int, int]:
    return (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)


def _q(value: Any) -> str:
    return shown(value, QUOTE_CHARS)


def _load(text: str, loader_class: type[Any], places: Places | None = None) -> Any:
    loader = loader_class(text)
    try:
        return _Builder(loader, places).build()
    except RecursionError:  # a safety net: the depth bound should make this unreachable
        raise YamlProblem("dsl.file.tooDeep", (1, 1), limit=MAX_DEPTH) from None
    finally:
        loader.dispose()
