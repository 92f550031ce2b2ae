"""A sandbox's live processes (``sandbox.processes``) and the streamed and background forms of
exec: ``POST .../exec`` with ``stream`` answers NDJSON (``start``, output chunks, ``exit``);
``GET .../processes/{pid}/output?follow=true`` replays and follows a process's output; stdin
and signals have routes of their own (docs/files-and-processes.md).

A :class:`ProcessHandle` is an iterator of :class:`~sandboxd.types.ExecEvent`: output chunks
as they come, then one ``exit`` event. When its connection drops before ``exit``, it
reconnects and skips what it already delivered, so each byte comes once.
"""

from __future__ import annotations

import asyncio
import time
from typing import (
    Any,
    AsyncContextManager,
    AsyncIterator,
    Callable,
    ContextManager,
    Dict,
    Iterator,
    List,
    Mapping,
    Optional,
    Union,
)

import httpx

from . import _wire
from ._http import AsyncHttp, SyncHttp
from ._stream import MAX_RECONNECTS, NdjsonDecoder, OutputTracker, backoff, start_event
from .errors import ConnectionError, NotFoundError, SandboxdError, ServerError
from .types import ExecEvent, ExecResult, ProcessExit, ProcessInfo, ProcessSignal

#: A callback of output text.
OutputCallback = Callable[[str], Any]
#: Bytes to write to stdin (text is sent as UTF-8).
StdinData = Union[bytes, bytearray, memoryview, str]


def _retryable(e: BaseException) -> bool:
    """A broken connection (or a gateway's 5xx): reconnect. Anything else ends the handle."""
    if isinstance(e, (httpx.TransportError, httpx.StreamError)):
        return True
    if isinstance(e, ConnectionError):
        return True
    return isinstance(e, SandboxdError) and e.status in (502, 503, 504)


def _stream_timeout(http: SyncHttp | AsyncHttp) -> httpx.Timeout:
    """Output streams may be silent for as long as the process is: no read limit."""
    return httpx.Timeout(http.config.timeout, read=None)


def _pid_path(sandbox_id: str, pid: int, tail: str = "") -> str:
    if isinstance(pid, bool) or not isinstance(pid, int) or pid < 1:
        raise ValueError(f"pid must be a positive integer (got {pid!r})")
    return f"/api/v1/sandboxes/{_wire.quote(sandbox_id)}/processes/{pid}{tail}"


def _stdin_bytes(data: StdinData) -> bytes:
    return data.encode("utf-8") if isinstance(data, str) else bytes(data)


def _dispatch(ev: ExecEvent, on_stdout: Optional[OutputCallback], on_stderr: Optional[OutputCallback]) -> None:
    if ev.type == "stdout" and on_stdout and ev.data:
        on_stdout(ev.data)
    elif ev.type == "stderr" and on_stderr and ev.data:
        on_stderr(ev.data)


# -- sync --------------------------------------------------------------------------------


class _SyncConn:
    """One output connection whose ``start`` line has been read."""

    def __init__(self, cm: ContextManager[httpx.Response]) -> None:
        self._cm = cm
        self._res = cm.__enter__()
        self._chunks = self._res.iter_bytes()
        self._dec = NdjsonDecoder()
        self._pending: List[Any] = []
        self._done = False
        try:
            first = self._next()
            if first is None:
                raise ConnectionError(
                    "The process output stream ended before it started", status=0, kind="connection"
                )
            self.start = start_event(first)
        except BaseException:
            self.close()
            raise

    def _next(self) -> Any:
        while not self._pending:
            if self._done:
                return None
            try:
                chunk = next(self._chunks)
                self._pending.extend(self._dec.feed(chunk))
            except StopIteration:
                self._done = True
                self._pending.extend(self._dec.end())
        return self._pending.pop(0)

    def lines(self) -> Iterator[Any]:
        while True:
            obj = self._next()
            if obj is None:
                return
            yield obj

    def close(self) -> None:
        try:
            self._cm.__exit__(None, None, None)
        except Exception:
            pass


