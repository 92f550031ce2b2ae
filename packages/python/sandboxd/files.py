"""Placeholder of the sandbox's files API (the py-files part replaces this file)."""

from __future__ import annotations

from typing import Any


class Files:
    """The files of a sandbox (sync)."""

    def __init__(self, http: Any, sandbox_id: str) -> None:
        self._http = http
        self._sandbox_id = sandbox_id


class AsyncFiles:
    """The files of a sandbox (asyncio)."""

    def __init__(self, http: Any, sandbox_id: str) -> None:
        self._http = http
        self._sandbox_id = sandbox_id
