"""Images and templates.

- ``client.images``: the server's image cache (admin only: list, pull, offline build of the
  default images, import of an archive; others get NotFoundError), with progress streamed
  when ``on_progress`` is given, and ``build_template`` for any account: a Dockerfile and its
  context built on the server into ``templates/<name>:<tag>``, followed to its end.
- ``client.builds``: the account's builds (create, list, get, logs, wait, cancel, delete).
- ``client.templates``: the account's templates (list, delete).
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import secrets
import tarfile
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import (
    Any,
    AsyncIterator,
    Callable,
    Dict,
    Iterator,
    List,
    Literal,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
)

import httpx

from . import _wire
from ._http import AsyncHttp, SyncHttp, retry_wait
from ._stream import NdjsonDecoder
from .errors import ConnectionError, SandboxdError, ServerError, error_from_response
from .types import ImageInfo

#: Default timeout of a pull, build or import, seconds (a Debian build takes minutes).
IMAGE_JOB_TIMEOUT_S = 30 * 60.0
#: Default timeout of sending a template build (the context's upload and the server's checks).
BUILD_SEND_TIMEOUT_S = 30 * 60.0
#: Reconnections of a followed build log in a row without a line in between before giving up.
MAX_LOG_RECONNECTS = 10
_CHUNK = 1 << 16

BuildState = Literal["queued", "building", "ready", "error", "cancelled"]
FINAL_STATES = ("ready", "error", "cancelled")


@dataclass
class ImageProgress:
    """A progress report of a pull or build (``bytes``/``total_bytes`` when known)."""

    phase: str
    bytes: Optional[int] = None
    total_bytes: Optional[int] = None


@dataclass
class BuildFailure:
    """Why a build failed: ``details`` has the step, Dockerfile line, instruction, exit code and output's end."""

    code: int
    kind: str
    message: str
    details: Dict[str, Any] = field(default_factory=dict)


@dataclass
class BuildSteps:
    total: int
    done: int
    #: Steps whose result came from the cache.
    cached: int


@dataclass
class Build:
    """A template build."""

    #: ``bld_...``
    id: str
    name: str
    tag: str
    #: ``templates/<name>:<tag>``: what a create names once the build is ready.
    image: str
    state: BuildState
    created_at: datetime
    steps: BuildSteps
    started_at: Optional[datetime] = None
    finished_at: Optional[datetime] = None
    digest: Optional[str] = None
    size_bytes: Optional[int] = None
    error: Optional[BuildFailure] = None


@dataclass
class BuildLogEvent:
    """One line of a build's log (``type == "log"``: ``seq``, ``stream``, ``text``, ``step``) or
    the final ``end`` (``state``, ``error``)."""

    type: Literal["log", "end"]
    seq: int = -1
    time: Optional[datetime] = None
    step: Optional[int] = None
    stream: str = ""
    text: str = ""
    state: Optional[str] = None
    error: Optional[BuildFailure] = None


@dataclass
class TemplateInfo:
    """A ready template of the account: the image ``templates/<name>:<tag>``."""

    name: str
    tag: str
    image: str
    digest: str
    size_bytes: int
    build_id: str
    created_at: datetime


class BuildError(SandboxdError):
    """A build that ended ``error`` or ``cancelled``; :attr:`build` has its failure (step,
    Dockerfile line, instruction, exit code, output)."""

    def __init__(self, build: Build) -> None:
        f = build.error
        msg = (
            f"Build {build.id} ({build.image}) was cancelled"
            if build.state == "cancelled"
            else (f.message if f else f"Build {build.id} ({build.image}) failed")
        )
        super().__init__(msg, status=f.code if f else 0, kind=f.kind if f else "unknown", details=f.details if f else None)
        self.build = build

    @property
    def state(self) -> str:
        return self.build.state

    @property
    def failure(self) -> Optional[BuildFailure]:
        return self.build.error

    def _detail(self, k: str) -> Any:
        return self.build.error.details.get(k) if self.build.error else None

    @property
    def step(self) -> Optional[int]:
        return self._detail("step")  # type: ignore[no-any-return]

    @property
    def line(self) -> Optional[int]:
        return self._detail("line")  # type: ignore[no-any-return]

    @property
    def instruction(self) -> Optional[str]:
        return self._detail("instruction")  # type: ignore[no-any-return]

    @property
    def exit_code(self) -> Optional[int]:
        return self._detail("exitCode")  # type: ignore[no-any-return]

    @property
    def output(self) -> Optional[str]:
        return self._detail("output")  # type: ignore[no-any-return]


