"""WebSocket connections for terminals and file watches, async and sync.

The asyncio client of ``websockets`` opens the socket with the SDK's credentials in the
upgrade request: the ``legacy`` client up to version 14.0 (Debian 12 ships 10.4), the
``websockets.asyncio`` client from 14.1 on (the legacy one is deprecated from 14.0). A refused
upgrade (401, 404, 409, 429 ...) is read whole, body included, and raised as the SDK's typed
error, like any other failed call.

``websockets`` 10.4 has no synchronous client, so :class:`SyncWebSocket` runs the asyncio
client on a private event loop in a background thread that starts with the connection and
ends with it (on :meth:`SyncWebSocket.close`, when the server closes it, or when the object
is garbage collected).

Reads are pulls: a message not read stays in ``websockets``' bounded queue (64 messages), and
TCP then slows the server, which pauses what feeds it (a terminal's program, as over ``ssh``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import threading
import weakref
from typing import Any, Coroutine, Mapping, Optional, Tuple, TypeVar, Union

import websockets
from websockets.exceptions import ConnectionClosed, InvalidHandshake, WebSocketException

from .errors import ConnectionError, RequestTimeoutError, SandboxdError, error_from_response, parse_body

T = TypeVar("T")

#: A message: text frames as ``str``, binary frames as ``bytes``.
Message = Union[str, bytes]

#: The most of a refused upgrade's body that is read (an error body is far smaller).
_MAX_REFUSAL_BODY = 64 * 1024
#: Largest message accepted from the server.
_MAX_MESSAGE = 16 * 1024 * 1024
#: Messages held before TCP slows the server down.
_MAX_QUEUE = 64


def _version(v: str) -> Tuple[int, int]:
    parts = [int(p) if p.isdigit() else 0 for p in (v.split(".") + ["0", "0"])[:2]]
    return parts[0], parts[1]


#: True when ``websockets`` deprecates its legacy client and has a complete new one: 14.1
#: on (14.0's lost the messages still queued when a connection closed, such as a
#: terminal's ``exit``; it keeps the legacy client, which warns).
MODERN = _version(getattr(websockets, "__version__", "0")) >= (14, 1)


class WebSocketClosed(Exception):
    """The connection has closed; ``code`` and ``reason`` are those of the close frame (1006 without one)."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(f"WebSocket closed with code {code}{': ' + reason if reason else ''}")
        self.code = code
        self.reason = reason


