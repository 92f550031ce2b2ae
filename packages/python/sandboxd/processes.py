"""Processes started through the API (placeholder of the skeleton)."""

from __future__ import annotations

from ._http import AsyncHttp, SyncHttp


class Processes:
    """``sandbox.processes`` (sync)."""

    def __init__(self, http: SyncHttp, sandbox_id: str) -> None:
        self._http = http
        self._sandbox_id = sandbox_id


class AsyncProcesses:
    """``sandbox.processes`` (asyncio)."""

    def __init__(self, http: AsyncHttp, sandbox_id: str) -> None:
        self._http = http
        self._sandbox_id = sandbox_id