# -- pure functions shared by both clients -----------------------------------------------------


def _failure(d: Any) -> Optional[BuildFailure]:
    if not isinstance(d, dict):
        return None
    det = d.get("details")
    return BuildFailure(
        code=int(d.get("code", 0)),
        kind=str(d.get("kind", "")),
        message=str(d.get("message", "")),
        details=dict(det) if isinstance(det, dict) else {},
    )


def build_of(d: Mapping[str, Any]) -> Build:
    st = d.get("steps") or {}
    return Build(
        id=d["id"],
        name=d.get("name", ""),
        tag=d.get("tag", ""),
        image=d.get("image", ""),
        state=d["state"],
        created_at=_wire.parse_time(d["createdAt"]),
        steps=BuildSteps(total=int(st.get("total", 0)), done=int(st.get("done", 0)), cached=int(st.get("cached", 0))),
        started_at=_wire.parse_time(d["startedAt"]) if d.get("startedAt") else None,
        finished_at=_wire.parse_time(d["finishedAt"]) if d.get("finishedAt") else None,
        digest=d.get("digest"),
        size_bytes=d.get("sizeBytes"),
        error=_failure(d.get("error")),
    )


def log_event_of(d: Mapping[str, Any]) -> Optional[BuildLogEvent]:
    if d.get("type") == "log":
        return BuildLogEvent(
            type="log",
            seq=int(d.get("seq", -1)),
            time=_wire.parse_time(d["time"]) if d.get("time") else None,
            step=d.get("step"),
            stream=str(d.get("stream", "")),
            text=str(d.get("text", "")),
        )
    if d.get("type") == "end":
        return BuildLogEvent(type="end", state=d.get("state"), error=_failure(d.get("error")))
    return None


def template_of(d: Mapping[str, Any]) -> TemplateInfo:
    return TemplateInfo(
        name=d["name"],
        tag=d.get("tag", ""),
        image=d.get("image", ""),
        digest=d.get("digest", ""),
        size_bytes=int(d.get("sizeBytes", 0)),
        build_id=d.get("buildId", ""),
        created_at=_wire.parse_time(d["createdAt"]),
    )


def _progress_line(ev: Any, on_progress: Callable[[ImageProgress], Any]) -> Optional[ImageInfo]:
    """Handles one line of a pull/build progress stream; the image of the ``done`` line."""
    if not isinstance(ev, dict):
        return None
    t = ev.get("type")
    if t == "progress":
        on_progress(ImageProgress(phase=str(ev.get("phase", "")), bytes=ev.get("bytes"), total_bytes=ev.get("totalBytes")))
    elif t == "error":
        err = ev.get("error") or {}
        raise error_from_response(int(err.get("code", 500)), err)
    elif t == "done":
        return _wire.image_info(ev["image"])
    return None


#: A build context: a directory, a tar already made (bytes, or a path to a ``.tar``/``.tar.gz``
#: file), or a map of file paths to contents.
BuildContext = Union[str, "os.PathLike[str]", bytes, Mapping[str, Union[str, bytes]]]


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    tar.addfile(info, io.BytesIO(data))


