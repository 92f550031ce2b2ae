"""A sandbox's files (``sandbox.files``): upload and download streamed, list, stat, mkdir,
move, remove and watch.

Every operation runs inside the sandbox through its agent, as the image's user unless
``user`` says otherwise (``root``, a uid, ``uid:gid`` or a user name of the sandbox). Paths
must be absolute. Errors are the SDK's: a missing path is :class:`~sandboxd.errors.NotFoundError`
(its ``details['path']`` names it), a directory where a file is needed (or the reverse)
:class:`~sandboxd.errors.ValidationError`, an existing target
:class:`~sandboxd.errors.ConflictError`, a full disk :class:`~sandboxd.errors.NoSpaceError`,
a refusal :class:`~sandboxd.errors.PermissionError`.

Uploads and downloads are streamed: :meth:`Files.write` sends a file object or an iterator
chunk by chunk (never read whole into memory), and :meth:`Files.stream` hands the content
over as it arrives.
"""

from __future__ import annotations

import asyncio
import inspect
import io
import json
import os
import stat as stat_module
from types import TracebackType
from typing import (
    TYPE_CHECKING,
    Any,
    AsyncContextManager,
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    ContextManager,
    Dict,
    Iterable,
    Iterator,
    List,
    Optional,
    Protocol,
    Tuple,
    Type,
    Union,
)

import httpx

from ._wire import file_entry, file_event, quote
from ._ws import AsyncWebSocket, SyncWebSocket, WebSocketClosed
from .errors import ConnectionError, NotFoundError, RequestTimeoutError, SandboxdError
from .types import FileEntry, FileEvent

if TYPE_CHECKING:
    from ._http import AsyncHttp, SyncHttp

__all__ = [
    "Files",
    "AsyncFiles",
    "FileList",
    "FileDownload",
    "AsyncFileDownload",
    "FileWatcher",
    "AsyncFileWatcher",
    "UploadData",
    "AsyncUploadData",
    "SupportsRead",
    "SupportsAsyncRead",
]



class SupportsRead(Protocol):
    """A file object: ``open(path, "rb")``, ``io.BytesIO``, a text file (sent as UTF-8) ..."""

    def read(self, __size: int) -> Union[bytes, str]: ...


class SupportsAsyncRead(Protocol):
    """A file object whose ``read`` is a coroutine (aiofiles, anyio)."""

    def read(self, __size: int) -> Awaitable[Union[bytes, str]]: ...


#: Data :meth:`Files.write` takes: text (sent as UTF-8), bytes, a local file's path as a
#: :class:`pathlib.Path` (``os.PathLike``: a ``str`` is content, never a path), a file
#: object, or an iterable of bytes (or str) chunks.
UploadData = Union[
    str, bytes, bytearray, memoryview, "os.PathLike[str]", SupportsRead, Iterable[Union[bytes, str]]
]
#: Data :meth:`AsyncFiles.write` takes: the same, plus an async iterable of chunks or a file
#: object whose ``read`` is a coroutine.
AsyncUploadData = Union[UploadData, SupportsAsyncRead, AsyncIterable[Union[bytes, str]]]

#: Bytes read from a file object per chunk sent.
CHUNK_SIZE = 64 * 1024


class FileList(List[FileEntry]):
    """A directory listing; :attr:`truncated` is True when the server stopped at 10,000 entries."""

    truncated: bool

    def __init__(self, entries: Iterable[FileEntry], truncated: bool = False) -> None:
        super().__init__(entries)
        self.truncated = truncated


def _files_path(sandbox_id: str, sub: str = "") -> str:
    return f"/api/v1/sandboxes/{quote(sandbox_id)}/files{sub}"


def _octal(mode: Union[int, str, None]) -> Optional[str]:
    if mode is None:
        return None
    if isinstance(mode, str):
        return mode
    if isinstance(mode, bool) or not isinstance(mode, int) or mode < 0 or mode > 0o7777:
        raise ValueError(f"mode must be 0 to 0o7777 (got {mode!r})")
    return format(mode, "04o")


