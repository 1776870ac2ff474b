"""Dify's file object: what a file input, a chat upload (`sys.files`) or a
node's file output is, and the rules that decide whether a file is accepted.

A `File` is metadata plus where its bytes are: a local path (uploads and
files a node produced) or a remote URL. Node types that read files (document
extractor, http-request bodies, code) take the bytes through `read_bytes`,
which never reads past a cap. `to_dict()` is Dify's wire shape of a file,
field for field; the local path is never part of it.
"""

from __future__ import annotations

import mimetypes
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import unquote, urlparse

from firstgate.locales.localized_error import LocalizedError

# Dify marks serialized files with this so that a file can be told from an
# object that merely has the same keys.
FILE_MODEL_IDENTITY = "__dify__file__"


class FileType(StrEnum):
    IMAGE = "image"
    DOCUMENT = "document"
    AUDIO = "audio"
    VIDEO = "video"
    CUSTOM = "custom"


class TransferMethod(StrEnum):
    REMOTE_URL = "remote_url"
    LOCAL_FILE = "local_file"
    TOOL_FILE = "tool_file"


# Dify's extension lists (without the dot), which decide a file's type.
_EXTENSIONS: dict[FileType, frozenset[str]] = {
    FileType.IMAGE: frozenset({"jpg", "jpeg", "png", "webp", "gif", "svg"}),
    FileType.VIDEO: frozenset({"mp4", "mov", "mpeg", "webm"}),
    FileType.AUDIO: frozenset({"mp3", "m4a", "wav", "amr", "mpga"}),
    FileType.DOCUMENT: frozenset(
        {
            "txt", "markdown", "md", "mdx", "pdf", "html", "htm", "xlsx", "xls", "vtt",
            "properties", "doc", "docx", "csv", "eml", "msg", "pptx", "xml", "epub", "ppt",
        }
    ),
}  # fmt: skip

MB = 1024 * 1024
# Dify's default upload limits per file type (UPLOAD_*_FILE_SIZE_LIMIT), in
# bytes; an app's `features.file_upload.fileUploadConfig` may set its own.
DEFAULT_SIZE_LIMITS: dict[FileType, int] = {
    FileType.IMAGE: 10 * MB,
    FileType.DOCUMENT: 15 * MB,
    FileType.AUDIO: 50 * MB,
    FileType.VIDEO: 100 * MB,
    FileType.CUSTOM: 15 * MB,
}
# The editor's names for those limits, in megabytes.
_CONFIG_LIMIT_KEYS = {
    FileType.IMAGE: "image_file_size_limit",
    FileType.DOCUMENT: "file_size_limit",
    FileType.AUDIO: "audio_file_size_limit",
    FileType.VIDEO: "video_file_size_limit",
    FileType.CUSTOM: "file_size_limit",
}


class FileError(LocalizedError):
    """A file cannot be used: missing, unreadable, too large or not allowed.

    The floor's own error: a node that meets it fails the way it fails on a
    `NodeRunError` (the error handler retries and applies the strategy to any
    exception; events name it by its class)."""


def file_type_for(extension: str, mime_type: str = "") -> FileType:
    """Dify's rule: the extension decides; the MIME type only when the extension is unknown."""
    ext = extension.lower().lstrip(".")
    for kind, names in _EXTENSIONS.items():
        if ext in names:
            return kind
    major = mime_type.split("/", 1)[0]
    if major in ("image", "audio", "video"):
        return FileType(major)
    if mime_type.startswith("text/") or mime_type in ("application/pdf", "application/json"):
        return FileType.DOCUMENT
    return FileType.CUSTOM


def _extension(name: str) -> str:
    suffix = PurePosixPath(name).suffix.lower()
    return suffix if len(suffix) > 1 else ""


def _mime(name: str) -> str:
    return mimetypes.guess_type(name, strict=False)[0] or "application/octet-stream"