def context_body(
    context: Optional[BuildContext],
    dockerfile: Optional[str],
    dockerfile_text: Optional[str],
    compress: bool,
) -> Tuple[bytes, str, Optional[str]]:
    """The tar to send, its media type and the Dockerfile's path in it. A directory is packed
    with symlinks kept (the server applies ``.dockerignore``); an inline Dockerfile goes in
    under a name of its own, listed in ``.dockerignore`` so that no COPY picks it up."""
    if dockerfile is not None and dockerfile_text is not None:
        raise ValueError("give either dockerfile (a path in the context) or dockerfile_text, not both")
    if context is None and dockerfile_text is None:
        raise ValueError("a build needs a context, or dockerfile_text for a build that copies nothing")
    if isinstance(context, bytes) or (
        isinstance(context, (str, os.PathLike)) and os.path.isfile(os.fspath(context))
    ):
        if dockerfile_text is not None:
            raise ValueError("dockerfile_text cannot be added to a tar context: put the Dockerfile in the tar")
        if isinstance(context, bytes):
            data = context
        else:
            with open(os.fspath(context), "rb") as f:
                data = f.read()
        gz = data[:2] == b"\x1f\x8b"
        return data, "application/gzip" if gz else "application/x-tar", dockerfile
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz" if compress else "w", format=tarfile.PAX_FORMAT) as tar:
        ignore: Optional[bytes] = None
        if isinstance(context, (str, os.PathLike)):
            root = os.fspath(context)
            if not os.path.isdir(root):
                raise ValueError(f"build context {root!r} is not a directory or a tar file")
            for name in sorted(os.listdir(root)):
                if name == ".dockerignore" and dockerfile_text is not None:
                    with open(os.path.join(root, name), "rb") as f:
                        ignore = f.read()
                    continue
                tar.add(os.path.join(root, name), arcname=name, recursive=True)
        elif context is not None:
            for path, content in sorted(context.items()):
                clean = re.sub(r"^\.?/+", "", path)
                data = content.encode("utf-8") if isinstance(content, str) else bytes(content)
                if clean == ".dockerignore" and dockerfile_text is not None:
                    ignore = data
                    continue
                _add_bytes(tar, clean, data)
        if dockerfile_text is not None:
            dockerfile = f".dockerfile.{secrets.token_hex(10)}"
            own = ignore if ignore is not None else b".dockerignore"
            _add_bytes(tar, ".dockerignore", own + b"\n" + dockerfile.encode() + b"\n")
            _add_bytes(tar, dockerfile, dockerfile_text.encode("utf-8"))
    return buf.getvalue(), "application/gzip" if compress else "application/x-tar", dockerfile


def build_params(
    name: str,
    tag: Optional[str],
    dockerfile: Optional[str],
    build_args: Optional[Mapping[str, str]],
    allow_domains: Optional[Sequence[str]],
    no_cache: bool,
) -> Dict[str, Any]:
    return {
        "name": name,
        "tag": tag,
        "dockerfile": dockerfile,
        "buildArgs": None if build_args is None else json.dumps(dict(build_args)),
        "allowDomains": None if allow_domains is None else ",".join(allow_domains),
        "noCache": True if no_cache else None,
    }


def _final(build: Build, end: Optional[BuildLogEvent]) -> Build:
    if build.state not in FINAL_STATES and end is not None and end.state in FINAL_STATES:
        build.state = end.state  # type: ignore[assignment]
    if build.error is None and end is not None and end.error is not None:
        build.error = end.error
    return build


def _file_chunks(path: str) -> Iterator[bytes]:
    with open(path, "rb") as f:
        while True:
            b = f.read(_CHUNK)
            if not b:
                return
            yield b


async def _afile_chunks(path: str) -> AsyncIterator[bytes]:
    for b in _file_chunks(path):
        yield b


ImageArchive = Union[bytes, str, "os.PathLike[str]"]
ProgressCallback = Callable[[ImageProgress], Any]
LogCallback = Callable[[BuildLogEvent], Any]


def _job_timeout(timeout: Optional[float]) -> httpx.Timeout:
    return httpx.Timeout(IMAGE_JOB_TIMEOUT_S if timeout is None else timeout)


# -- sync ----------------------------------------------------------------------------------


