"""Typed errors rebuilt from the server's error body ``{code, kind, message, details?}``.

Every failed call raises a :class:`SandboxdError`; its subclass says what went wrong, one per
API error ``kind`` (the same names as the TypeScript SDK's ``errors.ts``). ``kind`` is also
``"connection"`` (no answer) or ``"timeout"`` (no answer in time) or ``"unknown"``.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Mapping, Optional, Type

__all__ = [
    "SandboxdError",
    "ValidationError",
    "AuthenticationError",
    "InsufficientTokensError",
    "ConcurrencyLimitError",
    "QuotaExceededError",
    "PermissionError",
    "NotFoundError",
    "TemplateNotFoundError",
    "ConflictError",
    "NoCodeInterpreterError",
    "PayloadTooLargeError",
    "RangeNotSatisfiableError",
    "RateLimitError",
    "BadRequestError",
    "ServerError",
    "UnsupportedError",
    "ServiceUnavailableError",
    "CapacityError",
    "InsufficientStorageError",
    "NoSpaceError",
    "UpstreamError",
    "ConnectionError",
    "RequestTimeoutError",
    "ERROR_STATUS",
    "error_from_response",
]


class SandboxdError(Exception):
    """Base of every error the SDK raises for a failed call."""

    #: HTTP status; 0 when no answer arrived (connection failure or timeout).
    status: int
    #: The ``code`` of the error body (the HTTP status number), or 0.
    code: int
    #: The error kind: a server kind (``validation``, ``not_found``, ...), ``connection``,
    #: ``timeout`` or ``unknown``.
    kind: str
    message: str
    #: The ``details`` of the error body, as sent.
    details: Any
    #: How long the server asked to wait before a retry (``Retry-After``), in ms, when it said.
    retry_after_ms: Optional[float]

    def __init__(
        self,
        message: str,
        *,
        status: int,
        code: Optional[int] = None,
        kind: str = "unknown",
        details: Any = None,
        retry_after_ms: Optional[float] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = status if code is None else code
        self.kind = kind
        self.details = details
        self.retry_after_ms = retry_after_ms

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}(status={self.status}, kind={self.kind!r}, message={self.message!r})"


class ValidationError(SandboxdError):
    """400: the request was malformed or failed validation; :attr:`problems` lists each field."""

    @property
    def problems(self) -> List[Dict[str, Any]]:
        """Each problem: ``{in, path, message, allowed?}``."""
        d = self.details
        return [p for p in d if isinstance(p, dict)] if isinstance(d, list) else []


class AuthenticationError(SandboxdError):
    """401: no, bad or revoked credentials."""


class InsufficientTokensError(SandboxdError):
    """402: not enough tokens for the requested lifetime."""


class ConcurrencyLimitError(SandboxdError):
    """403: the account's concurrency limit of started sandboxes is reached."""


class QuotaExceededError(SandboxdError):
    """403: another plan quota would be passed (``maxPaused``, ``snapshotBytes``); ``details['quota']`` names it."""


class PermissionError(SandboxdError):  # noqa: A001 - the API's name; shadows the builtin only inside this module
    """403: the sandbox's user may not do this to the file; ``details['path']`` names it."""


class NotFoundError(SandboxdError):
    """404: the resource does not exist (or belongs to another account)."""


class TemplateNotFoundError(NotFoundError):
    """404 on create: the image (template) does not exist; ``details['image']`` names it."""


class ConflictError(SandboxdError):
    """409: wrong state (e.g. the sandbox is stopped; ``details['state']``) or a conflicting resource."""


class NoCodeInterpreterError(ConflictError):
    """409: the sandbox serves no code interpreter; create it from ``details['image']`` (``local/code-interpreter``)."""


class PayloadTooLargeError(SandboxdError):
    """413: the request body is too large."""


class RangeNotSatisfiableError(SandboxdError):
    """416: the range of a download is outside the file."""


class RateLimitError(SandboxdError):
    """429: rate limited; :attr:`retry_after_ms` when the server said."""


class BadRequestError(SandboxdError):
    """408 or 431: the request took too long to arrive, or its headers were too large."""


class ServerError(SandboxdError):
    """5xx: the server failed; the message leaks no internals."""


class UnsupportedError(SandboxdError):
    """501: the server does not support this operation or feature (yet); the message names it."""


class ServiceUnavailableError(ServerError):
    """503: the server is starting or shutting down."""