class ProcessHandle:
    """A process started through the API (blocking API).

    Iterate it for its output (``for ev in handle: ...``: ``stdout``/``stderr`` events, then
    ``exit``); :meth:`wait` for its :class:`ExecResult`; :meth:`kill`, :meth:`send_stdin`,
    :meth:`close_stdin`. Breaking out of the iteration drops the connection; the process goes
    on, and iterating again picks up where it stopped (nothing lost or repeated).
    """

    def __init__(self, api: "Processes", pid: int, conn: Optional[_SyncConn] = None) -> None:
        self._api = api
        #: The process id inside the sandbox.
        self.pid = pid
        self._conn = conn
        self._current: Optional[_SyncConn] = None
        self._tracker = OutputTracker()
        if conn is not None:
            self._tracker.begin(conn.start)

    @property
    def exit(self) -> Optional[ProcessExit]:
        """How the process ended, once known."""
        return self._tracker.exit

    @property
    def output_lost(self) -> bool:
        """True when output written while disconnected was lost (more than the server keeps)."""
        return self._tracker.lost

    def __iter__(self) -> Iterator[ExecEvent]:
        return self.events()

    def events(self) -> Iterator[ExecEvent]:
        """Output events as they come, then the ``exit`` event; reconnects after a drop (at most
        8 times in a row). Raises NotFoundError (process gone), ConflictError (the sandbox
        stopped), ConnectionError (reconnecting failed)."""
        failures = 0
        while self._tracker.exit is None:
            conn = self._conn
            self._conn = None
            if conn is None:
                if failures:
                    time.sleep(backoff(failures))
                try:
                    conn = self._api._open_output(self.pid)
                except Exception as e:
                    if _retryable(e) and failures < MAX_RECONNECTS:
                        failures += 1
                        continue
                    raise
                self._tracker.begin(conn.start)
            self._current = conn
            try:
                for obj in conn.lines():
                    ev = _wire.exec_event(obj) if isinstance(obj, dict) else None
                    if ev is None or ev.type == "start":
                        continue
                    if ev.type == "exit":
                        yield from self._tracker.finish(ev.exit_code or 0, ev.signal)
                        yield ev
                        return
                    new = self._tracker.take(ev)
                    if new is not None:
                        failures = 0
                        yield new
            except Exception as e:
                if not _retryable(e):
                    raise
            finally:
                if self._current is conn:
                    self._current = None
                conn.close()
            failures += 1
            if failures > MAX_RECONNECTS:
                raise ConnectionError(f"Lost the output of process {self.pid}", status=0, kind="connection")

    def wait(
        self,
        *,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
    ) -> ExecResult:
        """Follows the output to the exit and returns the result: ``stdout``/``stderr`` hold what
        this handle saw (the first 1 MiB of each; ``truncated`` when cut or when output was
        lost), ``exit_code`` (128 + n when killed by signal n, 124 on timeout)."""
        for ev in self.events():
            _dispatch(ev, on_stdout, on_stderr)
        return self._tracker.result()

    def kill(self, signal: ProcessSignal = "SIGKILL") -> None:
        """Sends a signal to the process's group (default SIGKILL). Raises ConflictError once it has exited."""
        self._api.signal(self.pid, signal)

    def send_stdin(self, data: StdinData) -> None:
        """Writes to the process's stdin (started with ``stdin=True``). Raises ConflictError
        when stdin is closed or the process has exited."""
        self._api.send_stdin(self.pid, data)

    def close_stdin(self) -> None:
        """Closes stdin: the process reads EOF."""
        self._api.close_stdin(self.pid)

    def disconnect(self) -> None:
        """Drops the output connection, if any; the process keeps running (iterating again
        reconnects)."""
        for c in (self._conn, self._current):
            if c is not None:
                c.close()
        self._conn = None
        self._current = None


