"""Interactive terminals (PTY sessions) of a sandbox, over the API's terminal WebSocket.

``sandbox.terminals.create()`` starts a shell on a new PTY and connects to it; the
:class:`Terminal` it returns sends keyboard input (:meth:`Terminal.write`), reads output as it
arrives (:meth:`Terminal.read`, iteration, :meth:`Terminal.read_until`), resizes the PTY and
waits for the shell's exit. Several clients may share one terminal, and a client may
reconnect to a running one by id (``replay=True``: the last 64 KiB of output first).

On the wire: output comes in binary frames, ``ready``/``exit`` control messages in text
frames; input goes out as binary frames and ``{"type":"resize","cols":..,"rows":..}`` as text
(docs/terminals.md). Output is raw PTY bytes: the terminal echoes what is typed, lines end in
``\\r\\n``, and programs may send ANSI escape codes.

The sync :class:`Terminal` runs the asyncio WebSocket client on a private event loop in a
background thread (``websockets`` 10.4 has no sync client); the thread ends when the
terminal is disconnected, closed, or has exited and its output has been read.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, AsyncIterator, Dict, Iterator, List, Literal, Optional, Pattern, Tuple, Type, Union
from types import TracebackType
from datetime import datetime

from ._wire import parse_time, quote
from ._ws import AsyncWebSocket, Message, SyncWebSocket, WebSocketClosed
from .errors import ConnectionError, NotFoundError, RequestTimeoutError

if TYPE_CHECKING:
    from ._http import AsyncHttp, SyncHttp

__all__ = [
    "Terminal",
    "AsyncTerminal",
    "Terminals",
    "AsyncTerminals",
    "TerminalInfo",
    "TerminalListItem",
    "TerminalExit",
]

#: What :meth:`Terminal.read_until` looks for: text (UTF-8), bytes, or a regular expression.
PatternLike = Union[str, bytes, "Pattern[bytes]", "Pattern[str]"]

#: ``active`` while the shell runs, ``exited`` after.
TerminalStatus = Literal["active", "exited"]

#: Output kept by :meth:`Terminal.wait` for later reads, at most (older output is dropped).
MAX_KEPT_BYTES = 1 << 20


@dataclass
class TerminalExit:
    """How a terminal's shell ended: ``exit_code`` is 128 + n when killed by signal n (then ``signal`` names it)."""

    exit_code: int
    signal: Optional[str]


@dataclass
class TerminalListItem:
    """One item of a sandbox's terminal list."""

    id: str
    shell: str
    #: ``active`` while the shell runs, ``exited`` after.
    status: TerminalStatus
    #: Clients connected now.
    client_count: int

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> TerminalListItem:
        return cls(id=d["id"], shell=d["shell"], status=d["status"], client_count=int(d.get("clientCount", 0)))


@dataclass
class TerminalInfo:
    """A terminal, as ``GET .../terminals/{id}`` describes it."""

    id: str
    sandbox_id: str
    shell: str
    status: TerminalStatus
    client_count: int
    created_at: datetime

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> TerminalInfo:
        return cls(
            id=d["id"],
            sandbox_id=d["sandboxId"],
            shell=d["shell"],
            status=d["status"],
            client_count=int(d.get("clientCount", 0)),
            created_at=parse_time(d["createdAt"]),
        )


def _terminals_path(sandbox_id: str, terminal_id: Optional[str] = None) -> str:
    base = f"/api/v1/sandboxes/{quote(sandbox_id)}/terminals"
    return base if terminal_id is None else f"{base}/{quote(terminal_id)}"


def _open_timeout(http: Union[SyncHttp, AsyncHttp]) -> float:
    return float(http.config.timeout)


def _create_body(shell: Optional[str], cwd: Optional[str], cols: Optional[int], rows: Optional[int]) -> Dict[str, Any]:
    body: Dict[str, Any] = {}
    if shell is not None:
        body["shell"] = shell
    if cwd is not None:
        body["cwd"] = cwd
    if cols is not None:
        body["cols"] = cols
    if rows is not None:
        body["rows"] = rows
    return body


