"""Reading a request's body within the server's --max-body-bytes, decompressed when it was
sent compressed (Content-Encoding: gzip or deflate)."""

from __future__ import annotations

import zlib

from fastapi import Request
from starlette.requests import ClientDisconnect

from .api_error import ApiError
from .stream import CLIENT_CLOSED_STATUS

# The Content-Encodings a body is read in, and the zlib window bits that decode each.
ZLIB_WINDOW_BITS = {
    "gzip": 16 + zlib.MAX_WBITS,
    "x-gzip": 16 + zlib.MAX_WBITS,
    "deflate": zlib.MAX_WBITS,
}


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 as soon as it is known to exceed the limit (as sent, and
    once decompressed)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdecimal() and int(declared) > limit:
        raise too_large(int(declared), limit)
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise too_large(None, limit)  # reading stopped here: the real size is unknown
            chunks.append(chunk)
    except ClientDisconnect as error:
        # The client's choice, not fugu-lite's fault: it was an "unexpected error" (a logged
        # traceback, and a 500 internal_error in the metrics).
        raise ApiError(
            CLIENT_CLOSED_STATUS,
            f"the client closed the connection after sending {size} bytes of its request body",
            code="client_disconnected",
        ) from error
    return decoded(b"".join(chunks), request.headers.get("content-encoding"), limit)


def decoded(body: bytes, encoding: str | None, limit: int) -> bytes:
    """The body as Content-Encoding says it was compressed, decompressed up to `limit` bytes
    (a small gzip body may hold gigabytes). Without this a gzip body was read as text and
    refused as "not UTF-8 text", which said nothing of the header."""
    name = (encoding or "").strip().lower()
    if name in ("", "identity"):
        return body
    if name not in ZLIB_WINDOW_BITS:
        raise ApiError(
            415,
            f"the request body's Content-Encoding is {encoding!r}, which this server does not "
            "read; send the body uncompressed, or compressed with gzip or deflate",
            code="unsupported_content_encoding",
        )
    inflater = zlib.decompressobj(ZLIB_WINDOW_BITS[name])
    try:
        text = inflater.decompress(body, limit + 1)
    except zlib.error as error:
        raise ApiError(
            400,
            f"the request body is not valid {name} data ({error}), though its "
            f"Content-Encoding says {name}; compress it with {name}, or drop the header",
            code="invalid_content_encoding",
        ) from error
    if len(text) > limit:
        raise too_large(None, limit, decompressed=True)
    if not inflater.eof:
        raise ApiError(
            400,
            f"the request body's {name} data is cut short (it ends before the compressed "
            "stream does); send the whole compressed body",
            code="invalid_content_encoding",
        )
    return text


def too_large(size: int | None, limit: int, decompressed: bool = False) -> ApiError:
    body = "the request body is" + (f" {size} bytes," if size is not None else "")
    after = " once decompressed" if decompressed else ""
    return ApiError(
        413,
        f"{body} more than this server accepts ({limit} bytes){after}; shorten the conversation, "
        "or start the server with a larger --max-body-bytes",
        code="request_too_large",
    )
