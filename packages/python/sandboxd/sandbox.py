"""``Sandbox`` and ``AsyncSandbox``: create, find, run commands in, extend, pause, stop,
snapshot and delete sandboxes. The two classes have the same methods; the async ones are
awaited. Request bodies and answers go through :mod:`sandboxd._wire`, shared by both.
"""

from __future__ import annotations

from datetime import datetime
from types import TracebackType
from typing import (
    Any,
    AsyncIterator,
    Dict,
    Iterator,
    List,
    Literal,
    Mapping,
    Optional,
    Sequence,
    Type,
    TypeVar,
    Union,
    overload,
)

from . import _wire
from ._connection import HasAsyncHttp, HasSyncHttp, async_http, sync_http
from ._http import AsyncHttp, SyncHttp
from .code import (
    AsyncCodeInterpreter,
    CodeContext,
    CodeInterpreter,
    ErrorCallback,
    Execution,
    ResultCallback,
    TextCallback,
)
from .errors import ConflictError, NotFoundError
from .files import AsyncFiles, Files
from .processes import (
    AsyncProcesses,
    AsyncProcessHandle,
    OutputCallback,
    Processes,
    ProcessHandle,
    StdinData,
)
from .terminal import AsyncTerminals, Terminals
from .types import (
    Egress,
    ExecResult,
    Isolation,
    OnTimeout,
    PauseMemory,
    SandboxInfo,
    SandboxNetwork,
    SandboxPage,
    SandboxState,
    SecretRule,
    SnapshotInfo,
    VolumeSpec,
)

#: Extra seconds the HTTP request of a foreground exec gets beyond the command's own timeout.
EXEC_GRACE_S = 15.0
DEFAULT_EXEC_TIMEOUT_MS = 60_000
#: Page size and page bound of the list iterator.
LIST_PAGE = 1000
MAX_PAGES = 100
#: Default timeout of a snapshot request, seconds: the server copies the sandbox's root layer.
SNAPSHOT_TIMEOUT_S = 600.0

S = TypeVar("S", bound="Sandbox")
A = TypeVar("A", bound="AsyncSandbox")


def _exec_timeout(http: SyncHttp | AsyncHttp, timeout_ms: Optional[int]) -> float:
    ms = DEFAULT_EXEC_TIMEOUT_MS if timeout_ms is None else timeout_ms
    return max(http.config.timeout, ms / 1000.0 + EXEC_GRACE_S)


def _sandbox_path(sandbox_id: str, tail: str = "") -> str:
    return f"/api/v1/sandboxes/{_wire.quote(sandbox_id)}{tail}"


class _Info:
    """Read-only views of :attr:`info`, the server's description as of the last call that returned it."""

    info: SandboxInfo

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def state(self) -> SandboxState:
        """``started``, ``paused``, ``stopped`` or ``error``, as of the last call that returned the sandbox."""
        return self.info.state

    @property
    def image(self) -> str:
        return self.info.image

    @property
    def metadata(self) -> Dict[str, str]:
        return self.info.metadata

    @property
    def on_timeout(self) -> OnTimeout:
        return self.info.on_timeout

    @property
    def created_at(self) -> datetime:
        return self.info.created_at

    @property
    def stop_at(self) -> datetime:
        """Started: when the sandbox is due to stop (or pause). Paused or stopped: when it did."""
        return self.info.stop_at

    @property
    def expires_at(self) -> Optional[datetime]:
        return self.info.expires_at

    @property
    def network(self) -> Optional[SandboxNetwork]:
        return self.info.network

    @property
    def isolation(self) -> Isolation:
        """``container`` or ``gvisor``."""
        return self.info.isolation

    @property
    def paused_memory(self) -> Optional[PauseMemory]:
        """Paused: ``ram`` or ``disk`` (gVisor, checkpointed); None otherwise."""
        return self.info.paused_memory

    def __repr__(self) -> str:
        return f"{type(self).__name__}(id={self.info.id!r}, state={self.info.state!r}, image={self.info.image!r})"


