"""Files through the API: `POST /v1/files/upload` keeps a file, a run's file
input refers to it by `upload_file_id`.

An upload is checked against what the app takes (the file inputs of its start
node and `features.file_upload`): a type no input takes is Dify's 415
`unsupported_file_type`, a file over the largest limit an input allows for its
type is 413 `file_too_large`. It is written to a temporary name, then renamed
and recorded, so nothing is half-written. A run's file inputs accept only
Dify's file objects (`local_file` with an `upload_file_id` of this app, or
`remote_url`), never a path on the server.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

from firstgate.common import files
from firstgate.common.files import (
    File,
    FileError,
    FileRules,
    FileType,
    TransferMethod,
    file_type_for,
)
from firstgate.nodes import human_input, trigger_webhook
from firstgate.serve.apps import App
from firstgate.serve.errors import ApiError, invalid_param
from firstgate.store.base import Store, UploadRecord

FILE_INPUT_TYPES = ("file", "file-list")
_CHUNK = 64 * 1024
_NAME_CHARS = 200


def upload_rules(app: App) -> list[FileRules]:
    """Every rule under which the app takes a file."""
    config = app.workflow.upload_config
    rules = [
        spec.file_rules(config)
        for spec in app.workflow.input_variables
        if spec.type in FILE_INPUT_TYPES
    ]
    if app.workflow.file_upload.enabled:
        rules.append(app.workflow.file_upload.rules)
    for node in app.workflow.graph.all_nodes.values():
        if isinstance(node.data, human_input.Data):  # a form's file inputs take uploads too
            rules.extend(human_input.upload_rules(node.data, config))
    return rules


def size_limit(app: App, kind: FileType) -> int | None:
    """The largest size any of the app's inputs takes for this type; None: no input takes it."""
    limits = [
        rule.size_limits[kind]
        for rule in upload_rules(app)
        if not rule.types or kind in rule.types or FileType.CUSTOM in rule.types
    ]
    return max(limits) if limits else None


def largest_limit(app: App) -> int:
    return max((max(r.size_limits.values()) for r in upload_rules(app)), default=0)


def safe_name(raw: str) -> str:
    """The client's file name as a plain name: no directories, no control characters."""
    name = raw.replace("\\", "/").rsplit("/", 1)[-1]
    name = re.sub(r"[\x00-\x1f\x7f]", "", name).strip().lstrip(".")
    if len(name) > _NAME_CHARS:
        stem, dot, extension = name.rpartition(".")
        name = (
            (stem[: _NAME_CHARS - len(extension) - 1] + dot + extension)
            if dot
            else name[:_NAME_CHARS]
        )
    return name


def save_upload(
    app: App, user: str, filename: str, stream: IO[bytes], *, directory: Path, store: Store
) -> UploadRecord:
    name = safe_name(filename)
    if not name:
        raise ApiError(400, "filename_not_exists_error", "serve.error.noFileName")
    extension, mime_type = files.name_facts(name)
    kind = file_type_for(extension, mime_type)
    limit = size_limit(app, kind)
    if limit is None:
        raise ApiError(415, "unsupported_file_type", "serve.error.fileType", type=kind.value)

    def write(partial: Path) -> int:
        size = _copy_capped(stream, partial, limit)
        if size is None:
            raise ApiError(
                413, "file_too_large", "serve.error.fileTooLarge", type=kind.value, max=limit
            )
        return size

    return _keep(app, user, name, write, directory=directory, store=store)


def store_bytes(
    app: App, user: str, filename: str, data: bytes, *, directory: Path, store: Store
) -> UploadRecord:
    """Bytes a trigger's request carried (a webhook's files), kept as an upload of
    the app: bounded by the webhook's body limit, not by the app's upload rules."""
    name = safe_name(filename) or "upload.bin"
    return _keep(
        app, user, name, lambda partial: partial.write_bytes(data), directory=directory, store=store
    )


def _keep(
    app: App,
    user: str,
    name: str,
    write: Callable[[Path], int],
    *,
    directory: Path,
    store: Store,
) -> UploadRecord:
    """An upload's folder and record: `write` fills the partial file and says its
    size; the file is renamed into place and recorded, or the folder is removed."""
    extension, mime_type = files.name_facts(name)
    upload_id = str(uuid.uuid4())
    folder = directory / upload_id
    folder.mkdir(parents=True)
    try:
        partial = folder / ".partial"
        size = write(partial)
        final = folder / name
        os.replace(partial, final)
        record = UploadRecord(
            id=upload_id,
            app_id=app.workflow.app_id,
            user_id=user,
            name=name,
            size=size,
            extension=extension.lstrip("."),
            mime_type=mime_type,
            path=str(final),
            created_at=time.time(),
        )
        store.add_upload(record)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return record