class ImagesApi:
    """``client.images``."""

    def __init__(self, http: SyncHttp, builds: Optional["BuildsApi"] = None) -> None:
        self.http = http
        self._builds = builds or BuildsApi(http)

    def list(self) -> List[ImageInfo]:
        """Every image in the server's cache (admin)."""
        d = self.http.request_json("GET", "/api/v1/images")
        return [_wire.image_info(i) for i in _wire.items(d, "images")]

    def pull(self, ref: str, *, on_progress: Optional[ProgressCallback] = None, timeout: Optional[float] = None) -> ImageInfo:
        """Pulls ``ref`` from its registry (even when cached) and returns it once done (admin).
        Raises TemplateNotFoundError, ValidationError, ServerError."""
        return self._job("/api/v1/images/pull", ref, on_progress, timeout)

    def build(
        self, ref: Literal["local/debian:bookworm", "local/busybox:latest"], *, on_progress: Optional[ProgressCallback] = None, timeout: Optional[float] = None
    ) -> ImageInfo:
        """(Re)builds one of the default images offline on the server (admin)."""
        return self._job("/api/v1/images/build", ref, on_progress, timeout)

    def import_archive(self, archive: ImageArchive, *, ref: Optional[str] = None, timeout: Optional[float] = None) -> ImageInfo:
        """Uploads an OCI archive or ``docker save`` tar (bytes, or a path: streamed from the
        file) as ``ref`` (default: the name the archive records). Admin. Raises
        ValidationError (unreadable archive, or no name), PayloadTooLargeError."""
        content: Union[bytes, Iterator[bytes]] = (
            archive if isinstance(archive, bytes) else _file_chunks(os.fspath(archive))
        )
        d = self.http.request_json(
            "POST",
            "/api/v1/images/import",
            params={"ref": ref},
            content=content,
            headers={"content-type": "application/x-tar"},
            timeout=_job_timeout(timeout),
        )
        return _wire.image_info(d["image"])

    def build_template(
        self,
        name: str,
        *,
        context: Optional[BuildContext] = None,
        tag: Optional[str] = None,
        dockerfile: Optional[str] = None,
        dockerfile_text: Optional[str] = None,
        build_args: Optional[Mapping[str, str]] = None,
        allow_domains: Optional[Sequence[str]] = None,
        no_cache: bool = False,
        compress: bool = False,
        on_log: Optional[LogCallback] = None,
        on_start: Optional[Callable[[Build], Any]] = None,
    ) -> Build:
        """Builds the template ``templates/<name>:<tag>`` from a Dockerfile and its context (any
        account), follows its log (``on_log``) and returns the build once ``ready``; create
        sandboxes from ``build.image``. Raises BuildError (``step``, ``line``,
        ``instruction``, ``exit_code``, ``output``) when it ends ``error`` or ``cancelled``,
        and what :meth:`BuildsApi.create` raises when it is refused."""
        b = self._builds.create(
            name,
            context=context,
            tag=tag,
            dockerfile=dockerfile,
            dockerfile_text=dockerfile_text,
            build_args=build_args,
            allow_domains=allow_domains,
            no_cache=no_cache,
            compress=compress,
        )
        if on_start is not None:
            on_start(b)
        return self._builds.wait(b.id, on_log=on_log)

    def _job(self, path: str, ref: str, on_progress: Optional[ProgressCallback], timeout: Optional[float]) -> ImageInfo:
        if on_progress is None:
            d = self.http.request_json("POST", path, json={"ref": ref}, timeout=_job_timeout(timeout))
            return _wire.image_info(d["image"])
        dec = NdjsonDecoder()
        with self.http.stream(
            "POST", path, json={"ref": ref}, headers={"accept": "application/x-ndjson"}, timeout=_job_timeout(timeout)
        ) as res:
            if "ndjson" not in res.headers.get("content-type", ""):
                return _wire.image_info(json.loads(res.read())["image"])
            for chunk in res.iter_bytes():
                for ev in dec.feed(chunk):
                    img = _progress_line(ev, on_progress)
                    if img is not None:
                        return img
            for ev in dec.end():
                img = _progress_line(ev, on_progress)
                if img is not None:
                    return img
        raise ServerError("The progress stream ended without a result", status=200, kind="internal")


class _LogCursor:
    """Where a follower of a build's log stands (sync and async share it): the next ``seq``
    wanted (a line below it, sent again after a reconnection, is skipped), and the
    reconnections in a row (reset by each new line; past MAX_LOG_RECONNECTS, ConnectionError)."""

    def __init__(self, build_id: str, offset: int) -> None:
        self.build_id = build_id
        self.path = f"/api/v1/images/builds/{_wire.quote(build_id)}/logs"
        self.next = offset
        self.failures = 0
        self.last: Optional[BaseException] = None

    def params(self, follow: bool) -> Dict[str, Any]:
        self.last = None
        return {"offset": self.next, "follow": True if follow else None}

    def take(self, raw: Any) -> Optional[BuildLogEvent]:
        """The event to hand out for line ``raw``, or None (not an event, or a line seen before)."""
        e = log_event_of(raw) if isinstance(raw, dict) else None
        if e is None or e.type != "log":
            return e
        if e.seq < self.next:
            return None
        self.next = e.seq + 1
        self.failures = 0
        return e

    def cut(self, e: BaseException, follow: bool) -> None:
        """The connection broke with ``e``: raises at once unless following."""
        self.last = e
        if not follow:
            raise ConnectionError(f"The log of build {self.build_id} was cut ({e})", status=0, kind="connection") from e

    def next_wait(self) -> float:
        """Counts one more reconnection; how long to wait before it (ConnectionError past the bound)."""
        self.failures += 1
        if self.failures > MAX_LOG_RECONNECTS:
            raise ConnectionError(
                f"Lost the log of build {self.build_id} {self.failures} times in a row", status=0, kind="connection"
            )
        return retry_wait(self.last or Exception(), self.failures - 1)