class Sandbox(_Info):
    """A sandbox (blocking API). ``with Sandbox.create(...) as sb:`` deletes it on exit.

    Made by :meth:`create`, :meth:`get` or a client's ``sandboxes``; the static methods take
    ``client=`` (a :class:`~sandboxd.Sandboxd`) or ``api_key=``/``api_url=`` (default: the
    environment, ``SANDBOX_API_KEY`` and ``SANDBOX_API_URL``).
    """

    def __init__(self, info: SandboxInfo, http: SyncHttp) -> None:
        self.info = info
        self.http = http
        #: The sandbox's files: read, write, list, watch.
        self.files = Files(http, info.id)
        #: Interactive terminals (PTY over WebSocket).
        self.terminals = Terminals(http, info.id)
        #: Processes started through the API: list, connect, signal, stdin.
        self.processes = Processes(http, info.id)
        #: The code interpreter (sandboxes of ``local/code-interpreter``).
        self.code = CodeInterpreter(http, info.id)

    # -- static: create, get, list, delete -------------------------------------------------

    @classmethod
    def create(
        cls: Type[S],
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
        client: Optional[HasSyncHttp] = None,
        api_key: Optional[str] = None,
        api_url: Optional[str] = None,
    ) -> S:
        """Creates a sandbox and returns once a command can run in it. Never retried: one call
        starts at most one sandbox.

        ``timeout_ms``: lifetime (default 10 minutes, at most the plan's). ``env``: variables of
        every process. ``volumes``: mount path to a volume name or ``{"name", "sizeGb"}``.
        ``metadata``: string labels (filter the list by them). ``on_timeout``: ``"stop"``
        (default) or ``"pause"``. ``egress``: ``"none"``, ``"internet"`` or
        ``{"allow": [...]}``. ``secrets``: secret injection rules (needs ``egress`` allowing
        their domains; docs/secrets.md), each ``{"secret", "domains", "header"?, "format"?}``.
        ``public_ports``: False makes the ports need the API key. ``isolation``:
        ``"container"`` or ``"gvisor"`` (default: the plan's; QuotaExceededError when the plan
        does not allow it, ValidationError when the host does not offer it).

        Raises ValidationError, InsufficientTokensError, ConcurrencyLimitError,
        TemplateNotFoundError, ConflictError (volume size mismatch), CapacityError.
        """
        http = sync_http(client, api_key, api_url)
        body = _wire.create_body(
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
        )
        d = http.request_json("POST", "/api/v1/sandboxes", json=body)
        return cls(_wire.sandbox_info(d["sandbox"]), http)

    @classmethod
    def get(
        cls: Type[S],
        sandbox_id: str,
        *,
        client: Optional[HasSyncHttp] = None,
        api_key: Optional[str] = None,
        api_url: Optional[str] = None,
    ) -> S:
        """One sandbox by id; raises NotFoundError."""
        http = sync_http(client, api_key, api_url)
        d = http.request_json("GET", _sandbox_path(sandbox_id))
        return cls(_wire.sandbox_info(d["sandbox"]), http)

    @classmethod
    def list_page(
        cls: Type[S],
        *,
        state: Optional[SandboxState] = None,
        metadata: Optional[Mapping[str, str]] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
        client: Optional[HasSyncHttp] = None,
        api_key: Optional[str] = None,
        api_url: Optional[str] = None,
    ) -> SandboxPage:
        """One page of sandboxes, newest first; pass ``next_cursor`` back as ``cursor`` for the next."""
        http = sync_http(client, api_key, api_url)
        params = _wire.list_params(state=state, metadata=metadata, limit=limit, cursor=cursor)
        d = http.request_json("GET", "/api/v1/sandboxes", params=params)
        return SandboxPage(
            sandboxes=[cls(_wire.sandbox_info(s), http) for s in _wire.items(d, "sandboxes")],
            next_cursor=d.get("nextCursor"),
        )

    @classmethod
    def list(
        cls: Type[S],
        *,
        state: Optional[SandboxState] = None,
        metadata: Optional[Mapping[str, str]] = None,
        page_size: int = LIST_PAGE,
        client: Optional[HasSyncHttp] = None,
        api_key: Optional[str] = None,
        api_url: Optional[str] = None,
    ) -> Iterator[S]:
        """Every sandbox of the account, newest first, following the cursor page by page (at
        most 100 pages); ``state`` keeps one state, ``metadata`` the sandboxes having every pair."""
        http = sync_http(client, api_key, api_url)
        cursor: Optional[str] = None
        for _ in range(MAX_PAGES):
            params = _wire.list_params(state=state, metadata=metadata, limit=page_size, cursor=cursor)
            d = http.request_json("GET", "/api/v1/sandboxes", params=params)
            for s in _wire.items(d, "sandboxes"):
                yield cls(_wire.sandbox_info(s), http)
            cursor = d.get("nextCursor")
            if not cursor:
                return

    @staticmethod
    def delete_by_id(
        sandbox_id: str,
        *,
        client: Optional[HasSyncHttp] = None,
        api_key: Optional[str] = None,
        api_url: Optional[str] = None,
    ) -> None:
        """Deletes sandbox ``sandbox_id`` without fetching it first; raises NotFoundError."""
        sync_http(client, api_key, api_url).request("DELETE", _sandbox_path(sandbox_id))

    # -- this sandbox ----------------------------------------------------------------------

    def __enter__(self: S) -> S:
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        try:
            self.delete()
        except NotFoundError:
            pass

    def refresh(self) -> SandboxInfo:
        """Reloads the description from the server; raises NotFoundError once deleted."""
        d = self.http.request_json("GET", _sandbox_path(self.id))
        self.info = _wire.sandbox_info(d["sandbox"])
        return self.info

    @overload
    def exec(
        self,
        command: str,
        *,
        cwd: Optional[str] = ...,
        env: Optional[Mapping[str, str]] = ...,
        user: Optional[str] = ...,
        timeout_ms: Optional[int] = ...,
        tag: Optional[str] = ...,
        background: Literal[True],
        stdin: bool = ...,
        on_stdout: None = ...,
        on_stderr: None = ...,
    ) -> ProcessHandle: ...

    @overload
    def exec(
        self,
        command: str,
        *,
        cwd: Optional[str] = ...,
        env: Optional[Mapping[str, str]] = ...,
        user: Optional[str] = ...,
        timeout_ms: Optional[int] = ...,
        tag: Optional[str] = ...,
        background: Literal[False] = ...,
        stdin: Literal[True],
        on_stdout: None = ...,
        on_stderr: None = ...,
    ) -> ProcessHandle: ...

    @overload
    def exec(
        self,
        command: str,
        *,
        cwd: Optional[str] = ...,
        env: Optional[Mapping[str, str]] = ...,
        user: Optional[str] = ...,
        timeout_ms: Optional[int] = ...,
        tag: Optional[str] = ...,
        background: Literal[False] = ...,
        stdin: Literal[False] = ...,
        on_stdout: Optional[OutputCallback] = ...,
        on_stderr: Optional[OutputCallback] = ...,
        input: Optional[StdinData] = ...,
    ) -> ExecResult: ...

    def exec(
        self,
        command: str,
        *,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        user: Optional[str] = None,
        timeout_ms: Optional[int] = None,
        tag: Optional[str] = None,
        background: bool = False,
        stdin: bool = False,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
        input: Optional[StdinData] = None,  # noqa: A002 - as subprocess.run's
    ) -> Union[ExecResult, ProcessHandle]:
        """Runs ``/bin/sh -c command`` with the sandbox env (merged with ``env``), as ``user``
        (``root``, a uid, ``uid:gid`` or a user name), in ``cwd``.

        - Plain: waits for the command (up to ``timeout_ms``, default 60000; exit code 124 on
          expiry) and returns its :class:`ExecResult`, each stream cut at 1 MiB (``truncated``).
        - With ``on_stdout``/``on_stderr``: the output is streamed, the callbacks get each chunk
          as it is written, and the same result comes when it exits (no time limit unless
          ``timeout_ms``; a dropped connection is resumed without losing or repeating output).
        - With ``input`` (str or bytes): the command reads it on stdin (then EOF), like
          ``subprocess.run(input=...)``; the output is streamed as with callbacks.
        - With ``background=True`` or ``stdin=True``: returns a :class:`ProcessHandle` as soon as
          the process runs (``pid``, ``wait()``, ``kill()``, ``send_stdin()``, iteration).

        A failing command is not an error: check ``exit_code``. Raises ConflictError when the
        sandbox is not started, NotFoundError, ValidationError. See also :meth:`exec_stream`.
        """
        if background or stdin:
            return self.processes.start(
                command, cwd=cwd, env=env, user=user, timeout_ms=timeout_ms, tag=tag, stdin=stdin
            )
        if on_stdout is not None or on_stderr is not None or input is not None:
            h = self.processes.start(
                command,
                cwd=cwd,
                env=env,
                user=user,
                timeout_ms=timeout_ms,
                tag=tag,
                stream=True,
                stdin=input is not None,
            )
            if input is not None:
                try:
                    h.send_stdin(input)
                    h.close_stdin()
                except ConflictError:
                    pass  # it exited (or closed its stdin) without reading everything
            return h.wait(on_stdout=on_stdout, on_stderr=on_stderr)
        opts = _wire.exec_options(cwd=cwd, env=env, user=user, timeout_ms=timeout_ms, tag=tag)
        d = self.http.request_json(
            "POST",
            _sandbox_path(self.id, "/exec"),
            json={"command": command, "options": opts},
            timeout=_exec_timeout(self.http, timeout_ms),
        )
        return _wire.exec_result(d)

    def exec_stream(
        self,
        command: str,
        *,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        user: Optional[str] = None,
        timeout_ms: Optional[int] = None,
        tag: Optional[str] = None,
        stdin: bool = False,
    ) -> ProcessHandle:
        """Starts ``command`` with its output streamed; iterate the returned handle for
        :class:`~sandboxd.types.ExecEvent` s (``stdout``/``stderr`` chunks as written, then
        ``exit``)::

            for ev in sb.exec_stream("make"):
                if ev.type == "stdout":
                    print(ev.data, end="")
        """
        return self.processes.start(
            command, cwd=cwd, env=env, user=user, timeout_ms=timeout_ms, tag=tag, stdin=stdin, stream=True
        )

    def run_code(
        self,
        code: str,
        *,
        language: Optional[str] = None,
        context: Union[CodeContext, str, None] = None,
        envs: Optional[Mapping[str, str]] = None,
        timeout_ms: Optional[int] = None,
        on_stdout: Optional[TextCallback] = None,
        on_stderr: Optional[TextCallback] = None,
        on_result: Optional[ResultCallback] = None,
        on_error: Optional[ErrorCallback] = None,
    ) -> Execution:
        """Runs ``code`` in a stateful kernel of the sandbox's code interpreter (the sandbox must
        be made from ``local/code-interpreter``): Python by default, or ``language``
        (``javascript``, ``typescript``, ``bash``, ``r``), or in ``context``. Returns once the
        run ends with its :class:`~sandboxd.code.Execution`: ``results`` (each with every
        representation, ``formats()``), ``logs``, ``error`` (a code error is not an exception;
        ``TimeoutError`` past ``timeout_ms``, default 300000), ``execution_count``, ``text``.
        ``envs`` apply to this run only. Callbacks get events as they come. Raises
        ValidationError (unknown language), NotFoundError (unknown context),
        NoCodeInterpreterError (not that image), ConflictError (not started)."""
        return self.code.run(
            code,
            language=language,
            context=context,
            envs=envs,
            timeout_ms=timeout_ms,
            on_stdout=on_stdout,
            on_stderr=on_stderr,
            on_result=on_result,
            on_error=on_error,
        )

    def create_code_context(self, *, language: Optional[str] = None, cwd: Optional[str] = None) -> CodeContext:
        """Starts a new code context (a kernel of its own) for ``language`` in ``cwd`` (default ``/home/user``)."""
        return self.code.create_context(language=language, cwd=cwd)

    def list_code_contexts(self) -> List[CodeContext]:
        """The code contexts of the sandbox."""
        return self.code.list_contexts()

    def restart_code_context(self, context: Union[CodeContext, str]) -> None:
        """Restarts a context's kernel: its state is lost, its id stays."""
        self.code.restart_context(context)

    def remove_code_context(self, context: Union[CodeContext, str]) -> None:
        """Ends a code context and its kernel."""
        self.code.remove_context(context)

    def set_timeout(self, timeout_ms: int) -> datetime:
        """Sets the sandbox to stop ``timeout_ms`` from now (0 stops it at once); returns the new
        stop time. Raises ValidationError past the plan's lifetime, InsufficientTokensError,
        ConflictError when stopped."""
        d = self.http.request_json("PATCH", _sandbox_path(self.id, "/timeout"), json={"timeoutMs": timeout_ms})
        stop_at = _wire.parse_time(d["stopAt"])
        self.info.stop_at = stop_at
        return stop_at

    def set_network(self, egress: Egress, *, secrets: Optional[Sequence[SecretRule]] = None) -> SandboxNetwork:
        """Replaces what the sandbox may reach outside (``"none"``, ``"internet"`` or
        ``{"allow": [...]}``); new connections follow it at once. ``secrets`` replaces the
        secret injection rules (``[]`` removes them; None keeps them, checked against the new
        egress). Returns the settings as the server keeps them. Raises ValidationError naming
        the bad rule, QuotaExceededError."""
        d = self.http.request_json(
            "PATCH", _sandbox_path(self.id, "/network"), json=_wire.egress_body(egress, secrets)
        )
        net = _wire.network_of(d["network"])
        self.info.network = net
        return net

    def _transition(self: S, action: str, body: Optional[Dict[str, Any]] = None) -> S:
        d = self.http.request_json("POST", _sandbox_path(self.id, "/" + action), json=body)
        self.info = _wire.sandbox_info(d["sandbox"])
        return self

    def pause(self: S, *, memory: Optional[PauseMemory] = None) -> S:
        """Freezes a started sandbox (processes and memory kept). ``memory="disk"`` (gVisor
        sandboxes) checkpoints it to disk instead: no RAM held, :meth:`resume` restores it.
        Raises ConflictError (not started; ``details['state']``), QuotaExceededError (the
        plan's ``maxPaused``), ValidationError (``disk`` on a container sandbox)."""
        return self._transition("pause", _wire.pause_body(memory))

    def fork(self: S, *, count: Optional[int] = None) -> List[S]:
        """Makes ``count`` (1 to 10, default 1) new sandboxes from this started gVisor sandbox,
        its processes, memory and files included, each with its own address and writable
        layer (named ``<name>-fork-<n>``); this one runs on. All or none: raises
        ValidationError (not gVisor, or count), ConflictError (not started, or volumes),
        ConcurrencyLimitError, InsufficientTokensError, CapacityError."""
        d = self.http.request_json("POST", _sandbox_path(self.id, "/fork"), json=_wire.fork_body(count))
        return [type(self)(_wire.sandbox_info(x), self.http) for x in _wire.items(d, "sandboxes")]

    def resume(self: S, *, timeout_ms: Optional[int] = None) -> S:
        """Thaws a paused sandbox; ``timeout_ms`` is the new lifetime from now (default 10
        minutes). Raises ConflictError (not paused), InsufficientTokensError, ConcurrencyLimitError."""
        return self._transition("resume", _wire.run_body(timeout_ms))

    def stop(self: S) -> S:
        """Stops a started or paused sandbox: processes end, the root layer is kept for
        :meth:`start`. Raises ConflictError (already stopped)."""
        return self._transition("stop")

    def start(self: S, *, timeout_ms: Optional[int] = None) -> S:
        """Starts a stopped sandbox again from its kept root layer (a fresh boot). Raises
        ConflictError (not stopped), InsufficientTokensError, ConcurrencyLimitError, CapacityError."""
        return self._transition("start", _wire.run_body(timeout_ms))

    def snapshot(self, name: str, *, timeout: Optional[float] = None) -> SnapshotInfo:
        """Saves the root layer as the account's image ``snapshots/<name>`` (pass that as
        ``image`` to create). Raises ValidationError (bad name), ConflictError (name taken,
        or the state), QuotaExceededError (``snapshotBytes``)."""
        return _snapshot_sync(self.http, self.id, name, timeout)

    def delete(self) -> None:
        """Kills the sandbox and removes its record (named volumes are kept). Raises NotFoundError."""
        self.http.request("DELETE", _sandbox_path(self.id))

    def public_url(self, port: int) -> str:
        """The public address of ``port`` in the sandbox (``http://8080-sbx_....sandbox.localhost:8080``)."""
        return _wire.public_url(self.http.config.api_url, self.info.public_access_url_template, port)