@dataclass(frozen=True, slots=True)
class File:
    type: FileType
    transfer_method: TransferMethod
    filename: str
    extension: str  # with the dot, lower case (".pdf"); "" when the name has none
    mime_type: str
    size: int  # bytes; -1 when unknown (a remote file not fetched)
    id: str = field(default_factory=lambda: str(uuid.uuid4()))
    related_id: str | None = None  # the stored upload's id (local and tool files)
    remote_url: str | None = None
    path: Path | None = field(default=None, repr=False, compare=False)
    # Where a client can fetch a local file (a server's signed link); without
    # one, the file's own `file://` URI (the CLI's case).
    link: str | None = field(default=None, repr=False, compare=False)

    @property
    def url(self) -> str | None:
        if self.remote_url:
            return self.remote_url
        if self.link:
            return self.link
        return self.path.resolve().as_uri() if self.path is not None else None

    @property
    def markdown(self) -> str:
        """How Dify renders a file inside an answer."""
        url = self.url or ""
        if self.type is FileType.IMAGE:
            return f"![{self.filename}]({url})"
        return f"[{self.filename or url}]({url})"

    def to_dict(self) -> dict[str, Any]:
        """Dify's serialized file."""
        return {
            "dify_model_identity": FILE_MODEL_IDENTITY,
            "id": self.id,
            "tenant_id": None,
            "type": self.type.value,
            "transfer_method": self.transfer_method.value,
            "remote_url": self.remote_url,
            "related_id": self.related_id,
            "filename": self.filename,
            "extension": self.extension,
            "mime_type": self.mime_type,
            "size": self.size,
            "url": self.url,
        }

    def attribute(self, name: str) -> Any:
        """A file attribute as Dify's selectors and conditions name them
        (`{{#start.doc.name#}}`); None for a name Dify does not have."""
        values: dict[str, Any] = {
            "type": self.type.value,
            "size": self.size,
            "name": self.filename,
            "mime_type": self.mime_type,
            "transfer_method": self.transfer_method.value,
            "url": self.url,
            "extension": self.extension,
            "related_id": self.related_id,
        }
        return values.get(name)

    def read_bytes(self, limit: int) -> bytes:
        """The file's content, refusing more than `limit` bytes (local files only)."""
        if self.path is None:
            raise FileError(
                "errors.file.notLocal",
                name=self.filename,
            )
        try:
            with self.path.open("rb") as handle:
                data = handle.read(limit + 1)
        except OSError as exc:
            raise _unreadable(self.path, exc) from None
        if len(data) > limit:
            raise too_large(self.filename, len(data), limit)
        return data


def _unreadable(path: Path, exc: OSError) -> FileError:
    return FileError(
        "errors.file.unreadable",
        path=str(path),
        detail=str(exc.strerror or exc),
    )


def too_large(name: str, size: int, limit: int) -> FileError:
    return FileError(
        "errors.file.tooLarge",
        name=name,
        size=size,
        limit=limit,
    )


def from_path(path: str | Path, *, related_id: str | None = None) -> File:
    """A local file as Dify's `local_file` upload; the file must exist and be readable."""
    source = Path(path).expanduser()
    try:
        if not source.is_file():
            raise FileError("errors.file.missing", path=str(source)) from None
        size = source.stat().st_size
        with source.open("rb"):
            pass  # readable now, not only listed
    except OSError as exc:
        raise _unreadable(source, exc) from None
    name = source.name
    extension = _extension(name)
    mime_type = _mime(name)
    return File(
        type=file_type_for(extension, mime_type),
        transfer_method=TransferMethod.LOCAL_FILE,
        filename=name,
        extension=extension,
        mime_type=mime_type,
        size=size,
        related_id=related_id or str(uuid.uuid4()),
        path=source,
    )


def from_remote_url(url: str) -> File:
    """A remote file as Dify's `remote_url` input; it is not fetched here."""
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise FileError("errors.file.badUrl", url=url)
    name = unquote(PurePosixPath(parsed.path).name) or parsed.netloc
    extension = _extension(name)
    mime_type = _mime(name)
    return File(
        type=file_type_for(extension, mime_type),
        transfer_method=TransferMethod.REMOTE_URL,
        filename=name,
        extension=extension,
        mime_type=mime_type,
        size=-1,
        remote_url=url,
    )


def from_reference(value: str) -> File:
    """`@path/to/file` or `@https://host/file` (the CLI's spelling) as a file."""
    target = value[1:] if value.startswith("@") else value
    if target.startswith(("http://", "https://")):
        return from_remote_url(target)
    return from_path(target)


def from_mapping(value: Mapping[str, Any]) -> File:
    """A file as Dify's API passes one: `{transfer_method: remote_url, url}`, or a
    serialized file (`to_dict()` output) of a local file with its `path`."""
    method = str(value.get("transfer_method", ""))
    if method == TransferMethod.REMOTE_URL:
        url = value.get("url") or value.get("remote_url")
        return from_remote_url(str(url or ""))
    path = value.get("path")
    if method in (TransferMethod.LOCAL_FILE, TransferMethod.TOOL_FILE) and path:
        found = from_path(str(path), related_id=value.get("related_id"))
        return found if method == TransferMethod.LOCAL_FILE else _as_tool_file(found)
    raise FileError(
        "errors.file.badObject",
    )


