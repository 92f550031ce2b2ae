"""Where a call without a client goes: one shared default client per configuration (per
event loop for asyncio), made from the arguments and the environment, like the TypeScript
SDK's shared transport."""

from __future__ import annotations

import asyncio
import threading
import weakref
from typing import Dict, Optional, Protocol, Tuple

from ._config import resolve_config
from ._http import AsyncHttp, SyncHttp


class HasSyncHttp(Protocol):
    """A sync client (``Sandboxd``) or anything else holding a :class:`SyncHttp`."""

    @property
    def http(self) -> SyncHttp: ...


class HasAsyncHttp(Protocol):
    """An async client (``AsyncSandboxd``) or anything else holding an :class:`AsyncHttp`."""

    @property
    def http(self) -> AsyncHttp: ...


_lock = threading.Lock()
_sync: Dict[Tuple[Optional[str], str], SyncHttp] = {}
_async: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Dict[Tuple[Optional[str], str], AsyncHttp]]" = (
    weakref.WeakKeyDictionary()
)


def sync_http(client: Optional[HasSyncHttp], api_key: Optional[str], api_url: Optional[str]) -> SyncHttp:
    """The client's transport, else the shared default one for ``api_key``/``api_url``/env."""
    if client is not None:
        return client.http
    cfg = resolve_config(api_key=api_key, api_url=api_url)
    key = (cfg.api_key, cfg.api_url)
    with _lock:
        h = _sync.get(key)
        if h is None:
            h = _sync[key] = SyncHttp(cfg)
        return h


def async_http(client: Optional[HasAsyncHttp], api_key: Optional[str], api_url: Optional[str]) -> AsyncHttp:
    """The client's transport, else the shared default one of the running event loop."""
    if client is not None:
        return client.http
    cfg = resolve_config(api_key=api_key, api_url=api_url)
    key = (cfg.api_key, cfg.api_url)
    loop = asyncio.get_running_loop()
    with _lock:
        per_loop = _async.get(loop)
        if per_loop is None:
            per_loop = _async[loop] = {}
        h = per_loop.get(key)
        if h is None:
            h = per_loop[key] = AsyncHttp(cfg)
        return h
