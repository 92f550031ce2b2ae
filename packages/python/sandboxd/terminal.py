"""Placeholder of the sandbox's terminals API (the py-files part replaces this file)."""

from __future__ import annotations

from typing import Any


class Terminals:
    """Interactive terminals of a sandbox (sync)."""

    def __init__(self, http: Any, sandbox_id: str) -> None:
        self._http = http
        self._sandbox_id = sandbox_id


class AsyncTerminals:
    """Interactive terminals of a sandbox (asyncio)."""

    def __init__(self, http: Any, sandbox_id: str) -> None:
        self._http = http
        self._sandbox_id = sandbox_id
