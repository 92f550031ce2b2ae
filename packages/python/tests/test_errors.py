"""Errors, sync and async: one exception class per API error kind, provoked for real on the
server (404, template 404, 400 with its problems, 401, 402, 403 concurrency, 409, 413), no
answer at all (connection refused, timeout), and, with a fake transport, the mapping of
answers that are not sandboxd's and the retries of idempotent reads only."""

from __future__ import annotations

import socket
from typing import Iterator, List

import httpx
import pytest

from sandboxd import (
    AsyncSandboxd,
    AuthenticationError,
    ConcurrencyLimitError,
    ConnectionError,
    InsufficientTokensError,
    NotFoundError,
    PayloadTooLargeError,
    RateLimitError,
    RequestTimeoutError,
    Sandbox,
    Sandboxd,
    SandboxdError,
    ServerError,
    TemplateNotFoundError,
    UpstreamError,
    ValidationError,
)
from sandboxd import errors
from sandboxd.errors import error_from_response

from conftest import SANDBOX_TIMEOUT_MS


def test_not_found(client: Sandboxd) -> None:
    with pytest.raises(NotFoundError) as e:
        client.sandboxes.get("sbx_aaaaaaaaaaaaaaaaaaaa")
    assert (e.value.status, e.value.code, e.value.kind) == (404, 404, "not_found")
    assert e.value.message and str(e.value) == e.value.message
    assert isinstance(e.value, SandboxdError)


def test_template_not_found_is_a_not_found(client: Sandboxd) -> None:
    with pytest.raises(TemplateNotFoundError) as e:
        client.sandboxes.create("local/no-such-image:1")
    assert isinstance(e.value, NotFoundError)
    assert e.value.kind == "template_not_found"
    assert e.value.details == {"image": "local/no-such-image:1"}


def test_validation_error_names_the_field(client: Sandboxd, image: str) -> None:
    with pytest.raises(ValidationError) as e:
        client.sandboxes.create(image, volumes={"/data": "Bad-Name"})
    assert e.value.status == 400 and e.value.kind == "validation"
    assert any(p["path"].startswith("/volumes") for p in e.value.problems), e.value.details
    with pytest.raises(ValidationError):
        client.sandboxes.create(image, metadata={"k": "v" * 2000})
    with pytest.raises(ValidationError):
        client.sandboxes.list_page(limit=0)


def test_bad_key_is_an_authentication_error(api_url: str) -> None:
    with Sandboxd(api_key="sk_not_a_real_key", api_url=api_url) as bad:
        with pytest.raises(AuthenticationError) as e:
            list(bad.sandboxes.list())
    assert (e.value.status, e.value.kind) == (401, "unauthorized")


def test_no_tokens_is_insufficient_tokens(api_url: str, broke_key: str, image: str) -> None:
    with Sandboxd(api_key=broke_key, api_url=api_url) as broke:
        with pytest.raises(InsufficientTokensError) as e:
            broke.sandboxes.create(image)
    assert (e.value.status, e.value.kind) == (402, "tokens")


def test_concurrency_limit(api_url: str, limited_key: str, image: str) -> None:
    with Sandboxd(api_key=limited_key, api_url=api_url) as limited:
        limit = limited.account.get().limits.concurrency
        assert 0 < limit <= 10, "the limited account's plan must allow few sandboxes"
        made: List[Sandbox] = []
        try:
            for _ in range(limit):
                made.append(limited.sandboxes.create(image, timeout_ms=SANDBOX_TIMEOUT_MS))
            with pytest.raises(ConcurrencyLimitError) as e:
                limited.sandboxes.create(image, timeout_ms=SANDBOX_TIMEOUT_MS)
            assert (e.value.status, e.value.kind) == (403, "concurrency")
            assert limited.account.get().usage.started_sandboxes == limit
        finally:
            for sb in made:
                sb.delete()


def test_payload_too_large(shared_sandbox: Sandbox) -> None:
    with pytest.raises(PayloadTooLargeError) as e:
        shared_sandbox.exec("x" * 1_100_000)
    assert e.value.status == 413


def test_connection_refused_is_a_connection_error() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    with Sandboxd(api_key="sk_x", api_url=f"http://127.0.0.1:{port}", max_retries=0) as c:
        with pytest.raises(ConnectionError) as e:
            c.sandboxes.get("sbx_aaaaaaaaaaaaaaaaaaaa")
    assert (e.value.status, e.value.kind) == (0, "connection")
    assert f"127.0.0.1:{port}" in e.value.message


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A socket that accepts connections and never answers."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    try:
        yield f"http://127.0.0.1:{s.getsockname()[1]}"
    finally:
        s.close()


def test_no_answer_in_time_is_a_request_timeout(silent_server: str) -> None:
    with Sandboxd(api_key="sk_x", api_url=silent_server, timeout=0.2) as c:
        with pytest.raises(RequestTimeoutError) as e:
            c.sandboxes.get("sbx_aaaaaaaaaaaaaaaaaaaa")
    assert isinstance(e.value, ConnectionError) and e.value.kind == "timeout"


