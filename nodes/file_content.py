"""The bytes of a file variable, wherever they live: local and tool files from
disk, remote files through the guarded HTTP client (the network policy and
the size caps of an http-request node apply, as to any URL a workflow
supplies). Never more than `limit` bytes are kept.
"""

from __future__ import annotations

from firstgate.common.files import File, FileError, TransferMethod, too_large
from firstgate.connectors.guarded_http import RequestSpec
from firstgate.nodes.base import NodeContext


def read(file: File, ctx: NodeContext, limit: int) -> bytes:
    if file.transfer_method is not TransferMethod.REMOTE_URL or file.path is not None:
        return file.read_bytes(limit)
    if ctx.connectors is None or not file.remote_url:
        raise FileError("errors.file.fetch", name=file.filename, detail="no URL")
    reply = ctx.connectors.http.request(RequestSpec("get", file.remote_url), cancel=ctx.cancel)
    if not reply.is_success:
        raise FileError(
            "errors.file.fetch", name=file.filename, detail=f"status {reply.status_code}"
        )
    if len(reply.content) > limit:
        raise too_large(file.filename, len(reply.content), limit)
    return reply.content
