"""``Sandboxd`` and ``AsyncSandboxd``: one connection (server + credentials) with every
resource of the API: ``sandboxes``, ``snapshots``, ``images``, ``volumes``."""

from __future__ import annotations

from types import TracebackType
from typing import AsyncIterator, Iterator, List, Mapping, Optional, Sequence, Type

import httpx

from . import _wire
from ._config import resolve_config
from ._http import AsyncHttp, SyncHttp
from .images import (
    AsyncBuildsApi,
    AsyncImagesApi,
    AsyncTemplatesApi,
    BuildsApi,
    ImagesApi,
    TemplatesApi,
)
from .sandbox import AsyncSandbox, Sandbox, _snapshot_async, _snapshot_sync
from .secrets import AsyncSecretsApi, SecretsApi
from .types import (
    AccountInfo,
    ApiKeyCreated,
    ApiKeyInfo,
    Egress,
    Isolation,
    OnTimeout,
    SandboxPage,
    SandboxState,
    SecretRule,
    SnapshotInfo,
    VolumeInfo,
    VolumeSpec,
)


class SandboxesApi:
    """``client.sandboxes``: the class methods of :class:`Sandbox`, bound to this client."""

    def __init__(self, http: SyncHttp) -> None:
        self.http = http

    def create(
        self,
        image: str,
        *,
        timeout_ms: Optional[int] = None,
        env: Optional[Mapping[str, str]] = None,
        volumes: Optional[Mapping[str, VolumeSpec]] = None,
        metadata: Optional[Mapping[str, str]] = None,
        on_timeout: Optional[OnTimeout] = None,
        egress: Optional[Egress] = None,
        secrets: Optional[Sequence[SecretRule]] = None,
        public_ports: Optional[bool] = None,
        isolation: Optional[Isolation] = None,
    ) -> Sandbox:
        """See :meth:`Sandbox.create`."""
        return Sandbox.create(
            image,
            timeout_ms=timeout_ms,
            env=env,
            volumes=volumes,
            metadata=metadata,
            on_timeout=on_timeout,
            egress=egress,
            secrets=secrets,
            public_ports=public_ports,
            isolation=isolation,
            client=self,
        )

    def get(self, sandbox_id: str) -> Sandbox:
        """See :meth:`Sandbox.get`."""
        return Sandbox.get(sandbox_id, client=self)

    def list(
        self,
        *,
        state: Optional[SandboxState] = None,
        metadata: Optional[Mapping[str, str]] = None,
        page_size: int = 1000,
    ) -> Iterator[Sandbox]:
        """See :meth:`Sandbox.list`."""
        return Sandbox.list(state=state, metadata=metadata, page_size=page_size, client=self)

    def list_page(
        self,
        *,
        state: Optional[SandboxState] = None,
        metadata: Optional[Mapping[str, str]] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
    ) -> SandboxPage:
        """See :meth:`Sandbox.list_page`."""
        return Sandbox.list_page(state=state, metadata=metadata, limit=limit, cursor=cursor, client=self)

    def delete(self, sandbox_id: str) -> None:
        """Deletes sandbox ``sandbox_id`` without fetching it first; raises NotFoundError."""
        Sandbox.delete_by_id(sandbox_id, client=self)


class AsyncSandboxesApi:
    """``client.sandboxes`` of :class:`AsyncSandboxd`."""

    def __init__(self, http: AsyncHttp) -> None:
        self.http = http

    async def create(
        self,
        image: str,
        *,
        timeout_ms: Optional[int] = None,
        env: Optional[Mapping[str, str]] = None,
        volumes: Optional[Mapping[str, VolumeSpec]] = None,
        metadata: Optional[Mapping[str, str]] = None,
        on_timeout: Optional[OnTimeout] = None,
        egress: Optional[Egress] = None,
        secrets: Optional[Sequence[SecretRule]] = None,
        public_ports: Optional[bool] = None,
        isolation: Optional[Isolation] = None,
    ) -> AsyncSandbox:
        return await AsyncSandbox.create(
            image,
            timeout_ms=timeout_ms,
            env=env,
            volumes=volumes,
            metadata=metadata,
            on_timeout=on_timeout,
            egress=egress,
            secrets=secrets,
            public_ports=public_ports,
            isolation=isolation,
            client=self,
        )

    async def get(self, sandbox_id: str) -> AsyncSandbox:
        return await AsyncSandbox.get(sandbox_id, client=self)

    def list(
        self,
        *,
        state: Optional[SandboxState] = None,
        metadata: Optional[Mapping[str, str]] = None,
        page_size: int = 1000,
    ) -> AsyncIterator[AsyncSandbox]:
        """``async for sb in client.sandboxes.list(): ...``"""
        return AsyncSandbox.list(state=state, metadata=metadata, page_size=page_size, client=self)

    async def list_page(
        self,
        *,
        state: Optional[SandboxState] = None,
        metadata: Optional[Mapping[str, str]] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
    ) -> SandboxPage:
        return await AsyncSandbox.list_page(state=state, metadata=metadata, limit=limit, cursor=cursor, client=self)

    async def delete(self, sandbox_id: str) -> None:
        await AsyncSandbox.delete_by_id(sandbox_id, client=self)