def local_file(record: UploadRecord) -> dict[str, Any]:
    """Dify's file object of an upload, as a request names it."""
    kind = file_type_for("." + record.extension if record.extension else "", record.mime_type)
    return {"type": kind.value, "transfer_method": "local_file", "upload_file_id": record.id}


def _copy_capped(stream: IO[bytes], target: Path, limit: int) -> int | None:
    """Copy at most `limit` bytes; None when the stream holds more."""
    size = 0
    with target.open("wb") as out:
        while True:
            chunk = stream.read(_CHUNK)
            if not chunk:
                return size
            size += len(chunk)
            if size > limit:
                return None
            out.write(chunk)


Linker = Callable[[str], str]  # an upload id -> the link a client may fetch it from


def resolve_file(value: Any, where: str, app: App, store: Store, link: Linker) -> File:
    """A Dify file object from a request as a File the runtime reads."""
    if not isinstance(value, Mapping):
        raise invalid_param("serve.error.fileObject", input=where)
    method = value.get("transfer_method")
    if method == TransferMethod.REMOTE_URL:
        try:
            return files.from_remote_url(str(value.get("url") or ""))
        except FileError as exc:
            raise invalid_param("serve.error.fileInput", input=where, error=exc.render()) from None
    if method == TransferMethod.LOCAL_FILE:
        upload_id = value.get("upload_file_id")
        record = store.upload(str(upload_id)) if isinstance(upload_id, str) else None
        if record is None or record.app_id != app.workflow.app_id:
            raise invalid_param("serve.error.uploadUnknown", input=where, id=str(upload_id))
        try:
            found = files.from_path(record.path, related_id=record.id)
        except FileError as exc:
            raise invalid_param("serve.error.fileInput", input=where, error=exc.render()) from None
        return dataclasses.replace(found, link=link(record.id))
    raise invalid_param("serve.error.fileObject", input=where)


def resolve_inputs(
    inputs: Mapping[str, Any], app: App, store: Store, link: Linker
) -> dict[str, Any]:
    """The body's inputs with every file input resolved (others are left to the start node)."""
    kinds = {spec.variable: spec.type for spec in app.workflow.input_variables}
    resolved = dict(inputs)
    for name, value in inputs.items():
        kind = kinds.get(name)
        if kind not in FILE_INPUT_TYPES or value in (None, "", []):
            continue
        if kind == "file-list":
            items = value if isinstance(value, list) else [value]
            resolved[name] = [resolve_file(v, name, app, store, link) for v in items]
        else:
            resolved[name] = resolve_file(value, name, app, store, link)
    return resolved


def resolve_webhook_files(
    inputs: Mapping[str, Any], app: App, root: str, store: Store, link: Linker
) -> dict[str, Any]:
    """A webhook run's inputs with the files its request carried (saved by
    `serve/webhooks.py` as the app's uploads) as Files: the multipart file
    fields, and an `application/octet-stream` body. Only those places: a JSON
    body naming an upload is text, never a file."""
    node = app.workflow.graph.nodes.get(root)
    data = node.data if node is not None else None
    request = inputs.get("webhook_data")
    if not isinstance(data, trigger_webhook.Data) or not isinstance(request, Mapping):
        return dict(inputs)
    resolved = dict(request)
    carried = request.get("files")
    if isinstance(carried, Mapping):
        resolved["files"] = {
            str(name): resolve_file(value, f"files.{name}", app, store, link)
            for name, value in carried.items()
        }
    body = request.get("body")
    if data.content_type == "application/octet-stream" and isinstance(body, Mapping):
        raw = body.get("raw")
        if raw is not None:
            resolved["body"] = {**body, "raw": resolve_file(raw, "body", app, store, link)}
    return {**inputs, "webhook_data": resolved}


def resolve_files(items: list[Any] | None, app: App, store: Store, link: Linker) -> list[File]:
    return [resolve_file(v, "files", app, store, link) for v in items or []]
