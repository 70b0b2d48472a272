"""ApiError: an error answered in OpenAI's JSON shape, with its HTTP status."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An error answered in OpenAI's JSON shape: {"error": {message, type, param, code}}."""

    def __init__(
        self,
        status: int,
        message: str,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        extra: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.extra = extra or {}
        self.headers = headers or {}
        self.recorded = False  # already counted in the metrics and the decision log

    def body(self) -> dict[str, Any]:
        error = {"message": self.message, "type": self.type, "param": self.param}
        error["code"] = self.code
        error.update(self.extra)
        return {"error": error}