class BuildsApi:
    """``client.builds``: the account's template builds."""

    def __init__(self, http: SyncHttp) -> None:
        self.http = http

    def create(
        self,
        name: str,
        *,
        context: Optional[BuildContext] = None,
        tag: Optional[str] = None,
        dockerfile: Optional[str] = None,
        dockerfile_text: Optional[str] = None,
        build_args: Optional[Mapping[str, str]] = None,
        allow_domains: Optional[Sequence[str]] = None,
        no_cache: bool = False,
        compress: bool = False,
        timeout: Optional[float] = None,
    ) -> Build:
        """Sends a build and returns it ``queued`` once the server checked everything (the
        Dockerfile, the images it names, args and domains); it runs in the background. Raises
        ValidationError naming the Dockerfile's line, TemplateNotFoundError (a FROM image that
        does not exist), QuotaExceededError, PayloadTooLargeError."""
        body, ctype, df = context_body(context, dockerfile, dockerfile_text, compress)
        d = self.http.request_json(
            "POST",
            "/api/v1/images/builds",
            params=build_params(name, tag, df, build_args, allow_domains, no_cache),
            content=body,
            headers={"content-type": ctype},
            timeout=BUILD_SEND_TIMEOUT_S if timeout is None else timeout,
        )
        return build_of(d["build"])

    def list(self, *, name: Optional[str] = None, limit: Optional[int] = None) -> List[Build]:
        """The account's builds, newest first; ``name`` keeps one template's."""
        d = self.http.request_json("GET", "/api/v1/images/builds", params={"name": name, "limit": limit})
        return [build_of(b) for b in _wire.items(d, "builds")]

    def get(self, build_id: str) -> Build:
        """One build; raises NotFoundError."""
        return build_of(self.http.request_json("GET", f"/api/v1/images/builds/{_wire.quote(build_id)}")["build"])

    def cancel(self, build_id: str) -> Build:
        """Cancels a queued or running build (it ends ``cancelled``). Raises ConflictError once final."""
        d = self.http.request_json("POST", f"/api/v1/images/builds/{_wire.quote(build_id)}/cancel")
        return build_of(d["build"])

    def delete(self, build_id: str) -> None:
        """Forgets a build and its log (a running one is cancelled first); the template it made stays."""
        self.http.request("DELETE", f"/api/v1/images/builds/{_wire.quote(build_id)}")

    def logs(self, build_id: str, *, offset: int = 0, follow: bool = False) -> Iterator[BuildLogEvent]:
        """A build's log lines from ``offset``. With ``follow``, new lines as they come and, last,
        one ``end`` event; a dropped connection is resumed from the last ``seq`` + 1, so no
        line is lost or repeated (at most 10 reconnections in a row, then ConnectionError)."""
        cur = _LogCursor(build_id, offset)
        while True:
            try:
                with self.http.stream(
                    "GET",
                    cur.path,
                    params=cur.params(follow),
                    headers={"accept": "application/x-ndjson"},
                    timeout=httpx.Timeout(self.http.config.timeout, read=None),
                ) as res:
                    dec = NdjsonDecoder()
                    chunks = res.iter_bytes()
                    done = False
                    while not done:
                        try:
                            evs = dec.feed(next(chunks))
                        except StopIteration:
                            evs, done = dec.end(), True
                        for raw in evs:
                            e = cur.take(raw)
                            if e is not None:
                                yield e
                                if e.type != "log":
                                    return
                if not follow:
                    return
            except (httpx.TransportError, httpx.StreamError, ConnectionError) as e:
                cur.cut(e, follow)
            time.sleep(cur.next_wait())

    def wait(self, build_id: str, *, on_log: Optional[LogCallback] = None, offset: int = 0) -> Build:
        """Follows a build to its end (its log to ``on_log``) and returns it ``ready``. Raises
        BuildError when it ended ``error`` or ``cancelled``."""
        end: Optional[BuildLogEvent] = None
        for e in self.logs(build_id, offset=offset, follow=True):
            if on_log is not None:
                on_log(e)
            if e.type == "end":
                end = e
        b = _final(self.get(build_id), end)
        if b.state == "ready":
            return b
        raise BuildError(b)


