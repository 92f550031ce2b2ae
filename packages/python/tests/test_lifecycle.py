"""The lifecycle, sync and async: pause, resume, stop, start (each answered with the new
state, a wrong state a ConflictError naming it), snapshot -> image -> new sandbox, and the
snapshots API (create by id, list, get, delete)."""

from __future__ import annotations

import uuid

import pytest

from sandboxd import AsyncSandbox, AsyncSandboxd, ConflictError, NotFoundError, Sandbox, Sandboxd, ValidationError

from conftest import SANDBOX_TIMEOUT_MS

MARK = "/lifecycle-mark.txt"


def _conflict(e: pytest.ExceptionInfo[ConflictError], state: str) -> None:
    assert e.value.status == 409 and e.value.kind == "conflict"
    assert isinstance(e.value.details, dict) and e.value.details.get("state") == state, e.value.details


def test_pause_resume_stop_start(sandbox: Sandbox) -> None:
    sb = sandbox
    assert sb.exec(f"echo kept > {MARK}").exit_code == 0
    h = sb.exec("sleep 600", background=True)
    assert sb.pause() is sb and sb.state == "paused"
    assert sb.expires_at is not None
    with pytest.raises(ConflictError) as e:
        sb.exec("true")
    _conflict(e, "paused")
    with pytest.raises(ConflictError) as e2:
        sb.pause()
    _conflict(e2, "paused")
    assert sb.resume(timeout_ms=SANDBOX_TIMEOUT_MS).state == "started"
    assert sb.processes.get(h.pid).running  # a pause keeps processes
    assert sb.stop().state == "stopped"
    with pytest.raises(ConflictError) as e3:
        sb.resume()
    _conflict(e3, "stopped")
    assert sb.start(timeout_ms=SANDBOX_TIMEOUT_MS).state == "started"
    assert sb.exec(f"cat {MARK}").stdout == "kept\n"  # the root layer survives a stop
    with pytest.raises(ConflictError) as e4:
        sb.start()
    _conflict(e4, "started")


def test_snapshot_to_image_and_snapshots_api(client: Sandboxd, sandbox: Sandbox) -> None:
    name = f"py-{uuid.uuid4().hex[:8]}"
    sandbox.exec(f"echo snap > {MARK}")
    snap = sandbox.snapshot(name)
    try:
        assert snap.name == name and snap.image == f"snapshots/{name}"
        assert snap.sandbox_id == sandbox.id and snap.base_image == sandbox.image
        assert snap.size_bytes >= 0
        assert name in [s.name for s in client.snapshots.list()]
        assert client.snapshots.get(name) == snap
        with pytest.raises(ConflictError):
            client.snapshots.create(sandbox.id, name)  # the name is taken
        with pytest.raises(ValidationError):
            sandbox.snapshot("Bad Name!")
        with client.sandboxes.create(snap.image, timeout_ms=SANDBOX_TIMEOUT_MS) as copy:
            assert copy.exec(f"cat {MARK}").stdout == "snap\n"
    finally:
        client.snapshots.delete(name)
    with pytest.raises(NotFoundError):
        client.snapshots.get(name)
    with pytest.raises(NotFoundError):
        client.snapshots.delete(name)


async def test_async_lifecycle_and_snapshots(aclient: AsyncSandboxd, asandbox: AsyncSandbox) -> None:
    sb = asandbox
    await sb.exec(f"echo async > {MARK}")
    assert (await sb.pause()).state == "paused"
    with pytest.raises(ConflictError) as e:
        await sb.exec("true")
    _conflict(e, "paused")
    assert (await sb.resume()).state == "started"
    assert (await sb.stop()).state == "stopped"
    name = f"pya-{uuid.uuid4().hex[:8]}"
    snap = await aclient.snapshots.create(sb.id, name)  # a stopped sandbox can be snapshotted
    try:
        assert snap.image == f"snapshots/{name}"
        assert name in [s.name for s in await aclient.snapshots.list()]
        assert (await aclient.snapshots.get(name)).sandbox_id == sb.id
        async with await AsyncSandbox.create(snap.image, timeout_ms=SANDBOX_TIMEOUT_MS, client=aclient) as copy:
            assert (await copy.exec(f"cat {MARK}")).stdout == "async\n"
    finally:
        await aclient.snapshots.delete(name)
    with pytest.raises(NotFoundError):
        await aclient.snapshots.get(name)
    assert (await sb.start()).state == "started"
    assert (await sb.exec(f"cat {MARK}")).stdout == "async\n"
