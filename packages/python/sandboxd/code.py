"""The code interpreter (placeholder of the skeleton)."""

from __future__ import annotations

from ._http import AsyncHttp, SyncHttp


class CodeInterpreter:
    """``sandbox.code`` (sync)."""

    def __init__(self, http: SyncHttp, sandbox_id: str) -> None:
        self._http = http
        self._sandbox_id = sandbox_id


class AsyncCodeInterpreter:
    """``sandbox.code`` (asyncio)."""

    def __init__(self, http: AsyncHttp, sandbox_id: str) -> None:
        self._http = http
        self._sandbox_id = sandbox_id
