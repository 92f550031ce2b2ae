"""Fixtures of the Python SDK's tests, which drive a real sandboxd server.

Environment: ``SANDBOXD_URL`` and ``SANDBOXD_API_KEY`` (the server and an account's key, of
a plan with room for the suite, e.g. PRO; without them every test is skipped),
``SANDBOXD_IMAGE`` (default ``local/busybox:latest``). Tests of limits and admin calls use
``SANDBOXD_BROKE_API_KEY`` (an account with no tokens), ``SANDBOXD_LIMITED_API_KEY`` (an
account with tokens whose plan allows few concurrent sandboxes, e.g. FREE: 5) and
``SANDBOXD_ADMIN_KEY`` (an admin's key); they skip without them.
``npm test`` runs these through test/e2e/python-sdk.test.ts, which starts the server.

Fixtures: ``client`` (a sync :class:`Sandboxd`), ``aclient`` (an :class:`AsyncSandboxd`),
``sandbox`` (a sync Sandbox, deleted after the test), ``asandbox`` (an AsyncSandbox, deleted
after the test), ``shared_sandbox`` (one sync Sandbox per test module, for tests that only
read), ``api_url``, ``api_key``, ``image``, and ``admin_key``, ``broke_key``,
``limited_key`` (the optional keys above).
"""

from __future__ import annotations

import os
from typing import AsyncIterator, Iterator

import pytest
import pytest_asyncio

from sandboxd import AsyncSandbox, AsyncSandboxd, NotFoundError, Sandbox, Sandboxd

URL = os.environ.get("SANDBOXD_URL", "")
KEY = os.environ.get("SANDBOXD_API_KEY", "")
IMAGE = os.environ.get("SANDBOXD_IMAGE", "local/busybox:latest")
#: The code interpreter's image (run_code tests).
CODE_IMAGE = os.environ.get("SANDBOXD_CODE_IMAGE", "local/code-interpreter:latest")
#: Lifetime of test sandboxes: long enough for any test, short enough that a crashed run's go.
SANDBOX_TIMEOUT_MS = 300_000


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if URL and KEY:
        return
    skip = pytest.mark.skip(reason="set SANDBOXD_URL and SANDBOXD_API_KEY to a running sandboxd server")
    for item in items:
        item.add_marker(skip)


@pytest.fixture(scope="session")
def api_url() -> str:
    return URL


@pytest.fixture(scope="session")
def api_key() -> str:
    return KEY


@pytest.fixture(scope="session")
def image() -> str:
    return IMAGE


def _optional_key(name: str) -> str:
    v = os.environ.get(name, "")
    if not v:
        pytest.skip(f"set {name} to run this test")
    return v


@pytest.fixture(scope="session")
def admin_key() -> str:
    return _optional_key("SANDBOXD_ADMIN_KEY")


@pytest.fixture(scope="session")
def broke_key() -> str:
    return _optional_key("SANDBOXD_BROKE_API_KEY")


@pytest.fixture(scope="session")
def limited_key() -> str:
    return _optional_key("SANDBOXD_LIMITED_API_KEY")


@pytest.fixture(scope="session")
def client() -> Iterator[Sandboxd]:
    with Sandboxd(api_key=KEY, api_url=URL) as c:
        yield c


@pytest_asyncio.fixture
async def aclient() -> AsyncIterator[AsyncSandboxd]:
    async with AsyncSandboxd(api_key=KEY, api_url=URL) as c:
        yield c


def _delete(sb: Sandbox) -> None:
    try:
        sb.delete()
    except NotFoundError:
        pass


@pytest.fixture
def sandbox(client: Sandboxd) -> Iterator[Sandbox]:
    sb = client.sandboxes.create(IMAGE, timeout_ms=SANDBOX_TIMEOUT_MS)
    try:
        yield sb
    finally:
        _delete(sb)


@pytest.fixture(scope="module")
def shared_sandbox(client: Sandboxd) -> Iterator[Sandbox]:
    sb = client.sandboxes.create(IMAGE, timeout_ms=SANDBOX_TIMEOUT_MS)
    try:
        yield sb
    finally:
        _delete(sb)


@pytest_asyncio.fixture
async def asandbox(aclient: AsyncSandboxd) -> AsyncIterator[AsyncSandbox]:
    sb = await aclient.sandboxes.create(IMAGE, timeout_ms=SANDBOX_TIMEOUT_MS)
    try:
        yield sb
    finally:
        try:
            await sb.delete()
        except NotFoundError:
            pass
