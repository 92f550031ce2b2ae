"""``client.secrets``: the account's secrets (values the egress proxy puts into a sandbox's
requests to the domains its injection rules name; the sandbox holds only a placeholder) and
their audit trail. A value is sent, never received: no answer carries it. See docs/secrets.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, AsyncIterator, Dict, Iterator, List, Mapping, Optional

from . import _wire
from ._http import AsyncHttp, SyncHttp
from .errors import parse_body


@dataclass
class SecretInfo:
    """A secret as the server shows it: never its value."""

    name: str
    description: str
    #: 1 at creation, +1 at each change of the value.
    version: int
    created_at: datetime
    updated_at: datetime


@dataclass
class SecretPutResult:
    """What :meth:`SecretsApi.put` did: the secret, and whether it was created (else changed)."""

    secret: SecretInfo
    created: bool


@dataclass
class SecretInjection:
    """One request the egress proxy put a secret into (or tried to)."""

    id: str
    sandbox_id: str
    secret: str
    #: The name the request went to (its Host / SNI), and the port.
    destination: str
    method: str
    #: The upstream's status code, or None when no answer came (see ``error``).
    status: Optional[int]
    at: datetime
    error: Optional[str] = None


@dataclass
class SecretInjectionPage:
    """One page of the audit trail, newest first; pass ``next`` as ``before`` for the older ones."""

    injections: List[SecretInjection] = field(default_factory=list)
    next: Optional[str] = None


def _secret(d: Mapping[str, Any]) -> SecretInfo:
    return SecretInfo(
        name=d["name"],
        description=d.get("description", ""),
        version=int(d["version"]),
        created_at=_wire.parse_time(d["createdAt"]),
        updated_at=_wire.parse_time(d["updatedAt"]),
    )


def _injection(d: Mapping[str, Any]) -> SecretInjection:
    return SecretInjection(
        id=d["id"],
        sandbox_id=d["sandboxId"],
        secret=d["secret"],
        destination=d["destination"],
        method=d["method"],
        status=d.get("status"),
        at=_wire.parse_time(d["at"]),
        error=d.get("error"),
    )


def _page(d: Mapping[str, Any]) -> SecretInjectionPage:
    return SecretInjectionPage(injections=[_injection(i) for i in _wire.items(d, "injections")], next=d.get("next"))


def _path(name: str) -> str:
    return f"/api/v1/secrets/{_wire.quote(name)}"


def _create_body(name: str, value: str, description: Optional[str]) -> Dict[str, Any]:
    body: Dict[str, Any] = {"name": name, "value": value}
    if description is not None:
        body["description"] = description
    return body


def _put_body(value: Optional[str], description: Optional[str]) -> Dict[str, Any]:
    body: Dict[str, Any] = {}
    if value is not None:
        body["value"] = value
    if description is not None:
        body["description"] = description
    return body


def _query(sandbox_id: Optional[str], secret: Optional[str], limit: Optional[int], before: Optional[str]) -> Dict[str, Any]:
    q = {"sandboxId": sandbox_id, "secret": secret, "limit": limit, "before": before}
    return {k: v for k, v in q.items() if v is not None}


class SecretsApi:
    """``client.secrets`` of :class:`Sandboxd`."""

    def __init__(self, http: SyncHttp) -> None:
        self.http = http

    def create(self, name: str, value: str, *, description: Optional[str] = None) -> SecretInfo:
        """Creates secret ``name`` holding ``value`` (printable ASCII, at most 8192 bytes).
        Raises ConflictError when it exists (:meth:`put` changes it), ValidationError for a bad
        name or value (never repeating it), QuotaExceededError beyond 500 secrets."""
        d = self.http.request_json("POST", "/api/v1/secrets", json=_create_body(name, value, description))
        return _secret(d["secret"])

    def list(self) -> List[SecretInfo]:
        """Every secret of the account (names and metadata, never values)."""
        return [_secret(s) for s in _wire.items(self.http.request_json("GET", "/api/v1/secrets"), "secrets")]

    def get(self, name: str) -> SecretInfo:
        """One secret's metadata; raises NotFoundError."""
        return _secret(self.http.request_json("GET", _path(name))["secret"])

    def put(self, name: str, *, value: Optional[str] = None, description: Optional[str] = None) -> SecretPutResult:
        """Creates or changes secret ``name`` (a create needs ``value``). A new value reaches
        every sandbox whose rules name it before this returns."""
        res = self.http.request("PUT", _path(name), json=_put_body(value, description))
        return SecretPutResult(secret=_secret(parse_body(res.content)["secret"]), created=res.status_code == 201)

    def set(self, name: str, value: str, *, description: Optional[str] = None) -> SecretInfo:
        """Sets secret ``name`` to ``value``, creating it when absent."""
        return self.put(name, value=value, description=description).secret

    def delete(self, name: str) -> None:
        """Deletes secret ``name``: sandboxes whose rules name it stop injecting it before this
        returns. Raises NotFoundError."""
        self.http.request("DELETE", _path(name))

    def injections(
        self,
        *,
        sandbox_id: Optional[str] = None,
        secret: Optional[str] = None,
        limit: Optional[int] = None,
        before: Optional[str] = None,
    ) -> SecretInjectionPage:
        """One page of the audit trail, newest first."""
        d = self.http.request_json("GET", "/api/v1/secrets/injections", params=_query(sandbox_id, secret, limit, before))
        return _page(d)

    def all_injections(
        self, *, sandbox_id: Optional[str] = None, secret: Optional[str] = None, max_items: int = 10_000
    ) -> Iterator[SecretInjection]:
        """Every injection the filters match, newest first, page by page (at most ``max_items``)."""
        before: Optional[str] = None
        n = 0
        while True:
            page = self.injections(sandbox_id=sandbox_id, secret=secret, before=before)
            for i in page.injections:
                if n >= max_items:
                    return
                n += 1
                yield i
            if not page.next or not page.injections:
                return
            before = page.next