def _range_header(r: Optional[Tuple[int, Optional[int]]]) -> Dict[str, str]:
    if r is None:
        return {}
    start, end = r

    def ok(n: Optional[int]) -> bool:
        return n is None or (isinstance(n, int) and not isinstance(n, bool) and n >= 0)

    if start is None or not ok(start) or not ok(end) or (end is not None and end < start):
        raise ValueError("range must be (start, end) or (start, None) with integers 0 <= start <= end")
    return {"range": f"bytes={start}-{'' if end is None else end}"}


def _names_path(details: Any) -> bool:
    return isinstance(details, dict) and isinstance(details.get("path"), str)


def _to_bytes(chunk: Union[bytes, bytearray, memoryview, str]) -> bytes:
    if isinstance(chunk, str):
        return chunk.encode("utf-8")
    if isinstance(chunk, (bytes, bytearray, memoryview)):
        return bytes(chunk)
    raise TypeError(f"upload chunks must be bytes or str (got {type(chunk).__name__})")


def _file_size(f: Any) -> Optional[int]:
    """The bytes left to read in a regular file opened in binary mode, else None (sent chunked)."""
    if isinstance(f, io.TextIOBase):
        return None
    try:
        fd = f.fileno()
        st = os.fstat(fd)
        if not stat_module.S_ISREG(st.st_mode):
            return None
        pos = f.tell()
        return max(0, st.st_size - pos) if isinstance(pos, int) else None
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return None


def _is_file(x: Any) -> bool:
    return callable(getattr(x, "read", None))


def _read_chunks(f: Any) -> Iterator[bytes]:
    while True:
        chunk = f.read(CHUNK_SIZE)
        if not chunk:
            return
        yield _to_bytes(chunk)


def _read_local(p: "os.PathLike[str]") -> Iterator[bytes]:
    """The chunks of a local file, opened when the upload starts and closed when it ends."""
    with open(p, "rb") as f:
        yield from _read_chunks(f)


async def _aread_local(p: "os.PathLike[str]") -> AsyncIterator[bytes]:
    f = await asyncio.to_thread(lambda: open(p, "rb"))
    try:
        async for chunk in _aread_chunks(f):
            yield chunk
    finally:
        f.close()


def _local_size(p: "os.PathLike[str]") -> int:
    """The size of a local file; raises FileNotFoundError (before any request) when it is missing."""
    return os.stat(p).st_size


def _iter_chunks(it: Iterable[Union[bytes, str]]) -> Iterator[bytes]:
    for chunk in it:
        b = _to_bytes(chunk)
        if b:
            yield b


def _sync_body(data: Any, size: Optional[int]) -> Tuple[Any, Optional[int]]:
    """The httpx content of ``data`` and its length when known."""
    if isinstance(data, str):
        b = data.encode("utf-8")
        return b, len(b)
    if isinstance(data, (bytes, bytearray, memoryview)):
        b = bytes(data)
        return b, len(b)
    if isinstance(data, os.PathLike):
        n = _local_size(data)
        return _read_local(data), size if size is not None else n
    if _is_file(data):
        return _read_chunks(data), size if size is not None else _file_size(data)
    if isinstance(data, Iterable):
        return _iter_chunks(data), size
    raise TypeError(
        f"data must be str, bytes, a pathlib.Path, a file object or an iterable of bytes (got {type(data).__name__})"
    )


async def _aread_chunks(f: Any) -> AsyncIterator[bytes]:
    read = f.read
    is_async = inspect.iscoroutinefunction(read)
    while True:
        # A blocking file is read off the event loop, one chunk at a time.
        chunk = await read(CHUNK_SIZE) if is_async else await asyncio.to_thread(read, CHUNK_SIZE)
        if inspect.isawaitable(chunk):  # a read that returns an awaitable without being async def
            chunk = await chunk
        if not chunk:
            return
        yield _to_bytes(chunk)


async def _aiter_chunks(it: Any) -> AsyncIterator[bytes]:
    if isinstance(it, AsyncIterable):
        async for chunk in it:
            b = _to_bytes(chunk)
            if b:
                yield b
    else:
        for chunk in it:
            b = _to_bytes(chunk)
            if b:
                yield b