class CapacityError(ServiceUnavailableError):
    """503: the host has no room for more sandboxes now; :attr:`retry_after_ms` says when to try again."""


class InsufficientStorageError(ServerError):
    """507: the server is out of storage."""


class NoSpaceError(ServerError):
    """507: the sandbox's root disk or volume is full (its cap)."""


class UpstreamError(ServerError):
    """502 or 504 from the port proxy: the sandbox's port gave no valid answer, or none in time."""


class ConnectionError(SandboxdError):  # noqa: A001 - the API's name
    """No answer: the server could not be reached or the connection broke."""


class RequestTimeoutError(ConnectionError):
    """No answer within the request timeout."""


#: The HTTP status of each server error kind (packages/protocol/src/errors.ts).
ERROR_STATUS: Mapping[str, int] = {
    "validation": 400,
    "unauthorized": 401,
    "tokens": 402,
    "concurrency": 403,
    "permission": 403,
    "quota": 403,
    "not_found": 404,
    "template_not_found": 404,
    "request_timeout": 408,
    "conflict": 409,
    "no_code_interpreter": 409,
    "payload_too_large": 413,
    "rate_limited": 429,
    "range_not_satisfiable": 416,
    "headers_too_large": 431,
    "internal": 500,
    "unsupported": 501,
    "upstream": 502,
    "unavailable": 503,
    "capacity": 503,
    "upstream_timeout": 504,
    "insufficient_storage": 507,
    "no_space": 507,
}

#: The class of each server error kind.
CLASS_BY_KIND: Mapping[str, Type[SandboxdError]] = {
    "validation": ValidationError,
    "unauthorized": AuthenticationError,
    "tokens": InsufficientTokensError,
    "concurrency": ConcurrencyLimitError,
    "quota": QuotaExceededError,
    "permission": PermissionError,
    "not_found": NotFoundError,
    "template_not_found": TemplateNotFoundError,
    "request_timeout": BadRequestError,
    "conflict": ConflictError,
    "no_code_interpreter": NoCodeInterpreterError,
    "payload_too_large": PayloadTooLargeError,
    "range_not_satisfiable": RangeNotSatisfiableError,
    "rate_limited": RateLimitError,
    "headers_too_large": BadRequestError,
    "internal": ServerError,
    "unsupported": UnsupportedError,
    "upstream": UpstreamError,
    "unavailable": ServiceUnavailableError,
    "capacity": CapacityError,
    "upstream_timeout": UpstreamError,
    "insufficient_storage": InsufficientStorageError,
    "no_space": NoSpaceError,
}


def _kind_of(status: int, kind: object) -> Optional[str]:
    if isinstance(kind, str) and kind in CLASS_BY_KIND:
        return kind
    for k, s in ERROR_STATUS.items():
        if s == status:
            return k
    return None


def parse_body(data: bytes) -> Any:
    """The JSON of an answer, the text when it is not JSON, None when empty."""
    if not data:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return data.decode("utf-8", "replace")


def error_from_response(
    status: int,
    body: Any,
    *,
    reason: str = "",
    retry_after: Optional[str] = None,
) -> SandboxdError:
    """The typed error of an error answer; ``body`` is the parsed JSON (or anything else).

    A body that is not a sandboxd error (a proxy in front, or a kind newer than this SDK)
    gets the first kind of its status; unknown 5xx become ServerError, others SandboxdError.
    """
    b: Mapping[str, Any] = body if isinstance(body, dict) else {}
    msg = b.get("message")
    message = msg if isinstance(msg, str) and msg else f"HTTP {status}{' ' + reason if reason else ''}"
    raw_code = b.get("code")
    code = raw_code if isinstance(raw_code, int) and not isinstance(raw_code, bool) else status
    kind = _kind_of(status, b.get("kind"))
    cls: Type[SandboxdError]
    if kind is not None:
        cls = CLASS_BY_KIND[kind]
    else:
        cls = ServerError if status >= 500 else SandboxdError
    retry_ms: Optional[float] = None
    if retry_after:
        try:
            s = float(retry_after)
            if s >= 0:
                retry_ms = s * 1000
        except ValueError:
            pass
    return cls(
        message,
        status=status,
        code=code,
        kind=kind if kind is not None else ("internal" if status >= 500 else "unknown"),
        details=b.get("details"),
        retry_after_ms=retry_ms,
    )