class TemplatesApi:
    """``client.templates``: the account's templates (``templates/<name>:<tag>``)."""

    def __init__(self, http: SyncHttp) -> None:
        self.http = http

    def list(self, *, name: Optional[str] = None) -> List[TemplateInfo]:
        """Every template of the account; ``name`` keeps its tags."""
        d = self.http.request_json("GET", "/api/v1/templates", params={"name": name})
        return [template_of(t) for t in _wire.items(d, "templates")]

    def delete(self, name: str, *, tag: Optional[str] = None) -> None:
        """Deletes one tag of a template, or every tag without ``tag``. Raises NotFoundError."""
        self.http.request("DELETE", f"/api/v1/templates/{_wire.quote(name)}", params={"tag": tag})


# -- async ---------------------------------------------------------------------------------


class AsyncImagesApi:
    """``client.images`` of :class:`~sandboxd.AsyncSandboxd`: the methods of :class:`ImagesApi`, awaited."""

    def __init__(self, http: AsyncHttp, builds: Optional["AsyncBuildsApi"] = None) -> None:
        self.http = http
        self._builds = builds or AsyncBuildsApi(http)

    async def list(self) -> List[ImageInfo]:
        d = await self.http.request_json("GET", "/api/v1/images")
        return [_wire.image_info(i) for i in _wire.items(d, "images")]

    async def pull(self, ref: str, *, on_progress: Optional[ProgressCallback] = None, timeout: Optional[float] = None) -> ImageInfo:
        return await self._job("/api/v1/images/pull", ref, on_progress, timeout)

    async def build(
        self, ref: Literal["local/debian:bookworm", "local/busybox:latest"], *, on_progress: Optional[ProgressCallback] = None, timeout: Optional[float] = None
    ) -> ImageInfo:
        return await self._job("/api/v1/images/build", ref, on_progress, timeout)

    async def import_archive(self, archive: ImageArchive, *, ref: Optional[str] = None, timeout: Optional[float] = None) -> ImageInfo:
        content: Union[bytes, AsyncIterator[bytes]] = (
            archive if isinstance(archive, bytes) else _afile_chunks(os.fspath(archive))
        )
        d = await self.http.request_json(
            "POST",
            "/api/v1/images/import",
            params={"ref": ref},
            content=content,
            headers={"content-type": "application/x-tar"},
            timeout=_job_timeout(timeout),
        )
        return _wire.image_info(d["image"])

    async def build_template(
        self,
        name: str,
        *,
        context: Optional[BuildContext] = None,
        tag: Optional[str] = None,
        dockerfile: Optional[str] = None,
        dockerfile_text: Optional[str] = None,
        build_args: Optional[Mapping[str, str]] = None,
        allow_domains: Optional[Sequence[str]] = None,
        no_cache: bool = False,
        compress: bool = False,
        on_log: Optional[LogCallback] = None,
        on_start: Optional[Callable[[Build], Any]] = None,
    ) -> Build:
        b = await self._builds.create(
            name,
            context=context,
            tag=tag,
            dockerfile=dockerfile,
            dockerfile_text=dockerfile_text,
            build_args=build_args,
            allow_domains=allow_domains,
            no_cache=no_cache,
            compress=compress,
        )
        if on_start is not None:
            on_start(b)
        return await self._builds.wait(b.id, on_log=on_log)

    async def _job(self, path: str, ref: str, on_progress: Optional[ProgressCallback], timeout: Optional[float]) -> ImageInfo:
        if on_progress is None:
            d = await self.http.request_json("POST", path, json={"ref": ref}, timeout=_job_timeout(timeout))
            return _wire.image_info(d["image"])
        dec = NdjsonDecoder()
        async with self.http.stream(
            "POST", path, json={"ref": ref}, headers={"accept": "application/x-ndjson"}, timeout=_job_timeout(timeout)
        ) as res:
            if "ndjson" not in res.headers.get("content-type", ""):
                return _wire.image_info(json.loads(await res.aread())["image"])
            async for chunk in res.aiter_bytes():
                for ev in dec.feed(chunk):
                    img = _progress_line(ev, on_progress)
                    if img is not None:
                        return img
            for ev in dec.end():
                img = _progress_line(ev, on_progress)
                if img is not None:
                    return img
        raise ServerError("The progress stream ended without a result", status=200, kind="internal")