def _async_body(data: Any, size: Optional[int]) -> Tuple[Any, Optional[int]]:
    if isinstance(data, (str, bytes, bytearray, memoryview)):
        return _sync_body(data, size)
    if isinstance(data, os.PathLike):
        n = _local_size(data)
        return _aread_local(data), size if size is not None else n
    if _is_file(data):
        return _aread_chunks(data), size if size is not None else _file_size(data)
    if isinstance(data, (AsyncIterable, Iterable)):
        return _aiter_chunks(data), size
    raise TypeError(
        "data must be str, bytes, a pathlib.Path, a file object, or an iterable or async iterable of bytes "
        f"(got {type(data).__name__})"
    )


def _upload_headers(content: Any, size: Optional[int]) -> Dict[str, str]:
    h = {"content-type": "application/octet-stream"}
    if size is not None and not isinstance(content, bytes):
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ValueError(f"size must be an integer >= 0 (got {size!r})")
        h["content-length"] = str(size)
    return h


def _transfer_error(e: httpx.HTTPError, what: str) -> SandboxdError:
    if isinstance(e, httpx.TimeoutException):
        return RequestTimeoutError(f"{what}: no data in time", status=0, kind="timeout")
    return ConnectionError(f"{what}: {e or type(e).__name__}", status=0, kind="connection")


def _open_timeout(http: Any) -> float:
    t = getattr(getattr(http, "config", None), "timeout", None)
    return float(t) if isinstance(t, (int, float)) and t > 0 else 60.0


def _watch_params(path: str, recursive: bool, user: Optional[str]) -> Dict[str, Optional[str]]:
    return {"path": path, "recursive": "true" if recursive else None, "user": user}


def _parse_event(msg: Union[str, bytes]) -> Optional[FileEvent]:
    """A change message; anything else (binary, not JSON, no type or path) is ignored."""
    if not isinstance(msg, str):
        return None
    try:
        m = json.loads(msg)
    except ValueError:
        return None
    if isinstance(m, dict) and isinstance(m.get("type"), str) and isinstance(m.get("path"), str):
        return file_event(m)
    if isinstance(m, dict) and m.get("type") == "overflow":
        return FileEvent(type="overflow", path="")
    return None


# --------------------------------------------------------------------------- downloads


