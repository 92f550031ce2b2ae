"""Secrets, sync and async: create, conflict, put (created or changed), set, list, get, delete,
the audit list; injection rules on create and on set_network (placeholders kept, an unknown
secret refused naming its path). No answer or error carries a value."""

from __future__ import annotations

import uuid

import pytest

from sandboxd import AsyncSandboxd, ConflictError, NotFoundError, Sandboxd, ValidationError

from conftest import SANDBOX_TIMEOUT_MS


def _name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def test_secret_crud(client: Sandboxd) -> None:
    name = _name("PY")
    value = f"sk-py-{uuid.uuid4().hex}"
    made = client.secrets.create(name, value, description="from python")
    try:
        assert (made.name, made.description, made.version) == (name, "from python", 1)
        assert made.created_at.tzinfo is not None
        with pytest.raises(ConflictError):
            client.secrets.create(name, value)
        with pytest.raises(ValidationError) as e:
            client.secrets.create(_name("BAD"), value + "\n")
        assert value not in str(e.value)
        changed = client.secrets.put(name, value=value + "2")
        assert (changed.created, changed.secret.version) == (False, 2)
        described = client.secrets.put(name, description="rotated")
        assert (described.secret.version, described.secret.description) == (2, "rotated")
        assert client.secrets.set(name, value + "3").version == 3
        assert name in [s.name for s in client.secrets.list()]
        assert client.secrets.get(name).version == 3
        with pytest.raises(NotFoundError):
            client.secrets.get(_name("NOPE"))
        with pytest.raises(ValidationError):
            client.secrets.put(_name("NEW"), description="no value")
    finally:
        client.secrets.delete(name)
    with pytest.raises(NotFoundError):
        client.secrets.delete(name)
    fresh = _name("FRESH")
    assert client.secrets.put(fresh, value=value).created is True
    client.secrets.delete(fresh)


def test_rules_on_create_and_set_network(client: Sandboxd, image: str) -> None:
    name = _name("RULE")
    client.secrets.create(name, f"sk-{uuid.uuid4().hex}")
    rule = {"secret": name, "domains": ["api.example.com"], "header": "Authorization", "format": "Bearer {value}"}
    sb = client.sandboxes.create(
        image, timeout_ms=SANDBOX_TIMEOUT_MS, egress={"allow": ["api.example.com"]}, secrets=[rule]
    )
    try:
        assert sb.network is not None and sb.network.secrets is not None
        placeholder = sb.network.secrets[0]["placeholder"]
        assert placeholder.startswith("sbx-secret-")
        with pytest.raises(ValidationError) as e:
            sb.set_network("internet", secrets=[{**rule, "secret": _name("NOPE")}])
        assert [p["path"] for p in e.value.details] == ["/secrets/0/secret"]
        kept = sb.set_network("internet")
        assert kept.secrets is not None and kept.secrets[0]["placeholder"] == placeholder
        assert sb.set_network("internet", secrets=[]).secrets is None
        assert client.secrets.injections(sandbox_id=sb.id, limit=10).injections == []
        assert list(client.secrets.all_injections(sandbox_id=sb.id)) == []
    finally:
        sb.delete()
        client.secrets.delete(name)
    with pytest.raises(ValueError):
        client.sandboxes.create(image, secrets=[rule])


async def test_secret_crud_async(aclient: AsyncSandboxd) -> None:
    name = _name("APY")
    made = await aclient.secrets.create(name, "sk-async-value")
    assert made.version == 1
    r = await aclient.secrets.put(name, value="sk-async-value-2", description="d")
    assert (r.created, r.secret.version, r.secret.description) == (False, 2, "d")
    assert (await aclient.secrets.set(name, "sk-async-value-3")).version == 3
    assert name in [s.name for s in await aclient.secrets.list()]
    assert (await aclient.secrets.get(name)).version == 3
    page = await aclient.secrets.injections(secret=name)
    assert page.injections == [] and page.next is None
    assert [i async for i in aclient.secrets.all_injections(secret=name)] == []
    await aclient.secrets.delete(name)
    with pytest.raises(NotFoundError):
        await aclient.secrets.get(name)