def _check_size(cols: int, rows: int) -> None:
    for name, v in (("cols", cols), ("rows", rows)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1 (got {v!r})")


def _compile(pattern: PatternLike) -> Tuple[Pattern[bytes], Optional[int]]:
    """The pattern as a bytes regular expression, and its length when it is a literal."""
    if isinstance(pattern, (str, bytes, bytearray)):
        lit = pattern.encode("utf-8") if isinstance(pattern, str) else bytes(pattern)
        if not lit:
            raise ValueError("pattern must not be empty")
        return re.compile(re.escape(lit)), len(lit)
    if isinstance(pattern.pattern, str):
        flags = pattern.flags & ~re.UNICODE
        return re.compile(pattern.pattern.encode("utf-8"), flags), None
    return pattern, None


def _resume_at(buf_len: int, literal: Optional[int]) -> int:
    """Where the next search may start: a literal cannot end in what was already searched."""
    return 0 if literal is None else max(0, buf_len - literal + 1)


def _tail(b: bytes, n: int = 300) -> str:
    return (b[-n:]).decode("utf-8", "replace")


class _Core:
    """What the sync and async terminals share: the protocol's messages and the read buffer."""

    def __init__(self, sandbox_id: str, terminal_id: str) -> None:
        self.sandbox_id = sandbox_id
        self.id = terminal_id
        self.pid = 0
        self.shell = ""
        self.ready = False
        self.exit: Optional[TerminalExit] = None
        #: Output received and not yet read.
        self.buf = bytearray()
        #: How the connection ended: (code, reason), once it has.
        self.closed: Optional[Tuple[int, str]] = None
        self.disconnected = False

    def ws_path(self) -> str:
        return _terminals_path(self.sandbox_id, self.id) + "/ws"

    def on_message(self, msg: Message) -> bytes:
        """Handles one message; returns its output (empty for a control message)."""
        if isinstance(msg, str):
            if msg.lstrip().startswith("{"):
                try:
                    m = json.loads(msg)
                except ValueError:
                    m = None
                if isinstance(m, dict) and m.get("type") == "ready":
                    self.pid = int(m.get("pid") or 0)
                    self.shell = str(m.get("shell") or "")
                    self.ready = True
                    return b""
                if isinstance(m, dict) and m.get("type") == "exit":
                    if self.exit is None:
                        code = m.get("exitCode")
                        sig = m.get("signal")
                        self.exit = TerminalExit(
                            exit_code=int(code) if isinstance(code, int) else -1,
                            signal=sig if isinstance(sig, str) else None,
                        )
                    self.ready = True
                    return b""
            return msg.encode("utf-8")
        return bytes(msg)

    def on_closed(self, e: WebSocketClosed) -> None:
        if self.closed is None:
            self.closed = (e.code, e.reason)

    def keep(self, data: bytes) -> None:
        """Adds output to the buffer, dropping the oldest beyond MAX_KEPT_BYTES."""
        self.buf += data
        if len(self.buf) > MAX_KEPT_BYTES:
            del self.buf[: len(self.buf) - MAX_KEPT_BYTES]

    def take(self) -> bytes:
        data = bytes(self.buf)
        self.buf.clear()
        return data

    def find(self, rx: Pattern[bytes], start: int = 0) -> Optional[bytes]:
        """Takes the buffer up to the end of the first match of ``rx`` (searched from
        ``start``), if there is one."""
        m = rx.search(self.buf, start)
        if m is None:
            return None
        data = bytes(self.buf[: m.end()])
        del self.buf[: m.end()]
        return data

    def lost(self) -> ConnectionError:
        if self.closed is not None:
            code, reason = self.closed
            return ConnectionError(
                f"Terminal {self.id} connection closed (code {code}{': ' + reason if reason else ''})",
                status=0,
                kind="connection",
            )
        return ConnectionError(f"Terminal {self.id} is not connected", status=0, kind="connection")

    def check_writable(self) -> None:
        if self.exit is not None:
            raise ConnectionError(
                f"Terminal {self.id} has exited (exit code {self.exit.exit_code})", status=0, kind="connection"
            )
        if self.disconnected:
            raise ConnectionError(f"Terminal {self.id} was disconnected", status=0, kind="connection")
        if self.closed is not None:
            raise self.lost()

    def no_ready(self, timeout: float) -> RequestTimeoutError:
        return RequestTimeoutError(
            f"Terminal {self.id} sent no ready message within {timeout:g} s", status=0, kind="timeout"
        )


def _remaining(deadline: Optional[float]) -> Optional[float]:
    if deadline is None:
        return None
    return max(0.0, deadline - time.monotonic())


def _deadline(timeout: Optional[float]) -> Optional[float]:
    return None if timeout is None else time.monotonic() + timeout


class Terminal:
    """A connected terminal (sync). Create one with ``sandbox.terminals.create()`` or ``.connect(id)``.

    Reading: ``for chunk in terminal`` yields output as it arrives until the shell exits or
    the connection ends; :meth:`read` returns the next chunk; :meth:`read_until` reads up to a
    pattern. ``with`` closes it (deletes the terminal) on exit; :meth:`disconnect` leaves the
    shell running for a later :meth:`Terminals.connect`.
    """

    def __init__(self, http: SyncHttp, sandbox_id: str, terminal_id: str) -> None:
        self._http = http
        self._core = _Core(sandbox_id, terminal_id)
        self._ws: Optional[SyncWebSocket] = None

    @classmethod
    def connect(
        cls, http: SyncHttp, sandbox_id: str, terminal_id: str, *, replay: bool = False, timeout: Optional[float] = None
    ) -> Terminal:
        """Connects to terminal ``terminal_id``; returns after its ``ready`` message (or ``exit``
        for a terminal whose shell has ended). Raises NotFoundError, ConflictError (sandbox not
        started), AuthenticationError, RateLimitError (too many clients), ConnectionError,
        RequestTimeoutError."""
        t = cls(http, sandbox_id, terminal_id)
        t._open(replay, timeout if timeout is not None else _open_timeout(http))
        return t

    def _open(self, replay: bool, timeout: float) -> None:
        c = self._core
        url = self._http.ws_url(c.ws_path(), {"replay": "1"} if replay else None)
        self._ws = SyncWebSocket.open(
            url, self._http.auth_headers(), open_timeout=timeout, what=f"connect to terminal {c.id}"
        )
        deadline = _deadline(timeout)
        try:
            while not c.ready:
                left = _remaining(deadline)
                if left is not None and left <= 0:
                    raise c.no_ready(timeout)
                try:
                    msg = self._ws.recv(left)
                except TimeoutError:
                    raise c.no_ready(timeout) from None
                except WebSocketClosed as e:
                    c.on_closed(e)
                    raise c.lost() from None
                c.keep(c.on_message(msg))
        except BaseException:
            self._ws.close()
            raise

    @property
    def id(self) -> str:
        return self._core.id

    @property
    def sandbox_id(self) -> str:
        return self._core.sandbox_id

    @property
    def pid(self) -> int:
        """The shell's pid inside the sandbox, from the ``ready`` message (0 if it had already exited)."""
        return self._core.pid

    @property
    def shell(self) -> str:
        return self._core.shell

    @property
    def exit(self) -> Optional[TerminalExit]:
        """The shell's exit, once it has been received."""
        return self._core.exit

    @property
    def connected(self) -> bool:
        """True until the connection ends (exit, disconnect, or closed by the server)."""
        return self._core.closed is None and not self._core.disconnected

    def write(self, data: Union[str, bytes]) -> None:
        """Sends keyboard input (text as UTF-8), as a binary frame. Raises ConnectionError once
        the shell has exited or the connection has ended."""
        self._core.check_writable()
        assert self._ws is not None
        try:
            self._ws.send(data.encode("utf-8") if isinstance(data, str) else bytes(data))
        except WebSocketClosed as e:
            self._core.on_closed(e)
            raise self._core.lost() from None

    def resize(self, cols: int, rows: int) -> None:
        """Resizes the PTY to ``cols`` x ``rows`` (integers 1..1000; the server ignores others)."""
        _check_size(cols, rows)
        self._core.check_writable()
        assert self._ws is not None
        try:
            self._ws.send(json.dumps({"type": "resize", "cols": cols, "rows": rows}))
        except WebSocketClosed as e:
            self._core.on_closed(e)
            raise self._core.lost() from None

    def _pull(self, timeout: Optional[float]) -> bytes:
        """Receives one message; returns its output; b"" for a control message. Raises
        WebSocketClosed at the end, TimeoutError."""
        c = self._core
        if c.closed is not None or c.disconnected or self._ws is None:
            raise WebSocketClosed(*(c.closed or (1000, "")))
        try:
            msg = self._ws.recv(timeout)
        except WebSocketClosed as e:
            c.on_closed(e)
            raise
        return c.on_message(msg)

    def read(self, timeout: Optional[float] = None) -> bytes:
        """The next output (everything received and not yet read, at least one byte); ``b""``
        once the terminal has ended (shell exited, disconnected, or connection closed) and all
        output was read. Raises TimeoutError when nothing arrives within ``timeout`` seconds."""
        c = self._core
        if c.buf:
            return c.take()
        deadline = _deadline(timeout)
        while True:
            try:
                data = self._pull(_remaining(deadline))
            except WebSocketClosed:
                return b""
            if data:
                return data

    def __iter__(self) -> Iterator[bytes]:
        """Output chunks as they arrive, until the terminal ends."""
        while True:
            data = self.read()
            if not data:
                return
            yield data

    def read_until(self, pattern: PatternLike, timeout: Optional[float] = None) -> bytes:
        """Reads until ``pattern`` (text, bytes or a regular expression) appears in the output;
        returns the output up to the end of the match (what follows stays for the next read).
        Raises TimeoutError after ``timeout`` seconds, EOFError when the terminal ends first
        (the output read so far stays for the next read in both cases)."""
        rx, literal = _compile(pattern)
        c = self._core
        deadline = _deadline(timeout)
        start = 0
        while True:
            found = c.find(rx, start)
            if found is not None:
                return found
            start = _resume_at(len(c.buf), literal)
            try:
                data = self._pull(_remaining(deadline))
            except TimeoutError:
                raise TimeoutError(
                    f"{pattern!r} did not appear within {timeout:g} s; last output: {_tail(bytes(c.buf))!r}"
                ) from None
            except WebSocketClosed:
                raise EOFError(
                    f"terminal {c.id} ended before {pattern!r} appeared; last output: {_tail(bytes(c.buf))!r}"
                ) from None
            c.buf += data

    def wait(self, timeout: Optional[float] = None) -> TerminalExit:
        """Waits for the shell to exit and returns how; the output that arrives meanwhile is kept
        for later reads (the last 1 MiB). Raises ConnectionError when the connection ends
        first, TimeoutError after ``timeout`` seconds."""
        c = self._core
        deadline = _deadline(timeout)
        while c.exit is None:
            try:
                c.keep(self._pull(_remaining(deadline)))
            except WebSocketClosed:
                if c.exit is None:
                    raise c.lost() from None
        return c.exit

    def disconnect(self) -> None:
        """Closes this connection only: the shell keeps running and can be reconnected."""
        self._core.disconnected = True
        if self._ws is not None:
            self._ws.close(1000)

    def close(self) -> None:
        """Disconnects and deletes the terminal, ending its shell. A terminal already gone is fine."""
        self.disconnect()
        try:
            self._http.request("DELETE", _terminals_path(self._core.sandbox_id, self._core.id))
        except NotFoundError:
            pass

    def __enter__(self) -> Terminal:
        return self

    def __exit__(
        self, et: Optional[Type[BaseException]], ev: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Terminal(id={self.id!r}, sandbox_id={self.sandbox_id!r}, shell={self.shell!r}, pid={self.pid})"


class AsyncTerminal:
    """A connected terminal (asyncio): the same as :class:`Terminal`, awaited; ``async for
    chunk in terminal`` reads output and ``async with`` closes it."""

    def __init__(self, http: AsyncHttp, sandbox_id: str, terminal_id: str) -> None:
        self._http = http
        self._core = _Core(sandbox_id, terminal_id)
        self._ws: Optional[AsyncWebSocket] = None

    @classmethod
    async def connect(
        cls,
        http: AsyncHttp,
        sandbox_id: str,
        terminal_id: str,
        *,
        replay: bool = False,
        timeout: Optional[float] = None,
    ) -> AsyncTerminal:
        """See :meth:`Terminal.connect`."""
        t = cls(http, sandbox_id, terminal_id)
        await t._open(replay, timeout if timeout is not None else _open_timeout(http))
        return t

    async def _open(self, replay: bool, timeout: float) -> None:
        c = self._core
        url = self._http.ws_url(c.ws_path(), {"replay": "1"} if replay else None)
        self._ws = await AsyncWebSocket.open(
            url, self._http.auth_headers(), open_timeout=timeout, what=f"connect to terminal {c.id}"
        )
        deadline = _deadline(timeout)
        try:
            while not c.ready:
                left = _remaining(deadline)
                if left is not None and left <= 0:
                    raise c.no_ready(timeout)
                try:
                    msg = await self._ws.recv(left)
                except TimeoutError:
                    raise c.no_ready(timeout) from None
                except WebSocketClosed as e:
                    c.on_closed(e)
                    raise c.lost() from None
                c.keep(c.on_message(msg))
        except BaseException:
            await self._ws.close()
            raise

    @property
    def id(self) -> str:
        return self._core.id

    @property
    def sandbox_id(self) -> str:
        return self._core.sandbox_id

    @property
    def pid(self) -> int:
        return self._core.pid

    @property
    def shell(self) -> str:
        return self._core.shell

    @property
    def exit(self) -> Optional[TerminalExit]:
        return self._core.exit

    @property
    def connected(self) -> bool:
        return self._core.closed is None and not self._core.disconnected

    async def write(self, data: Union[str, bytes]) -> None:
        """See :meth:`Terminal.write`."""
        self._core.check_writable()
        assert self._ws is not None
        try:
            await self._ws.send(data.encode("utf-8") if isinstance(data, str) else bytes(data))
        except WebSocketClosed as e:
            self._core.on_closed(e)
            raise self._core.lost() from None

    async def resize(self, cols: int, rows: int) -> None:
        """See :meth:`Terminal.resize`."""
        _check_size(cols, rows)
        self._core.check_writable()
        assert self._ws is not None
        try:
            await self._ws.send(json.dumps({"type": "resize", "cols": cols, "rows": rows}))
        except WebSocketClosed as e:
            self._core.on_closed(e)
            raise self._core.lost() from None

    async def _pull(self, timeout: Optional[float]) -> bytes:
        c = self._core
        if c.closed is not None or c.disconnected or self._ws is None:
            raise WebSocketClosed(*(c.closed or (1000, "")))
        try:
            msg = await self._ws.recv(timeout)
        except WebSocketClosed as e:
            c.on_closed(e)
            raise
        return c.on_message(msg)

    async def read(self, timeout: Optional[float] = None) -> bytes:
        """See :meth:`Terminal.read`."""
        c = self._core
        if c.buf:
            return c.take()
        deadline = _deadline(timeout)
        while True:
            try:
                data = await self._pull(_remaining(deadline))
            except WebSocketClosed:
                return b""
            if data:
                return data

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            data = await self.read()
            if not data:
                return
            yield data

    async def read_until(self, pattern: PatternLike, timeout: Optional[float] = None) -> bytes:
        """See :meth:`Terminal.read_until`."""
        rx, literal = _compile(pattern)
        c = self._core
        deadline = _deadline(timeout)
        start = 0
        while True:
            found = c.find(rx, start)
            if found is not None:
                return found
            start = _resume_at(len(c.buf), literal)
            try:
                data = await self._pull(_remaining(deadline))
            except TimeoutError:
                raise TimeoutError(
                    f"{pattern!r} did not appear within {timeout:g} s; last output: {_tail(bytes(c.buf))!r}"
                ) from None
            except WebSocketClosed:
                raise EOFError(
                    f"terminal {c.id} ended before {pattern!r} appeared; last output: {_tail(bytes(c.buf))!r}"
                ) from None
            c.buf += data

    async def wait(self, timeout: Optional[float] = None) -> TerminalExit:
        """See :meth:`Terminal.wait`."""
        c = self._core
        deadline = _deadline(timeout)
        while c.exit is None:
            try:
                c.keep(await self._pull(_remaining(deadline)))
            except WebSocketClosed:
                if c.exit is None:
                    raise c.lost() from None
        return c.exit

    async def disconnect(self) -> None:
        """See :meth:`Terminal.disconnect`."""
        self._core.disconnected = True
        if self._ws is not None:
            await self._ws.close(1000)

    async def close(self) -> None:
        """See :meth:`Terminal.close`."""
        await self.disconnect()
        try:
            await self._http.request("DELETE", _terminals_path(self._core.sandbox_id, self._core.id))
        except NotFoundError:
            pass

    async def __aenter__(self) -> AsyncTerminal:
        return self

    async def __aexit__(
        self, et: Optional[Type[BaseException]], ev: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"AsyncTerminal(id={self.id!r}, sandbox_id={self.sandbox_id!r}, shell={self.shell!r}, pid={self.pid})"


class Terminals:
    """The terminals of one sandbox (``sandbox.terminals``)."""

    def __init__(self, http: SyncHttp, sandbox_id: str) -> None:
        self._http = http
        self._sandbox_id = sandbox_id

    def create(
        self,
        *,
        shell: Optional[str] = None,
        cwd: Optional[str] = None,
        cols: Optional[int] = None,
        rows: Optional[int] = None,
        replay: bool = False,
        timeout: Optional[float] = None,
    ) -> Terminal:
        """Starts a shell on a new PTY and connects to it. ``shell``: ``bash``, ``zsh``,
        ``fish`` or ``sh`` (default bash if the image has it, else sh); ``cwd``: absolute
        (default the image's working directory, else /root, else /); ``cols`` x ``rows``:
        1..1000 (default 80 x 24). ``timeout``: seconds to wait for the connection (default
        the client's). The first client of a terminal gets its output so far (the prompt)
        whatever ``replay`` says. Raises ValidationError (shell or cwd missing in the image), ConflictError
        (sandbox not started, or 32 terminals), NotFoundError. If connecting fails the new
        terminal is deleted."""
        r = self._http.request(
            "POST", _terminals_path(self._sandbox_id), json=_create_body(shell, cwd, cols, rows)
        )
        tid = str(r.json()["terminal"]["id"])
        try:
            return Terminal.connect(self._http, self._sandbox_id, tid, replay=replay, timeout=timeout)
        except BaseException:
            try:
                self._http.request("DELETE", _terminals_path(self._sandbox_id, tid))
            except Exception:
                pass
            raise

    def connect(self, terminal_id: str, *, replay: bool = False, timeout: Optional[float] = None) -> Terminal:
        """Connects to an existing terminal (several clients may share one); ``replay``: receive
        the last 64 KiB of its output first. See :meth:`Terminal.connect` for the errors."""
        return Terminal.connect(self._http, self._sandbox_id, terminal_id, replay=replay, timeout=timeout)

    def list(self) -> List[TerminalListItem]:
        """The sandbox's active terminals."""
        r = self._http.request("GET", _terminals_path(self._sandbox_id))
        return [TerminalListItem.from_json(t) for t in r.json()["terminals"]]

    def get(self, terminal_id: str) -> TerminalInfo:
        """One terminal (an exited one too); raises NotFoundError."""
        return TerminalInfo.from_json(self._http.request("GET", _terminals_path(self._sandbox_id, terminal_id)).json())

    def delete(self, terminal_id: str) -> None:
        """Deletes a terminal, hanging up its shell (SIGHUP); raises NotFoundError."""
        self._http.request("DELETE", _terminals_path(self._sandbox_id, terminal_id))


class AsyncTerminals:
    """The terminals of one sandbox (``sandbox.terminals`` of an AsyncSandbox)."""

    def __init__(self, http: AsyncHttp, sandbox_id: str) -> None:
        self._http = http
        self._sandbox_id = sandbox_id

    async def create(
        self,
        *,
        shell: Optional[str] = None,
        cwd: Optional[str] = None,
        cols: Optional[int] = None,
        rows: Optional[int] = None,
        replay: bool = False,
        timeout: Optional[float] = None,
    ) -> AsyncTerminal:
        """See :meth:`Terminals.create`."""
        r = await self._http.request(
            "POST", _terminals_path(self._sandbox_id), json=_create_body(shell, cwd, cols, rows)
        )
        tid = str(r.json()["terminal"]["id"])
        try:
            return await AsyncTerminal.connect(self._http, self._sandbox_id, tid, replay=replay, timeout=timeout)
        except BaseException:
            try:
                await self._http.request("DELETE", _terminals_path(self._sandbox_id, tid))
            except Exception:
                pass
            raise

    async def connect(
        self, terminal_id: str, *, replay: bool = False, timeout: Optional[float] = None
    ) -> AsyncTerminal:
        """See :meth:`Terminals.connect`."""
        return await AsyncTerminal.connect(self._http, self._sandbox_id, terminal_id, replay=replay, timeout=timeout)

    async def list(self) -> List[TerminalListItem]:
        """See :meth:`Terminals.list`."""
        r = await self._http.request("GET", _terminals_path(self._sandbox_id))
        return [TerminalListItem.from_json(t) for t in r.json()["terminals"]]

    async def get(self, terminal_id: str) -> TerminalInfo:
        """See :meth:`Terminals.get`."""
        r = await self._http.request("GET", _terminals_path(self._sandbox_id, terminal_id))
        return TerminalInfo.from_json(r.json())

    async def delete(self, terminal_id: str) -> None:
        """See :meth:`Terminals.delete`."""
        await self._http.request("DELETE", _terminals_path(self._sandbox_id, terminal_id))