def _snapshot_sync(http: SyncHttp, sandbox_id: str, name: str, timeout: Optional[float]) -> SnapshotInfo:
    d = http.request_json(
        "POST",
        _sandbox_path(sandbox_id, "/snapshot"),
        json={"name": name},
        timeout=timeout if timeout is not None else max(http.config.timeout, SNAPSHOT_TIMEOUT_S),
    )
    return _wire.snapshot_info(d)


async def _snapshot_async(http: AsyncHttp, sandbox_id: str, name: str, timeout: Optional[float]) -> SnapshotInfo:
    d = await http.request_json(
        "POST",
        _sandbox_path(sandbox_id, "/snapshot"),
        json={"name": name},
        timeout=timeout if timeout is not None else max(http.config.timeout, SNAPSHOT_TIMEOUT_S),
    )
    return _wire.snapshot_info(d)


class AsyncSandbox(_Info):
    """A sandbox (asyncio API): the methods of :class:`Sandbox`, awaited.
    ``async with await AsyncSandbox.create(...) as sb:`` deletes it on exit."""

    def __init__(self, info: SandboxInfo, http: AsyncHttp) -> None:
        self.info = info
        self.http = http
        self.files = AsyncFiles(http, info.id)
        self.terminals = AsyncTerminals(http, info.id)
        self.processes = AsyncProcesses(http, info.id)
        self.code = AsyncCodeInterpreter(http, info.id)

    @classmethod
    async def create(
        cls: Type[A],
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
        client: Optional[HasAsyncHttp] = None,
        api_key: Optional[str] = None,
        api_url: Optional[str] = None,
    ) -> A:
        """See :meth:`Sandbox.create`."""
        http = async_http(client, api_key, api_url)
        body = _wire.create_body(
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
        )
        d = await http.request_json("POST", "/api/v1/sandboxes", json=body)
        return cls(_wire.sandbox_info(d["sandbox"]), http)

    @classmethod
    async def get(
        cls: Type[A],
        sandbox_id: str,
        *,
        client: Optional[HasAsyncHttp] = None,
        api_key: Optional[str] = None,
        api_url: Optional[str] = None,
    ) -> A:
        """See :meth:`Sandbox.get`."""
        http = async_http(client, api_key, api_url)
        d = await http.request_json("GET", _sandbox_path(sandbox_id))
        return cls(_wire.sandbox_info(d["sandbox"]), http)

    @classmethod
    async def list_page(
        cls: Type[A],
        *,
        state: Optional[SandboxState] = None,
        metadata: Optional[Mapping[str, str]] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
        client: Optional[HasAsyncHttp] = None,
        api_key: Optional[str] = None,
        api_url: Optional[str] = None,
    ) -> SandboxPage:
        """See :meth:`Sandbox.list_page`."""
        http = async_http(client, api_key, api_url)
        params = _wire.list_params(state=state, metadata=metadata, limit=limit, cursor=cursor)
        d = await http.request_json("GET", "/api/v1/sandboxes", params=params)
        return SandboxPage(
            sandboxes=[cls(_wire.sandbox_info(s), http) for s in _wire.items(d, "sandboxes")],
            next_cursor=d.get("nextCursor"),
        )

    @classmethod
    async def list(
        cls: Type[A],
        *,
        state: Optional[SandboxState] = None,
        metadata: Optional[Mapping[str, str]] = None,
        page_size: int = LIST_PAGE,
        client: Optional[HasAsyncHttp] = None,
        api_key: Optional[str] = None,
        api_url: Optional[str] = None,
    ) -> AsyncIterator[A]:
        """See :meth:`Sandbox.list`: ``async for sb in AsyncSandbox.list(): ...``."""
        http = async_http(client, api_key, api_url)
        cursor: Optional[str] = None
        for _ in range(MAX_PAGES):
            params = _wire.list_params(state=state, metadata=metadata, limit=page_size, cursor=cursor)
            d = await http.request_json("GET", "/api/v1/sandboxes", params=params)
            for s in _wire.items(d, "sandboxes"):
                yield cls(_wire.sandbox_info(s), http)
            cursor = d.get("nextCursor")
            if not cursor:
                return

    @staticmethod
    async def delete_by_id(
        sandbox_id: str,
        *,
        client: Optional[HasAsyncHttp] = None,
        api_key: Optional[str] = None,
        api_url: Optional[str] = None,
    ) -> None:
        """See :meth:`Sandbox.delete_by_id`."""
        await async_http(client, api_key, api_url).request("DELETE", _sandbox_path(sandbox_id))

    async def __aenter__(self: A) -> A:
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        try:
            await self.delete()
        except NotFoundError:
            pass

    async def refresh(self) -> SandboxInfo:
        d = await self.http.request_json("GET", _sandbox_path(self.id))
        self.info = _wire.sandbox_info(d["sandbox"])
        return self.info

    @overload
    async def exec(
        self,
        command: str,
        *,
        cwd: Optional[str] = ...,
        env: Optional[Mapping[str, str]] = ...,
        user: Optional[str] = ...,
        timeout_ms: Optional[int] = ...,
        tag: Optional[str] = ...,
        background: Literal[True],
        stdin: bool = ...,
        on_stdout: None = ...,
        on_stderr: None = ...,
    ) -> AsyncProcessHandle: ...

    @overload
    async def exec(
        self,
        command: str,
        *,
        cwd: Optional[str] = ...,
        env: Optional[Mapping[str, str]] = ...,
        user: Optional[str] = ...,
        timeout_ms: Optional[int] = ...,
        tag: Optional[str] = ...,
        background: Literal[False] = ...,
        stdin: Literal[True],
        on_stdout: None = ...,
        on_stderr: None = ...,
    ) -> AsyncProcessHandle: ...

    @overload
    async def exec(
        self,
        command: str,
        *,
        cwd: Optional[str] = ...,
        env: Optional[Mapping[str, str]] = ...,
        user: Optional[str] = ...,
        timeout_ms: Optional[int] = ...,
        tag: Optional[str] = ...,
        background: Literal[False] = ...,
        stdin: Literal[False] = ...,
        on_stdout: Optional[OutputCallback] = ...,
        on_stderr: Optional[OutputCallback] = ...,
        input: Optional[StdinData] = ...,
    ) -> ExecResult: ...

    async def exec(
        self,
        command: str,
        *,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        user: Optional[str] = None,
        timeout_ms: Optional[int] = None,
        tag: Optional[str] = None,
        background: bool = False,
        stdin: bool = False,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
        input: Optional[StdinData] = None,  # noqa: A002 - as subprocess.run's
    ) -> Union[ExecResult, AsyncProcessHandle]:
        """See :meth:`Sandbox.exec`: ``background``/``stdin`` return an :class:`AsyncProcessHandle`."""
        if background or stdin:
            return await self.processes.start(
                command, cwd=cwd, env=env, user=user, timeout_ms=timeout_ms, tag=tag, stdin=stdin
            )
        if on_stdout is not None or on_stderr is not None or input is not None:
            h = await self.processes.start(
                command,
                cwd=cwd,
                env=env,
                user=user,
                timeout_ms=timeout_ms,
                tag=tag,
                stream=True,
                stdin=input is not None,
            )
            if input is not None:
                try:
                    await h.send_stdin(input)
                    await h.close_stdin()
                except ConflictError:
                    pass  # it exited (or closed its stdin) without reading everything
            return await h.wait(on_stdout=on_stdout, on_stderr=on_stderr)
        opts = _wire.exec_options(cwd=cwd, env=env, user=user, timeout_ms=timeout_ms, tag=tag)
        d = await self.http.request_json(
            "POST",
            _sandbox_path(self.id, "/exec"),
            json={"command": command, "options": opts},
            timeout=_exec_timeout(self.http, timeout_ms),
        )
        return _wire.exec_result(d)

    async def exec_stream(
        self,
        command: str,
        *,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        user: Optional[str] = None,
        timeout_ms: Optional[int] = None,
        tag: Optional[str] = None,
        stdin: bool = False,
    ) -> AsyncProcessHandle:
        """Starts ``command`` with its output streamed; iterate the returned handle for
        :class:`~sandboxd.types.ExecEvent` s (``stdout``/``stderr`` chunks as written, then
        ``exit``)::

            async for ev in await sb.exec_stream("make"):
                if ev.type == "stdout":
                    print(ev.data, end="")
        """
        return await self.processes.start(
            command, cwd=cwd, env=env, user=user, timeout_ms=timeout_ms, tag=tag, stdin=stdin, stream=True
        )

    async def run_code(
        self,
        code: str,
        *,
        language: Optional[str] = None,
        context: Union[CodeContext, str, None] = None,
        envs: Optional[Mapping[str, str]] = None,
        timeout_ms: Optional[int] = None,
        on_stdout: Optional[TextCallback] = None,
        on_stderr: Optional[TextCallback] = None,
        on_result: Optional[ResultCallback] = None,
        on_error: Optional[ErrorCallback] = None,
    ) -> Execution:
        """See :meth:`Sandbox.run_code`."""
        return await self.code.run(
            code,
            language=language,
            context=context,
            envs=envs,
            timeout_ms=timeout_ms,
            on_stdout=on_stdout,
            on_stderr=on_stderr,
            on_result=on_result,
            on_error=on_error,
        )

    async def create_code_context(self, *, language: Optional[str] = None, cwd: Optional[str] = None) -> CodeContext:
        """Starts a new code context (a kernel of its own) for ``language`` in ``cwd`` (default ``/home/user``)."""
        return await self.code.create_context(language=language, cwd=cwd)

    async def list_code_contexts(self) -> List[CodeContext]:
        """The code contexts of the sandbox."""
        return await self.code.list_contexts()

    async def restart_code_context(self, context: Union[CodeContext, str]) -> None:
        """Restarts a context's kernel: its state is lost, its id stays."""
        await self.code.restart_context(context)

    async def remove_code_context(self, context: Union[CodeContext, str]) -> None:
        """Ends a code context and its kernel."""
        await self.code.remove_context(context)

    async def set_timeout(self, timeout_ms: int) -> datetime:
        d = await self.http.request_json(
            "PATCH", _sandbox_path(self.id, "/timeout"), json={"timeoutMs": timeout_ms}
        )
        stop_at = _wire.parse_time(d["stopAt"])
        self.info.stop_at = stop_at
        return stop_at

    async def set_network(self, egress: Egress, *, secrets: Optional[Sequence[SecretRule]] = None) -> SandboxNetwork:
        d = await self.http.request_json(
            "PATCH", _sandbox_path(self.id, "/network"), json=_wire.egress_body(egress, secrets)
        )
        net = _wire.network_of(d["network"])
        self.info.network = net
        return net

    async def _transition(self: A, action: str, body: Optional[Dict[str, Any]] = None) -> A:
        d = await self.http.request_json("POST", _sandbox_path(self.id, "/" + action), json=body)
        self.info = _wire.sandbox_info(d["sandbox"])
        return self

    async def pause(self: A, *, memory: Optional[PauseMemory] = None) -> A:
        return await self._transition("pause", _wire.pause_body(memory))

    async def fork(self: A, *, count: Optional[int] = None) -> List[A]:
        """See :meth:`Sandbox.fork`."""
        d = await self.http.request_json("POST", _sandbox_path(self.id, "/fork"), json=_wire.fork_body(count))
        return [type(self)(_wire.sandbox_info(x), self.http) for x in _wire.items(d, "sandboxes")]

    async def resume(self: A, *, timeout_ms: Optional[int] = None) -> A:
        return await self._transition("resume", _wire.run_body(timeout_ms))

    async def stop(self: A) -> A:
        return await self._transition("stop")

    async def start(self: A, *, timeout_ms: Optional[int] = None) -> A:
        return await self._transition("start", _wire.run_body(timeout_ms))

    async def snapshot(self, name: str, *, timeout: Optional[float] = None) -> SnapshotInfo:
        return await _snapshot_async(self.http, self.id, name, timeout)

    async def delete(self) -> None:
        await self.http.request("DELETE", _sandbox_path(self.id))

    def public_url(self, port: int) -> str:
        return _wire.public_url(self.http.config.api_url, self.info.public_access_url_template, port)


__all__: List[str] = ["Sandbox", "AsyncSandbox"]
