"""Sandboxes, sync and async: create with every option, get, list with paging and filters,
delete, set_timeout (extend and cut), set_network, public_url, the environment's defaults,
and context managers that delete on exit, also when the body raises."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import Iterator, List

import pytest

from sandboxd import (
    AsyncSandbox,
    AsyncSandboxd,
    ConflictError,
    NotFoundError,
    Sandbox,
    Sandboxd,
    ValidationError,
)

from conftest import SANDBOX_TIMEOUT_MS


def _tag() -> str:
    return uuid.uuid4().hex[:10]


def test_create_with_every_option(client: Sandboxd, image: str) -> None:
    vol = f"pyvol_{_tag()}"
    sb = client.sandboxes.create(
        image,
        timeout_ms=120_000,
        env={"FOO": "bar"},
        volumes={"/data": {"name": vol, "size_gb": 1}},
        metadata={"suite": "python", "case": "every-option"},
        on_timeout="pause",
        egress={"allow": ["PyPI.org.", "*.example.com", "203.0.113.0/24"]},
        public_ports=False,
    )
    try:
        assert sb.state == "started"
        assert sb.metadata == {"suite": "python", "case": "every-option"}
        assert sb.on_timeout == "pause"
        assert sb.network is not None
        assert sb.network.egress == {"allow": ["pypi.org", "*.example.com", "203.0.113.0/24"]}
        assert sb.created_at.tzinfo is not None
        left = (sb.stop_at - datetime.now(timezone.utc)).total_seconds()
        assert 0 < left <= 121
        r = sb.exec("echo $FOO; echo kept > /data/f; cat /data/f")
        assert r.stdout == "bar\nkept\n"
        assert sb.public_url(8080).startswith("http://8080-")
        with pytest.raises(ValueError):
            sb.public_url(0)
        vols = {v.name: v for v in client.volumes.list()}
        assert vols[vol].size_gb == 1 and sb.id in vols[vol].mounted_by
        with pytest.raises(ConflictError):
            client.volumes.delete(vol)  # mounted by a running sandbox
    finally:
        sb.delete()
    assert vol in [v.name for v in client.volumes.list()]  # named volumes outlive the sandbox
    client.volumes.delete(vol)
    assert vol not in [v.name for v in client.volumes.list()]
    with pytest.raises(NotFoundError):
        client.volumes.delete(vol)


def test_list_pages_and_filters(client: Sandboxd, image: str) -> None:
    tag = _tag()
    made: List[Sandbox] = []
    try:
        for i in range(3):
            made.append(client.sandboxes.create(image, timeout_ms=SANDBOX_TIMEOUT_MS, metadata={"t": tag, "i": str(i)}))
        ids = {s.id for s in made}
        page = client.sandboxes.list_page(metadata={"t": tag}, limit=2)
        assert len(page.sandboxes) == 2 and page.next_cursor
        rest = client.sandboxes.list_page(metadata={"t": tag}, limit=2, cursor=page.next_cursor)
        assert len(rest.sandboxes) == 1 and rest.next_cursor is None
        assert {s.id for s in page.sandboxes + rest.sandboxes} == ids
        # The iterator follows the cursor page by page.
        assert {s.id for s in client.sandboxes.list(metadata={"t": tag}, page_size=1)} == ids
        assert [s.id for s in client.sandboxes.list(metadata={"t": tag, "i": "1"})] == [made[1].id]
        assert all(s.state == "started" for s in client.sandboxes.list(state="started", metadata={"t": tag}))
        assert list(client.sandboxes.list(state="paused", metadata={"t": tag})) == []
        got = client.sandboxes.get(made[0].id)
        assert got.info == made[0].info
    finally:
        for s in made:
            s.delete()
    assert list(client.sandboxes.list(metadata={"t": tag})) == []


def test_set_timeout_extends_and_cuts(sandbox: Sandbox) -> None:
    before = sandbox.stop_at
    after = sandbox.set_timeout(SANDBOX_TIMEOUT_MS + 60_000)
    assert after > before and sandbox.stop_at == after
    assert sandbox.refresh().stop_at == after
    with pytest.raises(ValidationError) as e:
        sandbox.set_timeout(48 * 3_600_000)  # past the plan's lifetime
    assert "at most" in e.value.message
    sandbox.set_timeout(0)
    assert sandbox.refresh().state == "stopped"
    with pytest.raises(ConflictError):
        sandbox.exec("true")


def test_set_network(sandbox: Sandbox) -> None:
    net = sandbox.set_network({"allow": ["Example.ORG"]})
    assert net.egress == {"allow": ["example.org"]}
    assert sandbox.network == net
    assert sandbox.set_network("none").egress == "none"
    assert sandbox.refresh().network is not None and sandbox.info.network.egress == "none"  # type: ignore[union-attr]
    with pytest.raises(ValidationError) as e:
        sandbox.set_network({"allow": ["ok.example.com", "not a rule"]})
    assert any(p.get("path") == "/egress/allow/1" for p in e.value.problems), e.value.details


def test_context_manager_deletes_on_exit_and_on_error(client: Sandboxd, image: str) -> None:
    with client.sandboxes.create(image, timeout_ms=SANDBOX_TIMEOUT_MS) as sb:
        assert sb.exec("echo in").stdout == "in\n"
    with pytest.raises(NotFoundError):
        client.sandboxes.get(sb.id)
    with pytest.raises(RuntimeError, match="boom"):
        with client.sandboxes.create(image, timeout_ms=SANDBOX_TIMEOUT_MS) as sb2:
            raise RuntimeError("boom")
    with pytest.raises(NotFoundError):
        client.sandboxes.get(sb2.id)
    # Deleted inside the block already: the exit does not fail.
    with client.sandboxes.create(image, timeout_ms=SANDBOX_TIMEOUT_MS) as sb3:
        sb3.delete()


@pytest.fixture
def env_defaults(monkeypatch: pytest.MonkeyPatch, api_url: str, api_key: str) -> Iterator[None]:
    monkeypatch.setenv("SANDBOX_API_KEY", api_key)
    monkeypatch.setenv("SANDBOX_API_URL", api_url + "/")
    yield


def test_static_create_reads_the_environment(env_defaults: None, image: str, api_url: str) -> None:
    with Sandbox.create(image, timeout_ms=SANDBOX_TIMEOUT_MS, env={"X": "from-env"}) as sb:
        assert sb.exec("echo $X").stdout == "from-env\n"
        assert Sandbox.get(sb.id).id == sb.id
        assert sb.id in {s.id for s in Sandbox.list(state="started")}
        assert sb.http.config.api_url == api_url  # the trailing slash dropped
    with pytest.raises(NotFoundError):
        Sandbox.get(sb.id)
    with pytest.raises(NotFoundError):
        Sandbox.delete_by_id(sb.id)


async def test_async_sandboxes(aclient: AsyncSandboxd, image: str) -> None:
    tag = _tag()
    made: List[AsyncSandbox] = []
    try:
        for i in range(2):
            made.append(
                await aclient.sandboxes.create(
                    image, timeout_ms=SANDBOX_TIMEOUT_MS, metadata={"t": tag}, egress="none", on_timeout="stop"
                )
            )
        assert made[0].network is not None and made[0].network.egress == "none"
        page = await aclient.sandboxes.list_page(metadata={"t": tag}, limit=1)
        assert len(page.sandboxes) == 1 and page.next_cursor
        assert {s.id async for s in aclient.sandboxes.list(metadata={"t": tag}, page_size=1)} == {
            s.id for s in made
        }
        sb = made[0]
        assert (await aclient.sandboxes.get(sb.id)).info == sb.info
        later = await sb.set_timeout(SANDBOX_TIMEOUT_MS + 60_000)
        assert (await sb.refresh()).stop_at == later
        assert (await sb.set_network("internet")).egress == "internet"
        await aclient.sandboxes.delete(made[1].id)
        with pytest.raises(NotFoundError):
            await made[1].refresh()
    finally:
        for s in made:
            try:
                await s.delete()
            except NotFoundError:
                pass


async def test_async_context_manager_deletes_on_exit_and_on_error(aclient: AsyncSandboxd, image: str) -> None:
    async with await aclient.sandboxes.create(image, timeout_ms=SANDBOX_TIMEOUT_MS) as sb:
        assert (await sb.exec("echo in")).stdout == "in\n"
    with pytest.raises(NotFoundError):
        await aclient.sandboxes.get(sb.id)
    with pytest.raises(RuntimeError, match="boom"):
        async with await aclient.sandboxes.create(image, timeout_ms=SANDBOX_TIMEOUT_MS) as sb2:
            raise RuntimeError("boom")
    with pytest.raises(NotFoundError):
        await aclient.sandboxes.get(sb2.id)


async def test_async_static_create_reads_the_environment(env_defaults: None, image: str) -> None:
    async with await AsyncSandbox.create(image, timeout_ms=SANDBOX_TIMEOUT_MS) as sb:
        assert (await sb.exec("echo hi")).stdout == "hi\n"
        assert (await AsyncSandbox.get(sb.id)).id == sb.id
        assert sb.id in {s.id async for s in AsyncSandbox.list(state="started")}
    with pytest.raises(NotFoundError):
        await AsyncSandbox.delete_by_id(sb.id)