class Processes:
    """``sandbox.processes``: the processes of one sandbox started through the API."""

    def __init__(self, http: SyncHttp, sandbox_id: str) -> None:
        self._http = http
        self._sandbox_id = sandbox_id

    def _base(self) -> str:
        return f"/api/v1/sandboxes/{_wire.quote(self._sandbox_id)}"

    def list(self) -> List[ProcessInfo]:
        """Processes started through the API (background and streamed), running and recently exited."""
        d = self._http.request_json("GET", self._base() + "/processes")
        return [_wire.process_info(p) for p in _wire.items(d, "processes")]

    def get(self, pid: int) -> ProcessInfo:
        """One process of :meth:`list` by pid; raises NotFoundError."""
        for p in self.list():
            if p.pid == pid:
                return p
        raise NotFoundError(f"Process {pid} not found", status=404, kind="not_found")

    def start(
        self,
        command: str,
        *,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        user: Optional[str] = None,
        timeout_ms: Optional[int] = None,
        tag: Optional[str] = None,
        stdin: bool = False,
        stream: bool = False,
    ) -> ProcessHandle:
        """Starts ``command`` and returns its handle once it runs. ``stream=False`` (default)
        starts it in the background: the handle connects when iterated or waited on (and
        replays the kept output). ``stream=True`` streams its output from the first byte.
        ``stdin=True`` gives it a stdin pipe fed by :meth:`ProcessHandle.send_stdin`."""
        opts = _wire.exec_options(cwd=cwd, env=env, user=user, timeout_ms=timeout_ms, tag=tag, stdin=stdin)
        path = self._base() + "/exec"
        if not stream:
            d = self._http.request_json("POST", path, json={"command": command, "options": {**opts, "background": True}})
            pid = d.get("pid") if isinstance(d, dict) else None
            if not isinstance(pid, int):
                raise ServerError("The server started no process (no pid)", status=200, kind="internal")
            return ProcessHandle(self, pid)
        cm = self._http.stream(
            "POST",
            path,
            json={"command": command, "options": {**opts, "stream": True}},
            headers={"accept": "application/x-ndjson"},
            timeout=_stream_timeout(self._http),
        )
        conn = _SyncConn(cm)
        assert conn.start.pid is not None
        return ProcessHandle(self, conn.start.pid, conn)

    def connect(self, pid: int) -> ProcessHandle:
        """Attaches to a running (or recently exited) process: iterating the handle replays its
        kept output (the last 1 MiB), then follows it live to its exit. Raises NotFoundError
        for an unknown pid, ConflictError when the sandbox is not started."""
        return ProcessHandle(self, pid, self._open_output(pid))

    def _open_output(self, pid: int) -> _SyncConn:
        cm = self._http.stream(
            "GET",
            _pid_path(self._sandbox_id, pid, "/output"),
            params={"follow": "true"},
            headers={"accept": "application/x-ndjson"},
            timeout=_stream_timeout(self._http),
        )
        return _SyncConn(cm)

    def signal(self, pid: int, signal: ProcessSignal = "SIGTERM") -> None:
        """Sends ``signal`` to the process's group. Raises NotFoundError, ConflictError (exited)."""
        self._http.request("POST", _pid_path(self._sandbox_id, pid, "/signal"), json={"signal": signal})

    def kill(self, pid: int) -> None:
        """Sends SIGKILL to the process's group."""
        self.signal(pid, "SIGKILL")

    def send_stdin(self, pid: int, data: StdinData) -> None:
        """Appends ``data`` to the process's stdin; returns once handed to the process. Raises
        ConflictError (no stdin pipe, closed, or exited)."""
        self._http.request(
            "POST",
            _pid_path(self._sandbox_id, pid, "/stdin"),
            content=_stdin_bytes(data),
            headers={"content-type": "application/octet-stream"},
        )

    def close_stdin(self, pid: int) -> None:
        """Closes the process's stdin: it reads EOF."""
        self._http.request("POST", _pid_path(self._sandbox_id, pid, "/stdin/close"))


# -- async -------------------------------------------------------------------------------