class VolumesApi:
    """``client.volumes``: the account's named volumes."""

    def __init__(self, http: SyncHttp) -> None:
        self.http = http

    def list(self) -> List[VolumeInfo]:
        d = self.http.request_json("GET", "/api/v1/volumes")
        return [_wire.volume_info(v) for v in _wire.items(d, "volumes")]

    def delete(self, name: str) -> None:
        """Deletes a volume and its data. Raises NotFoundError, ConflictError while a running sandbox mounts it."""
        self.http.request("DELETE", f"/api/v1/volumes/{_wire.quote(name)}")


class AsyncVolumesApi:
    """``client.volumes`` of :class:`AsyncSandboxd`."""

    def __init__(self, http: AsyncHttp) -> None:
        self.http = http

    async def list(self) -> List[VolumeInfo]:
        d = await self.http.request_json("GET", "/api/v1/volumes")
        return [_wire.volume_info(v) for v in _wire.items(d, "volumes")]

    async def delete(self, name: str) -> None:
        await self.http.request("DELETE", f"/api/v1/volumes/{_wire.quote(name)}")


class SnapshotsApi:
    """``client.snapshots``: the account's snapshots (images ``snapshots/<name>``)."""

    def __init__(self, http: SyncHttp) -> None:
        self.http = http

    def create(self, sandbox_id: str, name: str, *, timeout: Optional[float] = None) -> SnapshotInfo:
        """Takes a snapshot of sandbox ``sandbox_id`` without fetching it first. See :meth:`Sandbox.snapshot`."""
        return _snapshot_sync(self.http, sandbox_id, name, timeout)

    def list(self) -> List[SnapshotInfo]:
        """Every snapshot of the account, newest first."""
        d = self.http.request_json("GET", "/api/v1/snapshots")
        return [_wire.snapshot_info(s) for s in _wire.items(d, "snapshots")]

    def get(self, name: str) -> SnapshotInfo:
        """One snapshot by name; raises NotFoundError."""
        d = self.http.request_json("GET", f"/api/v1/snapshots/{_wire.quote(name)}")
        return _wire.snapshot_info(d["snapshot"])

    def delete(self, name: str) -> None:
        """Deletes a snapshot (sandboxes created from it keep running). Raises NotFoundError."""
        self.http.request("DELETE", f"/api/v1/snapshots/{_wire.quote(name)}")


class AsyncSnapshotsApi:
    """``client.snapshots`` of :class:`AsyncSandboxd`."""

    def __init__(self, http: AsyncHttp) -> None:
        self.http = http

    async def create(self, sandbox_id: str, name: str, *, timeout: Optional[float] = None) -> SnapshotInfo:
        return await _snapshot_async(self.http, sandbox_id, name, timeout)

    async def list(self) -> List[SnapshotInfo]:
        d = await self.http.request_json("GET", "/api/v1/snapshots")
        return [_wire.snapshot_info(s) for s in _wire.items(d, "snapshots")]

    async def get(self, name: str) -> SnapshotInfo:
        d = await self.http.request_json("GET", f"/api/v1/snapshots/{_wire.quote(name)}")
        return _wire.snapshot_info(d["snapshot"])

    async def delete(self, name: str) -> None:
        await self.http.request("DELETE", f"/api/v1/snapshots/{_wire.quote(name)}")


class AccountApi:
    """``client.account``: who you are, plan, token balance, limits, usage."""

    def __init__(self, http: SyncHttp) -> None:
        self.http = http

    def get(self) -> AccountInfo:
        return _wire.account_info(self.http.request_json("GET", "/api/v1/account"))


class AsyncAccountApi:
    """``client.account`` of :class:`AsyncSandboxd`."""

    def __init__(self, http: AsyncHttp) -> None:
        self.http = http

    async def get(self) -> AccountInfo:
        return _wire.account_info(await self.http.request_json("GET", "/api/v1/account"))