class _Refused(Exception):
    """The upgrade was answered with ``status`` and ``body`` instead of 101."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.body = body


_legacy_protocol: Optional[type] = None


def _legacy_protocol_class() -> type:
    """A legacy client protocol that reads the body of a refused upgrade and raises it as
    :class:`_Refused`, so the error keeps its ``kind`` and ``details`` (the legacy client
    reads only the status line and headers). Imported on first use: on websockets 14+ the
    import alone warns."""
    global _legacy_protocol
    if _legacy_protocol is None:
        legacy = importlib.import_module("websockets.legacy.client")
        base: Any = legacy.WebSocketClientProtocol

        class _Protocol(base):  # type: ignore[misc]
            async def read_http_response(self) -> Tuple[int, Any]:
                status, headers = await super().read_http_response()
                if status == 101 or status in (301, 302, 303, 307, 308):
                    return status, headers
                body = b""
                try:
                    length = headers.get("Content-Length")
                    if length is not None and length.isdigit():
                        body = await asyncio.wait_for(
                            self.reader.readexactly(min(int(length), _MAX_REFUSAL_BODY)), timeout=5
                        )
                    else:
                        body = await asyncio.wait_for(self.reader.read(_MAX_REFUSAL_BODY), timeout=5)
                except (asyncio.TimeoutError, asyncio.IncompleteReadError, OSError):
                    pass
                raise _Refused(int(status), body)

        _legacy_protocol = _Protocol
    return _legacy_protocol


async def _connect(url: str, headers: Mapping[str, str], open_timeout: float) -> Any:
    """Opens a client connection with the installed ``websockets``; a refused upgrade raises :class:`_Refused`."""
    common: Any = dict(
        open_timeout=open_timeout,
        # The server pings every 30 s; a client ping would time out while its reader is
        # paused (a full queue stops reading pongs too) and close a healthy connection.
        ping_interval=None,
        close_timeout=5,
        max_size=_MAX_MESSAGE,
        max_queue=_MAX_QUEUE,
        compression=None,
    )
    if MODERN:
        client: Any = importlib.import_module("websockets.asyncio.client")
        exceptions: Any = importlib.import_module("websockets.exceptions")
        try:
            return await client.connect(url, additional_headers=dict(headers), **common)
        except exceptions.InvalidStatus as e:
            raise _Refused(int(e.response.status_code), bytes(e.response.body or b"")) from None
    legacy: Any = importlib.import_module("websockets.legacy.client")
    try:
        return await legacy.connect(
            url, create_protocol=_legacy_protocol_class(), extra_headers=dict(headers), **common
        )
    except _Refused:
        raise
    except InvalidHandshake as e:
        status = getattr(e, "status_code", None)  # InvalidStatusCode without a body
        if isinstance(status, int):
            raise _Refused(status, b"") from None
        raise


class AsyncWebSocket:
    """One open client connection (use :meth:`open`)."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self._next: Optional[asyncio.Future[Message]] = None
        self._lock = asyncio.Lock()

    @classmethod
    async def open(cls, url: str, headers: Mapping[str, str], *, open_timeout: float, what: str) -> AsyncWebSocket:
        """Connects to ``url`` (ws:// or wss://); ``what`` names the operation in errors.

        Raises the typed error of a refused upgrade (NotFoundError, ConflictError,
        AuthenticationError, RateLimitError ...), RequestTimeoutError when the upgrade takes
        longer than ``open_timeout`` seconds, ConnectionError for any other failure.
        """
        try:
            conn = await _connect(url, headers, open_timeout)
        except _Refused as e:
            raise error_from_response(e.status, parse_body(e.body)) from None
        except (asyncio.TimeoutError, TimeoutError):
            raise RequestTimeoutError(
                f"Cannot {what}: no answer within {open_timeout:g} s", status=0, kind="timeout"
            ) from None
        except (OSError, WebSocketException, EOFError) as e:
            raise ConnectionError(f"Cannot {what}: {e}", status=0, kind="connection") from e
        return cls(conn)

    @property
    def close_code(self) -> Optional[int]:
        """The close code once closed (1006 when the connection dropped), else None."""
        code = self._conn.close_code
        return int(code) if code is not None else None

    @property
    def close_reason(self) -> str:
        return str(self._conn.close_reason or "")

    def _closed(self) -> WebSocketClosed:
        return WebSocketClosed(self.close_code or 1006, self.close_reason)

    async def recv(self, timeout: Optional[float] = None) -> Message:
        """The next message. Raises WebSocketClosed once closed, TimeoutError after ``timeout``
        seconds (the message is then not lost: the next call returns it)."""
        async with self._lock:
            if self._next is None:
                self._next = asyncio.ensure_future(self._conn.recv())
            task = self._next
            done, _ = await asyncio.wait({task}, timeout=timeout)
            if not done:
                raise TimeoutError(f"no message within {timeout:g} s")
            self._next = None
            try:
                return task.result()
            except ConnectionClosed:
                raise self._closed() from None
            except asyncio.CancelledError:
                raise self._closed() from None

    async def send(self, data: Message) -> None:
        """Sends a text (``str``) or binary (``bytes``) message. Raises WebSocketClosed once closed."""
        try:
            await self._conn.send(data)
        except ConnectionClosed:
            raise self._closed() from None

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """Closes the connection (a pending :meth:`recv` raises WebSocketClosed)."""
        await self._conn.close(code, reason)
        task, self._next = self._next, None
        if task is not None:
            if not task.done():
                task.cancel()
            elif not task.cancelled():
                task.exception()  # retrieved: the connection's end is no error to log