class _AsyncConn:
    """One output connection whose ``start`` line has been read (asyncio)."""

    def __init__(self, cm: AsyncContextManager[httpx.Response]) -> None:
        self._cm = cm
        self._dec = NdjsonDecoder()
        self._pending: List[Any] = []
        self._done = False
        self._chunks: Optional[AsyncIterator[bytes]] = None
        self.start = ExecEvent(type="start")

    @classmethod
    async def open(cls, cm: AsyncContextManager[httpx.Response]) -> "_AsyncConn":
        self = cls(cm)
        res = await cm.__aenter__()
        self._chunks = res.aiter_bytes()
        try:
            first = await self._next()
            if first is None:
                raise ConnectionError(
                    "The process output stream ended before it started", status=0, kind="connection"
                )
            self.start = start_event(first)
        except BaseException:
            await self.close()
            raise
        return self

    async def _next(self) -> Any:
        while not self._pending:
            if self._done:
                return None
            assert self._chunks is not None
            try:
                chunk = await self._chunks.__anext__()
                self._pending.extend(self._dec.feed(chunk))
            except StopAsyncIteration:
                self._done = True
                self._pending.extend(self._dec.end())
        return self._pending.pop(0)

    async def lines(self) -> AsyncIterator[Any]:
        while True:
            obj = await self._next()
            if obj is None:
                return
            yield obj

    async def close(self) -> None:
        try:
            await self._cm.__aexit__(None, None, None)
        except Exception:
            pass


class AsyncProcessHandle:
    """A process started through the API (asyncio): ``async for ev in handle``, ``await
    handle.wait()``, ``kill``, ``send_stdin``, ``close_stdin``, as :class:`ProcessHandle`."""

    def __init__(self, api: "AsyncProcesses", pid: int, conn: Optional[_AsyncConn] = None) -> None:
        self._api = api
        self.pid = pid
        self._conn = conn
        self._current: Optional[_AsyncConn] = None
        self._tracker = OutputTracker()
        self._stdin_lock = asyncio.Lock()
        if conn is not None:
            self._tracker.begin(conn.start)

    @property
    def exit(self) -> Optional[ProcessExit]:
        return self._tracker.exit

    @property
    def output_lost(self) -> bool:
        return self._tracker.lost

    def __aiter__(self) -> AsyncIterator[ExecEvent]:
        return self.events()

    async def events(self) -> AsyncIterator[ExecEvent]:
        """See :meth:`ProcessHandle.events`. Leaving an ``async for`` early keeps the connection
        until the iterator is closed: call :meth:`disconnect` (or iterate again, which does)."""
        if self._current is not None:
            await self._current.close()
            self._current = None
        failures = 0
        while self._tracker.exit is None:
            conn = self._conn
            self._conn = None
            if conn is None:
                if failures:
                    await asyncio.sleep(backoff(failures))
                try:
                    conn = await self._api._open_output(self.pid)
                except Exception as e:
                    if _retryable(e) and failures < MAX_RECONNECTS:
                        failures += 1
                        continue
                    raise
                self._tracker.begin(conn.start)
            self._current = conn
            try:
                async for obj in conn.lines():
                    ev = _wire.exec_event(obj) if isinstance(obj, dict) else None
                    if ev is None or ev.type == "start":
                        continue
                    if ev.type == "exit":
                        for rest in self._tracker.finish(ev.exit_code or 0, ev.signal):
                            yield rest
                        yield ev
                        return
                    new = self._tracker.take(ev)
                    if new is not None:
                        failures = 0
                        yield new
            except Exception as e:
                if not _retryable(e):
                    raise
            finally:
                if self._current is conn:
                    self._current = None
                await conn.close()
            failures += 1
            if failures > MAX_RECONNECTS:
                raise ConnectionError(f"Lost the output of process {self.pid}", status=0, kind="connection")

    async def wait(
        self,
        *,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
    ) -> ExecResult:
        """See :meth:`ProcessHandle.wait`."""
        async for ev in self.events():
            _dispatch(ev, on_stdout, on_stderr)
        return self._tracker.result()

    async def kill(self, signal: ProcessSignal = "SIGKILL") -> None:
        await self._api.signal(self.pid, signal)

    async def send_stdin(self, data: StdinData) -> None:
        """Writes to stdin; writes of one handle are sent one after another, in call order."""
        async with self._stdin_lock:
            await self._api.send_stdin(self.pid, data)

    async def close_stdin(self) -> None:
        """Closes stdin after the writes already queued."""
        async with self._stdin_lock:
            await self._api.close_stdin(self.pid)

    async def disconnect(self) -> None:
        """Drops the output connection, if any; the process keeps running."""
        for c in (self._conn, self._current):
            if c is not None:
                await c.close()
        self._conn = None
        self._current = None