class AsyncSecretsApi:
    """``client.secrets`` of :class:`AsyncSandboxd`."""

    def __init__(self, http: AsyncHttp) -> None:
        self.http = http

    async def create(self, name: str, value: str, *, description: Optional[str] = None) -> SecretInfo:
        d = await self.http.request_json("POST", "/api/v1/secrets", json=_create_body(name, value, description))
        return _secret(d["secret"])

    async def list(self) -> List[SecretInfo]:
        return [_secret(s) for s in _wire.items(await self.http.request_json("GET", "/api/v1/secrets"), "secrets")]

    async def get(self, name: str) -> SecretInfo:
        return _secret((await self.http.request_json("GET", _path(name)))["secret"])

    async def put(
        self, name: str, *, value: Optional[str] = None, description: Optional[str] = None
    ) -> SecretPutResult:
        res = await self.http.request("PUT", _path(name), json=_put_body(value, description))
        return SecretPutResult(secret=_secret(parse_body(res.content)["secret"]), created=res.status_code == 201)

    async def set(self, name: str, value: str, *, description: Optional[str] = None) -> SecretInfo:
        return (await self.put(name, value=value, description=description)).secret

    async def delete(self, name: str) -> None:
        await self.http.request("DELETE", _path(name))

    async def injections(
        self,
        *,
        sandbox_id: Optional[str] = None,
        secret: Optional[str] = None,
        limit: Optional[int] = None,
        before: Optional[str] = None,
    ) -> SecretInjectionPage:
        d = await self.http.request_json(
            "GET", "/api/v1/secrets/injections", params=_query(sandbox_id, secret, limit, before)
        )
        return _page(d)

    async def all_injections(
        self, *, sandbox_id: Optional[str] = None, secret: Optional[str] = None, max_items: int = 10_000
    ) -> AsyncIterator[SecretInjection]:
        before: Optional[str] = None
        n = 0
        while True:
            page = await self.injections(sandbox_id=sandbox_id, secret=secret, before=before)
            for i in page.injections:
                if n >= max_items:
                    return
                n += 1
                yield i
            if not page.next or not page.injections:
                return
            before = page.next
