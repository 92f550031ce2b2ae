"""The HTTP core of the SDK: auth headers, timeouts, typed errors, and bounded retries of
idempotent reads (GET, HEAD) after a connection error, 429, 502, 503 or 504, like the
TypeScript SDK's ``http.ts``. Creates and other writes are never retried, so a create cannot
run twice. :class:`SyncHttp` and :class:`AsyncHttp` share everything but the I/O.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from typing import (
    Any,
    AsyncIterator,
    Dict,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
)
from urllib.parse import urlencode

import httpx

from ._config import ClientConfig
from ._version import __version__
from .errors import (
    ConnectionError,
    RequestTimeoutError,
    SandboxdError,
    error_from_response,
    parse_body,
)

#: A query value; None values are left out, a list repeats the parameter.
QueryValue = Union[str, int, float, bool, None, Sequence[Union[str, int]]]
Query = Mapping[str, QueryValue]
#: A timeout in seconds, or an httpx.Timeout for finer control (e.g. no read limit).
TimeoutArg = Union[float, httpx.Timeout, None]

RETRY_STATUSES = frozenset({429, 502, 503, 504})
IDEMPOTENT = frozenset({"GET", "HEAD"})
MAX_BACKOFF_S = 4.0
MAX_RETRY_AFTER_S = 10.0


def retry_wait(e: BaseException, n: int) -> float:
    """Seconds to wait before retry ``n`` (0-based) after ``e``: what the server asked for when
    it said (a 429's ``details.retryAfterMs``, else ``Retry-After``), at most 10 s; else full
    jitter over 0.25 s * 2^n, capped at 4 s."""
    if isinstance(e, SandboxdError):
        asked: Optional[float] = None
        d = e.details
        if e.status == 429 and isinstance(d, dict):
            precise = d.get("retryAfterMs")
            if isinstance(precise, (int, float)) and not isinstance(precise, bool) and precise >= 0:
                asked = float(precise)
        if asked is None:
            asked = e.retry_after_ms
        if asked is not None:
            return min(asked / 1000.0, MAX_RETRY_AFTER_S)
    return random.random() * min(0.25 * float(2**n), MAX_BACKOFF_S)


def _retryable(e: BaseException) -> bool:
    if isinstance(e, RequestTimeoutError):
        return False
    if isinstance(e, ConnectionError):
        return True
    return isinstance(e, SandboxdError) and e.status in RETRY_STATUSES


def _clean_params(params: Optional[Query]) -> List[Tuple[str, str]]:
    out: List[Tuple[str, str]] = []
    for k, v in (params or {}).items():
        if v is None:
            continue
        if isinstance(v, bool):
            out.append((k, "true" if v else "false"))
        elif isinstance(v, (list, tuple)):
            out.extend((k, str(x)) for x in v)
        else:
            out.append((k, str(v)))
    return out


class _Base:
    """What the sync and async transports share: URLs, headers, error mapping."""

    config: ClientConfig

    def __init__(self, config: ClientConfig) -> None:
        self.config = config

    def url(self, path: str, params: Optional[Query] = None) -> str:
        """The absolute URL of an API path such as ``/api/v1/sandboxes``."""
        qs = urlencode(_clean_params(params))
        return f"{self.config.api_url}{path}{'?' + qs if qs else ''}"

    def ws_url(self, path: str, params: Optional[Query] = None) -> str:
        """The ws:// (or wss://) URL of an API path."""
        u = self.url(path, params)
        return "ws" + u[4:] if u.startswith("http") else u

    def auth_headers(self) -> Dict[str, str]:
        """Headers that authenticate a request (empty without an API key)."""
        return {"authorization": f"Bearer {self.config.api_key}"} if self.config.api_key else {}

    def _headers(self, extra: Optional[Mapping[str, str]]) -> Dict[str, str]:
        h = {"accept": "application/json", "user-agent": f"sandboxd-python/{__version__}"}
        h.update(self.config.headers)
        h.update(self.auth_headers())
        h.update(extra or {})
        return h

    def _timeout(self, timeout: TimeoutArg) -> httpx.Timeout:
        if isinstance(timeout, httpx.Timeout):
            return timeout
        return httpx.Timeout(self.config.timeout if timeout is None else timeout)

    def _build(
        self,
        client: Union[httpx.Client, httpx.AsyncClient],
        method: str,
        path: str,
        params: Optional[Query],
        json: Any,
        content: Any,
        headers: Optional[Mapping[str, str]],
        timeout: TimeoutArg,
    ) -> httpx.Request:
        kw: Dict[str, Any] = {}
        if json is not None:
            kw["json"] = json
        elif content is not None:
            kw["content"] = content
        return client.build_request(
            method,
            self.config.api_url + path,
            params=tuple(_clean_params(params)),
            headers=self._headers(headers),
            timeout=self._timeout(timeout),
            **kw,
        )

    def _no_answer(self, e: Exception, method: str, path: str, timeout: TimeoutArg) -> SandboxdError:
        if isinstance(e, httpx.TimeoutException):
            t = self._timeout(timeout)
            secs = t.read if t.read is not None else t.connect
            return RequestTimeoutError(
                f"{method} {path} got no answer within {secs} s", status=0, kind="timeout"
            )
        why = str(e) or type(e).__name__
        return ConnectionError(
            f"Cannot reach the sandboxd API at {self.config.api_url} ({why})", status=0, kind="connection"
        )

    @staticmethod
    def _error(res: httpx.Response, data: bytes) -> SandboxdError:
        return error_from_response(
            res.status_code,
            parse_body(data),
            reason=res.reason_phrase,
            retry_after=res.headers.get("retry-after"),
        )


class SyncHttp(_Base):
    """Sends requests to one server with one set of credentials (blocking). Thread-safe."""

    def __init__(self, config: ClientConfig, client: Optional[httpx.Client] = None) -> None:
        super().__init__(config)
        self.client = client or httpx.Client(follow_redirects=False)

    def close(self) -> None:
        self.client.close()

    def _retrying_send(
        self, method: str, path: str, build: Any, stream: bool, timeout: TimeoutArg
    ) -> httpx.Response:
        retries = self.config.max_retries if method.upper() in IDEMPOTENT else 0
        n = 0
        while True:
            try:
                try:
                    res = self.client.send(build(), stream=stream)
                except httpx.TransportError as e:
                    raise self._no_answer(e, method, path, timeout) from e
                if res.status_code < 200 or res.status_code > 299:
                    try:
                        data = res.read()
                    except httpx.HTTPError:
                        data = b""
                    finally:
                        res.close()
                    raise self._error(res, data)
                return res
            except SandboxdError as e:
                if not _retryable(e) or n >= retries:
                    raise
                time.sleep(retry_wait(e, n))
                n += 1

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Optional[Query] = None,
        json: Any = None,
        content: Any = None,
        headers: Optional[Mapping[str, str]] = None,
        timeout: TimeoutArg = None,
    ) -> httpx.Response:
        """Sends a request and reads the answer; raises the typed error of a non-2xx answer."""

        def build() -> httpx.Request:
            return self._build(self.client, method, path, params, json, content, headers, timeout)

        res = self._retrying_send(method, path, build, True, timeout)
        try:
            res.read()
        except httpx.TransportError as e:
            raise self._no_answer(e, method, path, timeout) from e
        finally:
            res.close()
        return res

    def request_json(self, method: str, path: str, **kw: Any) -> Any:
        """:meth:`request`, then the parsed JSON of the answer (None for an empty one)."""
        return parse_body(self.request(method, path, **kw).content)

    @contextlib.contextmanager
    def stream(
        self,
        method: str,
        path: str,
        *,
        params: Optional[Query] = None,
        json: Any = None,
        content: Any = None,
        headers: Optional[Mapping[str, str]] = None,
        timeout: TimeoutArg = None,
    ) -> Iterator[httpx.Response]:
        """Opens a request whose answer is read as a stream; the body is the caller's to read
        within the ``with``. Raises the typed error of a non-2xx answer (its body read)."""

        def build() -> httpx.Request:
            return self._build(self.client, method, path, params, json, content, headers, timeout)

        res = self._retrying_send(method, path, build, True, timeout)
        try:
            yield res
        finally:
            res.close()


