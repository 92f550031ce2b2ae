"""Isolation tiers, sync and async: the tier on create and on the sandbox, pause to disk and
fork (gVisor sandboxes; skipped, naming why, when the server's runtime does not offer gVisor
with memory snapshots in /healthz), and what a container sandbox refuses."""

from __future__ import annotations

from typing import Any, Dict, List

import httpx
import pytest

from sandboxd import AsyncSandboxd, Sandboxd, ValidationError

from conftest import SANDBOX_TIMEOUT_MS


def _tiers(api_url: str) -> List[Dict[str, Any]]:
    r = httpx.get(f"{api_url.rstrip('/')}/healthz", timeout=30)
    r.raise_for_status()
    return list(r.json().get("isolations") or [])


def _need_gvisor(api_url: str) -> None:
    tiers = _tiers(api_url)
    if not any(t["isolation"] == "gvisor" and t["memorySnapshots"] for t in tiers):
        pytest.skip(f"the runtime offers no gvisor with memory snapshots (/healthz: {[t['isolation'] for t in tiers]})")


def test_container_tier_and_its_refusals(client: Sandboxd, image: str) -> None:
    with client.sandboxes.create(image, timeout_ms=SANDBOX_TIMEOUT_MS, isolation="container") as sb:
        assert sb.isolation == "container" and sb.paused_memory is None
        with pytest.raises(ValidationError) as e:
            sb.pause(memory="disk")
        assert "isolation is container" in str(e.value)
        with pytest.raises(ValidationError):
            sb.fork(count=1)
        assert sb.pause(memory="ram").paused_memory == "ram"
        assert sb.resume(timeout_ms=SANDBOX_TIMEOUT_MS).paused_memory is None


def test_gvisor_pause_to_disk_and_fork(client: Sandboxd, image: str, api_url: str) -> None:
    _need_gvisor(api_url)
    with client.sandboxes.create(image, timeout_ms=SANDBOX_TIMEOUT_MS, isolation="gvisor") as sb:
        assert sb.isolation == "gvisor"
        assert sb.exec("echo 41 > /tmp/state").exit_code == 0
        assert sb.pause(memory="disk").paused_memory == "disk"
        assert sb.resume(timeout_ms=SANDBOX_TIMEOUT_MS).state == "started"
        forks = sb.fork(count=2)
        try:
            assert [f.name for f in forks] == [f"{sb.name}-fork-1", f"{sb.name}-fork-2"]
            for f in forks:
                assert f.isolation == "gvisor" and f.state == "started"
                assert f.exec("cat /tmp/state").stdout == "41\n"
        finally:
            for f in forks:
                f.delete()


async def test_async_fork_and_pause(aclient: AsyncSandboxd, image: str, api_url: str) -> None:
    _need_gvisor(api_url)
    sb = await aclient.sandboxes.create(image, timeout_ms=SANDBOX_TIMEOUT_MS, isolation="gvisor")
    try:
        assert (await sb.pause(memory="disk")).paused_memory == "disk"
        await sb.resume()
        (fork,) = await sb.fork()
        try:
            assert fork.isolation == "gvisor"
        finally:
            await fork.delete()
    finally:
        await sb.delete()