class AsyncBuildsApi:
    """``client.builds`` of :class:`~sandboxd.AsyncSandboxd`."""

    def __init__(self, http: AsyncHttp) -> None:
        self.http = http

    async def create(
        self,
        name: str,
        *,
        context: Optional[BuildContext] = None,
        tag: Optional[str] = None,
        dockerfile: Optional[str] = None,
        dockerfile_text: Optional[str] = None,
        build_args: Optional[Mapping[str, str]] = None,
        allow_domains: Optional[Sequence[str]] = None,
        no_cache: bool = False,
        compress: bool = False,
        timeout: Optional[float] = None,
    ) -> Build:
        body, ctype, df = context_body(context, dockerfile, dockerfile_text, compress)
        d = await self.http.request_json(
            "POST",
            "/api/v1/images/builds",
            params=build_params(name, tag, df, build_args, allow_domains, no_cache),
            content=body,
            headers={"content-type": ctype},
            timeout=BUILD_SEND_TIMEOUT_S if timeout is None else timeout,
        )
        return build_of(d["build"])

    async def list(self, *, name: Optional[str] = None, limit: Optional[int] = None) -> List[Build]:
        d = await self.http.request_json("GET", "/api/v1/images/builds", params={"name": name, "limit": limit})
        return [build_of(b) for b in _wire.items(d, "builds")]

    async def get(self, build_id: str) -> Build:
        return build_of((await self.http.request_json("GET", f"/api/v1/images/builds/{_wire.quote(build_id)}"))["build"])

    async def cancel(self, build_id: str) -> Build:
        d = await self.http.request_json("POST", f"/api/v1/images/builds/{_wire.quote(build_id)}/cancel")
        return build_of(d["build"])

    async def delete(self, build_id: str) -> None:
        await self.http.request("DELETE", f"/api/v1/images/builds/{_wire.quote(build_id)}")

    async def logs(self, build_id: str, *, offset: int = 0, follow: bool = False) -> AsyncIterator[BuildLogEvent]:
        """See :meth:`BuildsApi.logs`."""
        cur = _LogCursor(build_id, offset)
        while True:
            try:
                async with self.http.stream(
                    "GET",
                    cur.path,
                    params=cur.params(follow),
                    headers={"accept": "application/x-ndjson"},
                    timeout=httpx.Timeout(self.http.config.timeout, read=None),
                ) as res:
                    dec = NdjsonDecoder()
                    chunks = res.aiter_bytes()
                    done = False
                    while not done:
                        try:
                            evs = dec.feed(await chunks.__anext__())
                        except StopAsyncIteration:
                            evs, done = dec.end(), True
                        for raw in evs:
                            e = cur.take(raw)
                            if e is not None:
                                yield e
                                if e.type != "log":
                                    return
                if not follow:
                    return
            except (httpx.TransportError, httpx.StreamError, ConnectionError) as e:
                cur.cut(e, follow)
            await asyncio.sleep(cur.next_wait())

    async def wait(self, build_id: str, *, on_log: Optional[LogCallback] = None, offset: int = 0) -> Build:
        end: Optional[BuildLogEvent] = None
        async for e in self.logs(build_id, offset=offset, follow=True):
            if on_log is not None:
                on_log(e)
            if e.type == "end":
                end = e
        b = _final(await self.get(build_id), end)
        if b.state == "ready":
            return b
        raise BuildError(b)


class AsyncTemplatesApi:
    """``client.templates`` of :class:`~sandboxd.AsyncSandboxd`."""

    def __init__(self, http: AsyncHttp) -> None:
        self.http = http

    async def list(self, *, name: Optional[str] = None) -> List[TemplateInfo]:
        d = await self.http.request_json("GET", "/api/v1/templates", params={"name": name})
        return [template_of(t) for t in _wire.items(d, "templates")]

    async def delete(self, name: str, *, tag: Optional[str] = None) -> None:
        await self.http.request("DELETE", f"/api/v1/templates/{_wire.quote(name)}", params={"tag": tag})