class AsyncProcesses:
    """``sandbox.processes`` (asyncio): the methods of :class:`Processes`, awaited."""

    def __init__(self, http: AsyncHttp, sandbox_id: str) -> None:
        self._http = http
        self._sandbox_id = sandbox_id

    def _base(self) -> str:
        return f"/api/v1/sandboxes/{_wire.quote(self._sandbox_id)}"

    async def list(self) -> List[ProcessInfo]:
        d = await self._http.request_json("GET", self._base() + "/processes")
        return [_wire.process_info(p) for p in _wire.items(d, "processes")]

    async def get(self, pid: int) -> ProcessInfo:
        for p in await self.list():
            if p.pid == pid:
                return p
        raise NotFoundError(f"Process {pid} not found", status=404, kind="not_found")

    async def start(
        self,
        command: str,
        *,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        user: Optional[str] = None,
        timeout_ms: Optional[int] = None,
        tag: Optional[str] = None,
        stdin: bool = False,
        stream: bool = False,
    ) -> AsyncProcessHandle:
        """See :meth:`Processes.start`."""
        opts = _wire.exec_options(cwd=cwd, env=env, user=user, timeout_ms=timeout_ms, tag=tag, stdin=stdin)
        path = self._base() + "/exec"
        if not stream:
            d = await self._http.request_json(
                "POST", path, json={"command": command, "options": {**opts, "background": True}}
            )
            pid = d.get("pid") if isinstance(d, dict) else None
            if not isinstance(pid, int):
                raise ServerError("The server started no process (no pid)", status=200, kind="internal")
            return AsyncProcessHandle(self, pid)
        cm = self._http.stream(
            "POST",
            path,
            json={"command": command, "options": {**opts, "stream": True}},
            headers={"accept": "application/x-ndjson"},
            timeout=_stream_timeout(self._http),
        )
        conn = await _AsyncConn.open(cm)
        assert conn.start.pid is not None
        return AsyncProcessHandle(self, conn.start.pid, conn)

    async def connect(self, pid: int) -> AsyncProcessHandle:
        return AsyncProcessHandle(self, pid, await self._open_output(pid))

    async def _open_output(self, pid: int) -> _AsyncConn:
        cm = self._http.stream(
            "GET",
            _pid_path(self._sandbox_id, pid, "/output"),
            params={"follow": "true"},
            headers={"accept": "application/x-ndjson"},
            timeout=_stream_timeout(self._http),
        )
        return await _AsyncConn.open(cm)

    async def signal(self, pid: int, signal: ProcessSignal = "SIGTERM") -> None:
        await self._http.request("POST", _pid_path(self._sandbox_id, pid, "/signal"), json={"signal": signal})

    async def kill(self, pid: int) -> None:
        await self.signal(pid, "SIGKILL")

    async def send_stdin(self, pid: int, data: StdinData) -> None:
        await self._http.request(
            "POST",
            _pid_path(self._sandbox_id, pid, "/stdin"),
            content=_stdin_bytes(data),
            headers={"content-type": "application/octet-stream"},
        )

    async def close_stdin(self, pid: int) -> None:
        await self._http.request("POST", _pid_path(self._sandbox_id, pid, "/stdin/close"))


__all__: List[str] = [
    "Processes",
    "AsyncProcesses",
    "ProcessHandle",
    "AsyncProcessHandle",
]
