"""``client.images``: the server's image cache (placeholder of the skeleton: list and delete)."""

from __future__ import annotations

from typing import List

from . import _wire
from ._http import AsyncHttp, SyncHttp
from .types import ImageInfo


class ImagesApi:
    """``client.images`` (sync). Pull, import and delete are admin only."""

    def __init__(self, http: SyncHttp) -> None:
        self.http = http

    def list(self) -> List[ImageInfo]:
        d = self.http.request_json("GET", "/api/v1/images")
        return [_wire.image_info(i) for i in _wire.items(d, "images")]


class AsyncImagesApi:
    """``client.images`` (asyncio)."""

    def __init__(self, http: AsyncHttp) -> None:
        self.http = http

    async def list(self) -> List[ImageInfo]:
        d = await self.http.request_json("GET", "/api/v1/images")
        return [_wire.image_info(i) for i in _wire.items(d, "images")]