async def test_async_errors(aclient: AsyncSandboxd, api_url: str, image: str) -> None:
    with pytest.raises(NotFoundError):
        await aclient.sandboxes.get("sbx_aaaaaaaaaaaaaaaaaaaa")
    with pytest.raises(TemplateNotFoundError):
        await aclient.sandboxes.create("local/no-such-image:1")
    with pytest.raises(ValidationError):
        await aclient.sandboxes.create(image, volumes={"/data": "Bad-Name"})
    async with AsyncSandboxd(api_key="sk_not_a_real_key", api_url=api_url) as bad:
        with pytest.raises(AuthenticationError):
            await bad.sandboxes.list_page()


async def test_async_limits(api_url: str, broke_key: str, image: str) -> None:
    async with AsyncSandboxd(api_key=broke_key, api_url=api_url) as broke:
        with pytest.raises(InsufficientTokensError):
            await broke.sandboxes.create(image)


# -- with a fake transport -----------------------------------------------------------------


def test_every_kind_has_its_class() -> None:
    for kind, status in errors.ERROR_STATUS.items():
        e = error_from_response(status, {"code": status, "kind": kind, "message": "m", "details": {"a": 1}})
        assert isinstance(e, errors.CLASS_BY_KIND[kind]) and e.kind == kind
        assert (e.status, e.code, e.message, e.details) == (status, status, "m", {"a": 1})


def test_answers_that_are_not_sandboxd_errors() -> None:
    e = error_from_response(502, "<html>bad gateway</html>", reason="Bad Gateway")
    assert isinstance(e, UpstreamError) and e.message == "HTTP 502 Bad Gateway"
    e = error_from_response(500, None)
    assert isinstance(e, ServerError) and e.kind == "internal"
    e = error_from_response(418, {"message": "teapot"})
    assert type(e) is SandboxdError and e.kind == "unknown" and e.message == "teapot"
    e = error_from_response(404, {"kind": "a_kind_from_the_future", "message": "x"})
    assert isinstance(e, NotFoundError)
    e = error_from_response(429, {"kind": "rate_limited", "message": "slow"}, retry_after="2")
    assert isinstance(e, RateLimitError) and e.retry_after_ms == 2000


def _fake(statuses: List[int], seen: List[str]) -> httpx.MockTransport:
    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req.method)
        status = statuses[min(len(seen), len(statuses)) - 1]
        if status == 200:
            return httpx.Response(200, json={"snapshots": [], "count": 0})
        return httpx.Response(
            status,
            json={"code": status, "kind": "unavailable", "message": "later", "details": {"retryAfterMs": 0}},
            headers={"retry-after": "0"},
        )

    return httpx.MockTransport(handler)


def test_reads_are_retried_writes_never() -> None:
    seen: List[str] = []
    c = Sandboxd(api_key="k", api_url="http://fake", http_client=httpx.Client(transport=_fake([503, 503, 200], seen)))
    assert c.snapshots.list() == []
    assert seen == ["GET", "GET", "GET"]
    seen.clear()
    with pytest.raises(errors.ServiceUnavailableError):
        Sandboxd(
            api_key="k", api_url="http://fake", max_retries=1, http_client=httpx.Client(transport=_fake([503], seen))
        ).snapshots.list()
    assert seen == ["GET", "GET"]
    seen.clear()
    c2 = Sandboxd(api_key="k", api_url="http://fake", http_client=httpx.Client(transport=_fake([503], seen)))
    with pytest.raises(errors.ServiceUnavailableError):
        c2.sandboxes.create("img")
    assert seen == ["POST"]  # a create is never sent twice


async def test_async_reads_are_retried_writes_never() -> None:
    seen: List[str] = []
    fake = _fake([502, 200], seen)

    async def handler(req: httpx.Request) -> httpx.Response:
        return fake.handle_request(req)

    async with AsyncSandboxd(
        api_key="k", api_url="http://fake", http_client=httpx.AsyncClient(transport=httpx.MockTransport(handler))
    ) as c:
        assert await c.snapshots.list() == []
        assert seen == ["GET", "GET"]
        seen.clear()
        with pytest.raises(errors.ServiceUnavailableError):  # the body's kind wins over the status
            await c.snapshots.delete("x")
        assert seen == ["DELETE"]


def test_config_defaults_and_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SANDBOX_API_URL", raising=False)
    monkeypatch.setenv("SANDBOX_API_KEY", "sk_env")
    c = Sandboxd()
    assert c.api_url == "http://localhost:8080"
    assert c.http.auth_headers() == {"authorization": "Bearer sk_env"}
    assert c.http.ws_url("/api/v1/x", {"a": 1, "b": None}) == "ws://localhost:8080/api/v1/x?a=1"
    assert Sandboxd(api_url="https://h.example/").http.ws_url("/p") == "wss://h.example/p"
    assert Sandboxd(max_retries=99).http.config.max_retries == 10
    with pytest.raises(ValueError):
        Sandboxd(api_url="ftp://nope")
    with pytest.raises(ValueError):
        Sandboxd(timeout=0)