class FileDownload:
    """A file's content as it arrives (sync). Iterate it for the chunks; ``with`` (or
    :meth:`close`) ends the download early. It closes itself once read to the end."""

    def __init__(self, cm: ContextManager[httpx.Response], path: str, chunk_size: int) -> None:
        self._cm = cm
        self._res = cm.__enter__()
        self._closed = False
        self._chunk_size = chunk_size
        #: The path downloaded.
        self.path = path
        length = self._res.headers.get("content-length")
        #: The number of bytes that will arrive (the ``Content-Length``), when the server said.
        self.size: Optional[int] = int(length) if length and length.isdigit() else None
        #: ``Content-Range`` of a ranged download (``bytes a-b/size``), else None.
        self.content_range: Optional[str] = self._res.headers.get("content-range")

    def __iter__(self) -> Iterator[bytes]:
        if self._closed:
            return
        try:
            for chunk in self._res.iter_bytes(self._chunk_size):
                yield chunk
        except httpx.HTTPError as e:
            raise _transfer_error(e, f"Download of {self.path} broke off") from e
        finally:
            self.close()

    def read(self) -> bytes:
        """The rest of the content, whole."""
        return b"".join(self)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._cm.__exit__(None, None, None)

    def __enter__(self) -> FileDownload:
        return self

    def __exit__(
        self, et: Optional[Type[BaseException]], ev: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.close()


class AsyncFileDownload:
    """A file's content as it arrives (asyncio): ``async for chunk in download``; ``async with``
    (or :meth:`aclose`) ends it early. It closes itself once read to the end."""

    def __init__(self, cm: AsyncContextManager[httpx.Response], res: httpx.Response, path: str, chunk_size: int) -> None:
        self._cm = cm
        self._res = res
        self._closed = False
        self._chunk_size = chunk_size
        self.path = path
        length = res.headers.get("content-length")
        self.size: Optional[int] = int(length) if length and length.isdigit() else None
        self.content_range: Optional[str] = res.headers.get("content-range")

    @classmethod
    async def _open(cls, cm: AsyncContextManager[httpx.Response], path: str, chunk_size: int) -> AsyncFileDownload:
        res = await cm.__aenter__()
        return cls(cm, res, path, chunk_size)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._closed:
            return
        try:
            async for chunk in self._res.aiter_bytes(self._chunk_size):
                yield chunk
        except httpx.HTTPError as e:
            raise _transfer_error(e, f"Download of {self.path} broke off") from e
        finally:
            await self.aclose()

    async def read(self) -> bytes:
        """The rest of the content, whole."""
        return b"".join([c async for c in self])

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            await self._cm.__aexit__(None, None, None)

    async def __aenter__(self) -> AsyncFileDownload:
        return self

    async def __aexit__(
        self, et: Optional[Type[BaseException]], ev: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        await self.aclose()


# --------------------------------------------------------------------------- watches


class FileWatcher:
    """A running watch (sync): ``for event in watcher`` yields each change until the watch
    ends; ``with`` (or :meth:`close`, from any thread) stops it.

    Events are :class:`~sandboxd.types.FileEvent`: ``create``, ``write``, ``rename`` (of the
    old path; the new one gets ``create``), ``remove``, ``chmod``, and ``overflow`` (path
    ``""``) when events were lost.
    """

    def __init__(self, ws: SyncWebSocket, path: str) -> None:
        self._ws = ws
        #: The directory watched.
        self.path = path
        self._ended = False

    @classmethod
    def open(
        cls, http: SyncHttp, sandbox_id: str, path: str, *, recursive: bool = False, user: Optional[str] = None
    ) -> FileWatcher:
        url = http.ws_url(_files_path(sandbox_id, "/watch"), _watch_params(path, recursive, user))
        ws = SyncWebSocket.open(url, http.auth_headers(), open_timeout=_open_timeout(http), what=f"watch {path}")
        return cls(ws, path)

    @property
    def close_code(self) -> Optional[int]:
        """How the watch ended (1000: closed, or the sandbox stopped), once it has."""
        return self._ws.close_code

    @property
    def close_reason(self) -> str:
        return self._ws.close_reason

    def next_event(self, timeout: Optional[float] = None) -> Optional[FileEvent]:
        """The next change; None once the watch has ended. Raises TimeoutError when none comes
        within ``timeout`` seconds (the watch goes on)."""
        while not self._ended:
            try:
                msg = self._ws.recv(timeout)
            except WebSocketClosed:
                self._ended = True
                return None
            ev = _parse_event(msg)
            if ev is not None:
                return ev
        return None

    def __iter__(self) -> Iterator[FileEvent]:
        while True:
            ev = self.next_event()
            if ev is None:
                return
            yield ev

    def close(self) -> None:
        """Stops watching; iteration ends (events not yet read are dropped)."""
        self._ended = True
        self._ws.close(1000)

    def __enter__(self) -> FileWatcher:
        return self

    def __exit__(
        self, et: Optional[Type[BaseException]], ev: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.close()


class AsyncFileWatcher:
    """A running watch (asyncio): ``async for event in watcher``; ``async with`` (or
    :meth:`close`) stops it. See :class:`FileWatcher`."""

    def __init__(self, ws: AsyncWebSocket, path: str) -> None:
        self._ws = ws
        self.path = path
        self._ended = False

    @classmethod
    async def open(
        cls, http: AsyncHttp, sandbox_id: str, path: str, *, recursive: bool = False, user: Optional[str] = None
    ) -> AsyncFileWatcher:
        url = http.ws_url(_files_path(sandbox_id, "/watch"), _watch_params(path, recursive, user))
        ws = await AsyncWebSocket.open(url, http.auth_headers(), open_timeout=_open_timeout(http), what=f"watch {path}")
        return cls(ws, path)

    @property
    def close_code(self) -> Optional[int]:
        return self._ws.close_code

    @property
    def close_reason(self) -> str:
        return self._ws.close_reason

    async def next_event(self, timeout: Optional[float] = None) -> Optional[FileEvent]:
        """See :meth:`FileWatcher.next_event`."""
        while not self._ended:
            try:
                msg = await self._ws.recv(timeout)
            except WebSocketClosed:
                self._ended = True
                return None
            ev = _parse_event(msg)
            if ev is not None:
                return ev
        return None

    async def __aiter__(self) -> AsyncIterator[FileEvent]:
        while True:
            ev = await self.next_event()
            if ev is None:
                return
            yield ev

    async def close(self) -> None:
        """See :meth:`FileWatcher.close`."""
        self._ended = True
        await self._ws.close(1000)

    async def __aenter__(self) -> AsyncFileWatcher:
        return self

    async def __aexit__(
        self, et: Optional[Type[BaseException]], ev: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        await self.close()


# --------------------------------------------------------------------------- files


class Files:
    """The files of one sandbox (sync). Paths must be absolute.

    Every method takes ``user`` (who the operation runs as) and ``timeout`` (seconds, per
    network wait: a long transfer is fine as long as data keeps moving; default the client's).
    """

    def __init__(self, http: SyncHttp, sandbox_id: str) -> None:
        self._http = http
        self._sandbox_id = sandbox_id

    def _path(self, sub: str = "") -> str:
        return _files_path(self._sandbox_id, sub)

    def write(
        self,
        path: str,
        data: UploadData,
        *,
        mode: Union[int, str, None] = None,
        size: Optional[int] = None,
        user: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> FileEntry:
        """Writes ``data`` to ``path`` (parents are created) and returns the new entry.

        ``data``: str (the content, as UTF-8), bytes, a local file as a ``pathlib.Path``, a
        file object (``open(p, "rb")``), or an iterable of bytes chunks; paths, file objects
        and iterables are streamed, never read whole. ``mode``:
        permission bits (``0o755`` or ``"0755"``; default: an existing file keeps its mode, a
        new one gets 0644). ``size``: the length of a streamed ``data``, sent as
        Content-Length (found by itself for a regular file). The server writes beside the
        target and renames over it, so a failed upload leaves the old file. Raises NoSpaceError,
        ValidationError, ConflictError (sandbox not started), NotFoundError, PermissionError.
        """
        content, n = _sync_body(data, size)
        r = self._http.request(
            "PUT",
            self._path("/content"),
            params={"path": path, "mode": _octal(mode), "user": user},
            content=content,
            headers=_upload_headers(content, n),
            timeout=timeout,
        )
        return file_entry(r.json()["entry"])

    def read(
        self,
        path: str,
        *,
        range: Optional[Tuple[int, Optional[int]]] = None,  # noqa: A002 - the API's name
        user: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> bytes:
        """The file's content. ``range=(start, end)``: only bytes start to end, both included
        (``end`` None: to the end). Raises NotFoundError, ValidationError (a directory),
        RangeNotSatisfiableError (a range past the end)."""
        r = self._http.request(
            "GET",
            self._path("/content"),
            params={"path": path, "user": user},
            headers={"accept": "*/*", **_range_header(range)},
            timeout=timeout,
        )
        return r.content

    def read_text(
        self,
        path: str,
        *,
        encoding: str = "utf-8",
        errors: str = "strict",
        user: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> str:
        """The file's content decoded as text (UTF-8 unless ``encoding`` says otherwise)."""
        return self.read(path, user=user, timeout=timeout).decode(encoding, errors)

    def stream(
        self,
        path: str,
        *,
        range: Optional[Tuple[int, Optional[int]]] = None,  # noqa: A002
        chunk_size: int = CHUNK_SIZE,
        user: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> FileDownload:
        """Opens a download; iterate the :class:`FileDownload` for the content as it arrives::

            with sb.files.stream("/data/big.bin") as d, open("big.bin", "wb") as out:
                for chunk in d:
                    out.write(chunk)

        Raises (at once) what :meth:`read` raises; a connection lost midway raises
        ConnectionError from the iteration."""
        cm = self._http.stream(
            "GET",
            self._path("/content"),
            params={"path": path, "user": user},
            headers={"accept": "*/*", **_range_header(range)},
            timeout=timeout,
        )
        return FileDownload(cm, path, chunk_size)

    def list(
        self, path: str, *, depth: Optional[int] = None, user: Optional[str] = None, timeout: Optional[float] = None
    ) -> FileList:
        """The entries under a directory, ``depth`` levels deep (1, the default, to 10).
        Raises NotFoundError, ValidationError (not a directory)."""
        r = self._http.request(
            "GET", self._path(""), params={"path": path, "depth": depth, "user": user}, timeout=timeout
        )
        body = r.json()
        return FileList((file_entry(e) for e in body["entries"]), body.get("truncated") is True)

    def stat(self, path: str, *, user: Optional[str] = None, timeout: Optional[float] = None) -> FileEntry:
        """One entry (a symlink is described itself, not followed). Raises NotFoundError."""
        r = self._http.request("GET", self._path("/stat"), params={"path": path, "user": user}, timeout=timeout)
        return file_entry(r.json()["entry"])

    def exists(self, path: str, *, user: Optional[str] = None, timeout: Optional[float] = None) -> bool:
        """True when ``path`` exists; False on the 404 of a missing path (a missing sandbox
        still raises NotFoundError)."""
        try:
            self.stat(path, user=user, timeout=timeout)
            return True
        except NotFoundError as e:
            if _names_path(e.details):
                return False
            raise

    def mkdir(self, path: str, *, user: Optional[str] = None, timeout: Optional[float] = None) -> FileEntry:
        """Creates a directory and its parents; returns its entry. Raises ConflictError when ``path`` exists."""
        r = self._http.request(
            "POST", self._path("/mkdir"), params={"user": user}, json={"path": path}, timeout=timeout
        )
        return file_entry(r.json()["entry"])

    def move(self, src: str, dst: str, *, user: Optional[str] = None, timeout: Optional[float] = None) -> FileEntry:
        """Moves or renames ``src`` to ``dst`` (across mounts too); returns the entry of ``dst``.
        Raises ConflictError when ``dst`` exists, NotFoundError when ``src`` does not."""
        r = self._http.request(
            "POST", self._path("/move"), params={"user": user}, json={"from": src, "to": dst}, timeout=timeout
        )
        return file_entry(r.json()["entry"])

    def rename(self, src: str, dst: str, *, user: Optional[str] = None, timeout: Optional[float] = None) -> FileEntry:
        """The same as :meth:`move`."""
        return self.move(src, dst, user=user, timeout=timeout)

    def remove(self, path: str, *, user: Optional[str] = None, timeout: Optional[float] = None) -> None:
        """Removes a file, a symlink (not what it points to) or a directory with everything in
        it. Raises NotFoundError."""
        self._http.request("DELETE", self._path(""), params={"path": path, "user": user}, timeout=timeout)

    def watch(self, path: str, *, recursive: bool = False, user: Optional[str] = None) -> FileWatcher:
        """Watches a directory (``recursive``: everything under it); returns once watching::

            with sb.files.watch("/work", recursive=True) as w:
                for event in w:
                    print(event.type, event.path)

        Raises NotFoundError, ValidationError (not a directory), ConflictError (16 watches
        already), ConnectionError."""
        return FileWatcher.open(self._http, self._sandbox_id, path, recursive=recursive, user=user)


class AsyncFiles:
    """The files of one sandbox (asyncio): the same methods as :class:`Files`, awaited."""

    def __init__(self, http: AsyncHttp, sandbox_id: str) -> None:
        self._http = http
        self._sandbox_id = sandbox_id

    def _path(self, sub: str = "") -> str:
        return _files_path(self._sandbox_id, sub)

    async def write(
        self,
        path: str,
        data: AsyncUploadData,
        *,
        mode: Union[int, str, None] = None,
        size: Optional[int] = None,
        user: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> FileEntry:
        """See :meth:`Files.write`; ``data`` may also be an async iterable of bytes, or a file
        object whose ``read`` is a coroutine. A plain file object is read off the event loop."""
        content, n = _async_body(data, size)
        r = await self._http.request(
            "PUT",
            self._path("/content"),
            params={"path": path, "mode": _octal(mode), "user": user},
            content=content,
            headers=_upload_headers(content, n),
            timeout=timeout,
        )
        return file_entry(r.json()["entry"])

    async def read(
        self,
        path: str,
        *,
        range: Optional[Tuple[int, Optional[int]]] = None,  # noqa: A002
        user: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> bytes:
        """See :meth:`Files.read`."""
        r = await self._http.request(
            "GET",
            self._path("/content"),
            params={"path": path, "user": user},
            headers={"accept": "*/*", **_range_header(range)},
            timeout=timeout,
        )
        return r.content

    async def read_text(
        self,
        path: str,
        *,
        encoding: str = "utf-8",
        errors: str = "strict",
        user: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> str:
        """See :meth:`Files.read_text`."""
        return (await self.read(path, user=user, timeout=timeout)).decode(encoding, errors)

    async def stream(
        self,
        path: str,
        *,
        range: Optional[Tuple[int, Optional[int]]] = None,  # noqa: A002
        chunk_size: int = CHUNK_SIZE,
        user: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> AsyncFileDownload:
        """See :meth:`Files.stream`::

            async with await sb.files.stream("/data/big.bin") as d:
                async for chunk in d:
                    ...
        """
        cm = self._http.stream(
            "GET",
            self._path("/content"),
            params={"path": path, "user": user},
            headers={"accept": "*/*", **_range_header(range)},
            timeout=timeout,
        )
        return await AsyncFileDownload._open(cm, path, chunk_size)

    async def list(
        self, path: str, *, depth: Optional[int] = None, user: Optional[str] = None, timeout: Optional[float] = None
    ) -> FileList:
        """See :meth:`Files.list`."""
        r = await self._http.request(
            "GET", self._path(""), params={"path": path, "depth": depth, "user": user}, timeout=timeout
        )
        body = r.json()
        return FileList((file_entry(e) for e in body["entries"]), body.get("truncated") is True)

    async def stat(self, path: str, *, user: Optional[str] = None, timeout: Optional[float] = None) -> FileEntry:
        """See :meth:`Files.stat`."""
        r = await self._http.request(
            "GET", self._path("/stat"), params={"path": path, "user": user}, timeout=timeout
        )
        return file_entry(r.json()["entry"])

    async def exists(self, path: str, *, user: Optional[str] = None, timeout: Optional[float] = None) -> bool:
        """See :meth:`Files.exists`."""
        try:
            await self.stat(path, user=user, timeout=timeout)
            return True
        except NotFoundError as e:
            if _names_path(e.details):
                return False
            raise

    async def mkdir(self, path: str, *, user: Optional[str] = None, timeout: Optional[float] = None) -> FileEntry:
        """See :meth:`Files.mkdir`."""
        r = await self._http.request(
            "POST", self._path("/mkdir"), params={"user": user}, json={"path": path}, timeout=timeout
        )
        return file_entry(r.json()["entry"])

    async def move(
        self, src: str, dst: str, *, user: Optional[str] = None, timeout: Optional[float] = None
    ) -> FileEntry:
        """See :meth:`Files.move`."""
        r = await self._http.request(
            "POST", self._path("/move"), params={"user": user}, json={"from": src, "to": dst}, timeout=timeout
        )
        return file_entry(r.json()["entry"])

    async def rename(
        self, src: str, dst: str, *, user: Optional[str] = None, timeout: Optional[float] = None
    ) -> FileEntry:
        """The same as :meth:`move`."""
        return await self.move(src, dst, user=user, timeout=timeout)

    async def remove(self, path: str, *, user: Optional[str] = None, timeout: Optional[float] = None) -> None:
        """See :meth:`Files.remove`."""
        await self._http.request("DELETE", self._path(""), params={"path": path, "user": user}, timeout=timeout)

    async def watch(self, path: str, *, recursive: bool = False, user: Optional[str] = None) -> AsyncFileWatcher:
        """See :meth:`Files.watch`::

            async with await sb.files.watch("/work") as w:
                async for event in w:
                    ...
        """
        return await AsyncFileWatcher.open(self._http, self._sandbox_id, path, recursive=recursive, user=user)
