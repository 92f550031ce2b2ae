"""Create and exec, sync and async: the first thing every user does."""

from __future__ import annotations

from sandboxd import AsyncSandbox, AsyncSandboxd, NotFoundError, Sandbox, Sandboxd

import pytest


def test_sync_create_exec_delete(client: Sandboxd, image: str) -> None:
    sb = client.sandboxes.create(image, env={"GREETING": "hello"}, timeout_ms=120_000)
    try:
        assert sb.id.startswith("sbx_")
        assert sb.state == "started"
        assert sb.image == image
        r = sb.exec('echo "$GREETING world"; echo oops >&2; exit 3')
        assert r.stdout == "hello world\n"
        assert r.stderr == "oops\n"
        assert r.exit_code == 3
        assert r.success is False
        assert client.sandboxes.get(sb.id).id == sb.id
    finally:
        sb.delete()
    with pytest.raises(NotFoundError):
        client.sandboxes.get(sb.id)


async def test_async_create_exec_delete(aclient: AsyncSandboxd, image: str) -> None:
    sb = await aclient.sandboxes.create(image, env={"GREETING": "hi"}, timeout_ms=120_000)
    try:
        assert isinstance(sb, AsyncSandbox)
        r = await sb.exec('echo "$GREETING"')
        assert (r.stdout, r.exit_code, r.success) == ("hi\n", 0, True)
        assert (await aclient.sandboxes.get(sb.id)).state == "started"
    finally:
        await sb.delete()
    with pytest.raises(NotFoundError):
        await aclient.sandboxes.get(sb.id)


def test_sandbox_fixture_execs(sandbox: Sandbox) -> None:
    assert sandbox.exec("echo ok").stdout == "ok\n"