class _LoopThread:
    """A private event loop running in a daemon thread until :meth:`stop`."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        loop = self.loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            tasks = asyncio.all_tasks(loop)
            for t in tasks:
                t.cancel()
            if tasks:
                loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Runs ``coro`` on the loop and waits for its result (from any thread but the loop's)."""
        if not self._thread.is_alive():
            coro.close()
            raise WebSocketClosed(1006, "the connection's thread has ended")
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        # Waits in slices so that a loop stopped by another thread before it ran `coro` is
        # noticed instead of waited on forever.
        try:
            while not fut.done():
                concurrent.futures.wait([fut], timeout=0.25)
                if not fut.done() and not self._thread.is_alive():
                    fut.cancel()
                    break
        except BaseException:
            # Interrupted (Ctrl-C): `coro` stops too. A recv cancelled so keeps its message
            # for the next call.
            fut.cancel()
            raise
        try:
            return fut.result()
        except concurrent.futures.CancelledError:
            raise WebSocketClosed(1006, "the connection was closed") from None

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        """Stops the loop and waits for its thread to end (at once when called from that thread)."""
        if self._thread.is_alive():
            try:
                self.loop.call_soon_threadsafe(self.loop.stop)
            except RuntimeError:  # the loop has already closed
                pass
            if threading.current_thread() is not self._thread:
                self._thread.join()


def _abandoned(loop: asyncio.AbstractEventLoop, ws: AsyncWebSocket) -> None:
    """Finalizer of a SyncWebSocket collected unclosed: closes its connection, then its loop."""

    async def end() -> None:
        try:
            await asyncio.wait_for(ws.close(1000), timeout=2)
        except BaseException:
            pass
        finally:
            loop.stop()

    try:
        asyncio.run_coroutine_threadsafe(end(), loop)
    except RuntimeError:  # the loop has already closed
        pass


class SyncWebSocket:
    """A blocking client connection: :class:`AsyncWebSocket` on a private loop in a thread.

    Thread-safe: one thread may block in :meth:`recv` while another sends or closes (the
    blocked :meth:`recv` then raises WebSocketClosed). The thread ends when the connection
    is closed by :meth:`close`, closed by the server (seen by :meth:`recv`) or collected.
    """

    def __init__(self, lt: _LoopThread, ws: AsyncWebSocket) -> None:
        self._lt = lt
        self._ws = ws
        self._finalizer = weakref.finalize(self, _abandoned, lt.loop, ws)

    @classmethod
    def open(cls, url: str, headers: Mapping[str, str], *, open_timeout: float, what: str) -> SyncWebSocket:
        """As :meth:`AsyncWebSocket.open`; no thread is left behind when it raises."""
        lt = _LoopThread("sandboxd-websocket")
        try:
            ws = lt.run(AsyncWebSocket.open(url, headers, open_timeout=open_timeout, what=what))
        except BaseException:
            lt.stop()
            raise
        return cls(lt, ws)

    @property
    def close_code(self) -> Optional[int]:
        return self._ws.close_code

    @property
    def close_reason(self) -> str:
        return self._ws.close_reason

    def recv(self, timeout: Optional[float] = None) -> Message:
        """As :meth:`AsyncWebSocket.recv`; once it raises WebSocketClosed the thread has ended."""
        try:
            return self._lt.run(self._ws.recv(timeout))
        except WebSocketClosed:
            self._lt.stop()
            raise

    def send(self, data: Message) -> None:
        self._lt.run(self._ws.send(data))

    def close(self, code: int = 1000, reason: str = "") -> None:
        """Closes the connection and ends its thread; closing twice is fine."""
        if self._lt.alive:
            try:
                self._lt.run(self._ws.close(code, reason))
            except (WebSocketClosed, SandboxdError, OSError):
                pass
            finally:
                self._lt.stop()
        self._finalizer.detach()
