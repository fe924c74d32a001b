"""The Bot API's error answers, as the stand-in raises them from anywhere in a request."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """A Bot API error answer: ``{"ok": false, "error_code": …, "description": …}``."""

    def __init__(
        self, error_code: int, description: str, parameters: dict[str, Any] | None = None
    ) -> None:
        super().__init__(description)
        self.error_code = error_code
        self.description = description
        self.parameters = parameters

    def payload(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "ok": False,
            "error_code": self.error_code,
            "description": self.description,
        }
        if self.parameters:
            body["parameters"] = self.parameters
        return body


def bad_request(description: str) -> ApiError:
    return ApiError(400, f"Bad Request: {description}")


def too_many_requests(retry_after: int) -> ApiError:
    return ApiError(429, f"Too Many Requests: retry after {retry_after}",
                    {"retry_after": retry_after})