def _as_tool_file(found: File) -> File:
    return File(
        type=found.type,
        transfer_method=TransferMethod.TOOL_FILE,
        filename=found.filename,
        extension=found.extension,
        mime_type=found.mime_type,
        size=found.size,
        id=found.id,
        related_id=found.related_id,
        path=found.path,
    )


@dataclass(frozen=True, slots=True)
class FileRules:
    """What an input accepts: Dify's `allowed_file_types`, `allowed_file_extensions`
    (for the `custom` type) and `allowed_file_upload_methods`, plus size limits."""

    types: frozenset[FileType] = frozenset()  # empty: every type
    extensions: frozenset[str] = frozenset()  # lower case, with the dot
    methods: frozenset[TransferMethod] = frozenset()  # empty: every method
    size_limits: Mapping[FileType, int] = field(default_factory=lambda: dict(DEFAULT_SIZE_LIMITS))

    @classmethod
    def from_config(
        cls,
        types: Iterable[str] = (),
        extensions: Iterable[str] = (),
        methods: Iterable[str] = (),
        upload_config: Mapping[str, Any] | None = None,
    ) -> FileRules:
        limits = dict(DEFAULT_SIZE_LIMITS)
        for kind, key in _CONFIG_LIMIT_KEYS.items():
            megabytes = (upload_config or {}).get(key)
            if isinstance(megabytes, int | float) and not isinstance(megabytes, bool):
                if megabytes > 0:
                    limits[kind] = int(megabytes * MB)
        return cls(
            types=frozenset(FileType(t) for t in types if t in FileType._value2member_map_),
            extensions=frozenset(_dotted(e) for e in extensions if str(e).strip()),
            methods=frozenset(
                TransferMethod(m) for m in methods if m in TransferMethod._value2member_map_
            ),
            size_limits=limits,
        )

    def check(self, file: File) -> None:
        """Raise FileError when the file is not accepted."""
        allowed = self.types
        if allowed and (file.type not in allowed or file.type is FileType.CUSTOM):
            # A type outside the list passes as `custom` when the input takes
            # custom files with that extension (Dify's rule).
            custom_ok = FileType.CUSTOM in allowed and (
                not self.extensions or file.extension in self.extensions
            )
            if not custom_ok:
                raise FileError(
                    "errors.file.typeNotAllowed",
                    name=file.filename,
                    type=file.type.value,
                    allowed=", ".join(sorted(t.value for t in allowed)),
                )
        if self.methods and file.transfer_method not in self.methods:
            raise FileError(
                "errors.file.methodNotAllowed",
                name=file.filename,
                method=file.transfer_method.value,
            )
        limit = self.size_limits.get(file.type, DEFAULT_SIZE_LIMITS[file.type])
        if file.size > limit:
            raise too_large(file.filename, file.size, limit)


def _dotted(extension: Any) -> str:
    text = str(extension).strip().lower()
    return text if text.startswith(".") else f".{text}"


def is_file_mapping(value: Any) -> bool:
    return isinstance(value, Mapping) and value.get("dify_model_identity") == FILE_MODEL_IDENTITY


def from_bytes(
    data: bytes, *, mime_type: str, directory: Path, filename: str | None = None
) -> File:
    """A file a node produced (a tool's blob, a binary HTTP response), written
    into `directory` under a fresh name and returned as Dify's `tool_file`.

    The bytes land in a temporary name first and are renamed into place, so a
    reader never sees half a file.
    """
    mime = (mime_type or "").split(";", 1)[0].strip().lower() or "application/octet-stream"
    extension = _extension(filename or "") or (mimetypes.guess_extension(mime, strict=False) or "")
    file_id = uuid.uuid4().hex
    target = directory / f"{file_id}{extension}"
    partial = directory / f".{file_id}.part"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        partial.write_bytes(data)
        partial.replace(target)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise FileError(
            "errors.file.unwritable", path=str(target), detail=str(exc.strerror or exc)
        ) from None
    return File(
        type=file_type_for(extension, mime),
        transfer_method=TransferMethod.TOOL_FILE,
        filename=filename or target.name,
        extension=extension,
        mime_type=mime,
        size=len(data),
        related_id=file_id,
        path=target,
    )


def name_facts(name: str) -> tuple[str, str]:
    """A file name's extension (with the dot, lower case) and MIME type, as a
    file input derives them (an upload is classified by the same rule)."""
    return _extension(name), _mime(name)