class KeysApi:
    """``client.keys``: the account's API keys."""

    def __init__(self, http: SyncHttp) -> None:
        self.http = http

    def create(self, name: str) -> ApiKeyCreated:
        """Creates a key; the answer's ``key`` is shown this once."""
        return _wire.api_key_created(self.http.request_json("POST", "/api/v1/keys", json={"name": name}))

    def list(self) -> List[ApiKeyInfo]:
        """The account's keys (prefix, name, dates; never the key)."""
        d = self.http.request_json("GET", "/api/v1/keys")
        return [_wire.api_key_info(k) for k in _wire.items(d, "keys")]

    def revoke(self, key_id: str) -> None:
        """Revokes a key at once; raises NotFoundError."""
        self.http.request("DELETE", f"/api/v1/keys/{_wire.quote(key_id)}")


class AsyncKeysApi:
    """``client.keys`` of :class:`AsyncSandboxd`."""

    def __init__(self, http: AsyncHttp) -> None:
        self.http = http

    async def create(self, name: str) -> ApiKeyCreated:
        return _wire.api_key_created(await self.http.request_json("POST", "/api/v1/keys", json={"name": name}))

    async def list(self) -> List[ApiKeyInfo]:
        d = await self.http.request_json("GET", "/api/v1/keys")
        return [_wire.api_key_info(k) for k in _wire.items(d, "keys")]

    async def revoke(self, key_id: str) -> None:
        await self.http.request("DELETE", f"/api/v1/keys/{_wire.quote(key_id)}")


class Sandboxd:
    """A client of one sandboxd server (blocking). Arguments default from the environment:
    ``SANDBOX_API_KEY``, ``SANDBOX_API_URL`` (else ``http://localhost:8080``).

    ``timeout`` is the per-request timeout in seconds (default 60; long operations such as
    exec extend it); ``max_retries`` the retries of GET requests on connection errors, 429,
    502, 503, 504 (default 2; writes are never retried). Use it as a context manager, or call
    :meth:`close`, to close its connections.

    >>> client = Sandboxd()
    >>> sb = client.sandboxes.create(image="local/busybox:latest")
    """

    def __init__(
        self,
        api_key: Optional[str] = None,
        api_url: Optional[str] = None,
        *,
        timeout: Optional[float] = None,
        max_retries: Optional[int] = None,
        headers: Optional[Mapping[str, str]] = None,
        http_client: Optional[httpx.Client] = None,
    ) -> None:
        config = resolve_config(api_key, api_url, timeout, max_retries, headers)
        self.http = SyncHttp(config, http_client)
        self.sandboxes = SandboxesApi(self.http)
        self.snapshots = SnapshotsApi(self.http)
        self.volumes = VolumesApi(self.http)
        #: The account's template builds: list, get, logs, wait, cancel, delete.
        self.builds = BuildsApi(self.http)
        #: The account's templates (``templates/<name>:<tag>``).
        self.templates = TemplatesApi(self.http)
        #: Template builds (``build_template``, any account); the rest admin only.
        self.images = ImagesApi(self.http, self.builds)
        self.account = AccountApi(self.http)
        self.keys = KeysApi(self.http)
        #: The account's secrets (write-only values injected by the egress proxy) and their audit trail.
        self.secrets = SecretsApi(self.http)

    @property
    def api_url(self) -> str:
        """The server address in use, without a trailing slash."""
        return self.http.config.api_url

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> "Sandboxd":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()


class AsyncSandboxd:
    """A client of one sandboxd server (asyncio): the resources of :class:`Sandboxd`, awaited.
    ``async with AsyncSandboxd() as client:`` closes its connections on exit."""

    def __init__(
        self,
        api_key: Optional[str] = None,
        api_url: Optional[str] = None,
        *,
        timeout: Optional[float] = None,
        max_retries: Optional[int] = None,
        headers: Optional[Mapping[str, str]] = None,
        http_client: Optional[httpx.AsyncClient] = None,
    ) -> None:
        config = resolve_config(api_key, api_url, timeout, max_retries, headers)
        self.http = AsyncHttp(config, http_client)
        self.sandboxes = AsyncSandboxesApi(self.http)
        self.snapshots = AsyncSnapshotsApi(self.http)
        self.volumes = AsyncVolumesApi(self.http)
        self.builds = AsyncBuildsApi(self.http)
        self.templates = AsyncTemplatesApi(self.http)
        self.images = AsyncImagesApi(self.http, self.builds)
        self.account = AsyncAccountApi(self.http)
        self.keys = AsyncKeysApi(self.http)
        self.secrets = AsyncSecretsApi(self.http)

    @property
    def api_url(self) -> str:
        return self.http.config.api_url

    async def close(self) -> None:
        await self.http.close()

    async def __aenter__(self) -> "AsyncSandboxd":
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await self.close()