class AsyncHttp(_Base):
    """Sends requests to one server with one set of credentials (asyncio)."""

    def __init__(self, config: ClientConfig, client: Optional[httpx.AsyncClient] = None) -> None:
        super().__init__(config)
        self.client = client or httpx.AsyncClient(follow_redirects=False)

    async def close(self) -> None:
        await self.client.aclose()

    async def _retrying_send(
        self, method: str, path: str, build: Any, stream: bool, timeout: TimeoutArg
    ) -> httpx.Response:
        retries = self.config.max_retries if method.upper() in IDEMPOTENT else 0
        n = 0
        while True:
            try:
                try:
                    res = await self.client.send(build(), stream=stream)
                except httpx.TransportError as e:
                    raise self._no_answer(e, method, path, timeout) from e
                if res.status_code < 200 or res.status_code > 299:
                    try:
                        data = await res.aread()
                    except httpx.HTTPError:
                        data = b""
                    finally:
                        await res.aclose()
                    raise self._error(res, data)
                return res
            except SandboxdError as e:
                if not _retryable(e) or n >= retries:
                    raise
                await asyncio.sleep(retry_wait(e, n))
                n += 1

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Optional[Query] = None,
        json: Any = None,
        content: Any = None,
        headers: Optional[Mapping[str, str]] = None,
        timeout: TimeoutArg = None,
    ) -> httpx.Response:
        """Sends a request and reads the answer; raises the typed error of a non-2xx answer."""

        def build() -> httpx.Request:
            return self._build(self.client, method, path, params, json, content, headers, timeout)

        res = await self._retrying_send(method, path, build, True, timeout)
        try:
            await res.aread()
        except httpx.TransportError as e:
            raise self._no_answer(e, method, path, timeout) from e
        finally:
            await res.aclose()
        return res

    async def request_json(self, method: str, path: str, **kw: Any) -> Any:
        """:meth:`request`, then the parsed JSON of the answer (None for an empty one)."""
        return parse_body((await self.request(method, path, **kw)).content)

    @contextlib.asynccontextmanager
    async def stream(
        self,
        method: str,
        path: str,
        *,
        params: Optional[Query] = None,
        json: Any = None,
        content: Any = None,
        headers: Optional[Mapping[str, str]] = None,
        timeout: TimeoutArg = None,
    ) -> AsyncIterator[httpx.Response]:
        """Opens a request whose answer is read as a stream; the body is the caller's to read
        within the ``async with``. Raises the typed error of a non-2xx answer (its body read)."""

        def build() -> httpx.Request:
            return self._build(self.client, method, path, params, json, content, headers, timeout)

        res = await self._retrying_send(method, path, build, True, timeout)
        try:
            yield res
        finally:
            await res.aclose()
