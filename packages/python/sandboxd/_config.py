"""Client options and their defaults: arguments, then the environment, then localhost:8080."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Mapping, Optional

#: The API address used when neither an argument nor ``SANDBOX_API_URL`` gives one.
DEFAULT_API_URL = "http://localhost:8080"
#: Per-request timeout in seconds when the argument is not given.
DEFAULT_TIMEOUT = 60.0
#: Retries of idempotent reads (GET, HEAD) after a connection error, 429, 502, 503 or 504.
DEFAULT_MAX_RETRIES = 2
#: The most retries accepted.
MAX_RETRIES_CAP = 10


@dataclass(frozen=True)
class ClientConfig:
    """Options with every default applied."""

    api_key: Optional[str]
    #: Without a trailing slash.
    api_url: str
    #: Per-request timeout in seconds.
    timeout: float
    max_retries: int
    headers: Mapping[str, str] = field(default_factory=dict)


def _env(name: str) -> Optional[str]:
    v = os.environ.get(name)
    return v if v else None


def resolve_config(
    api_key: Optional[str] = None,
    api_url: Optional[str] = None,
    timeout: Optional[float] = None,
    max_retries: Optional[int] = None,
    headers: Optional[Mapping[str, str]] = None,
) -> ClientConfig:
    """Applies defaults. Raises ValueError for a malformed ``api_url`` or a bad timeout."""
    url = (api_url or _env("SANDBOX_API_URL") or DEFAULT_API_URL).rstrip("/")
    if not re.match(r"^https?://", url, re.IGNORECASE):
        raise ValueError(f'api_url must start with http:// or https:// (got "{url}")')
    t = DEFAULT_TIMEOUT if timeout is None else float(timeout)
    if not t > 0:
        raise ValueError(f"timeout must be a positive number of seconds (got {timeout!r})")
    retries = DEFAULT_MAX_RETRIES if max_retries is None else int(max_retries)
    return ClientConfig(
        api_key=api_key if api_key is not None else _env("SANDBOX_API_KEY"),
        api_url=url,
        timeout=t,
        max_retries=max(0, min(retries, MAX_RETRIES_CAP)),
        headers=dict(headers or {}),
    )
