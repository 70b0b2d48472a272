"""Reading a request's body within the server's --max-body-bytes."""

from __future__ import annotations

from fastapi import Request

from .api_error import ApiError


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 as soon as it is known to exceed the limit."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large(int(declared), limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large(None, limit)  # reading stopped here: the real size is unknown
        chunks.append(chunk)
    return b"".join(chunks)


def too_large(size: int | None, limit: int) -> ApiError:
    body = "the request body is" + (f" {size} bytes," if size is not None else "")
    return ApiError(
        413,
        f"{body} more than this server accepts ({limit} bytes); shorten the conversation, "
        "or start the server with a larger --max-body-bytes",
        code="request_too_large",
    )
