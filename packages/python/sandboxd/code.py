"""The code interpreter of a sandbox made from ``local/code-interpreter``: ``run_code`` runs
code in a stateful kernel (Python by default; JavaScript, TypeScript, bash, R) and collects
what it gave: printed output, results in every representation (text, html, markdown, svg,
png, jpeg, pdf, latex, json, javascript, a DataFrame's data, a chart), an error with its
traceback. Contexts are kernels of their own (docs/code-interpreter.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

import httpx

from . import _wire
from ._http import AsyncHttp, SyncHttp
from ._stream import NdjsonDecoder
from .errors import ConnectionError

#: The formats of a result with a field of their own, in the order :meth:`Result.formats` lists them.
FORMATS = ("text", "html", "markdown", "svg", "png", "jpeg", "pdf", "latex", "json", "javascript", "data", "chart")
#: Time the server is given, past the run's own timeout, to answer (seconds).
GRACE_S = 30.0
DEFAULT_TIMEOUT_MS = 300_000


@dataclass
class CodeContext:
    """A context: one kernel with its own state, language and working directory."""

    id: str
    language: str
    cwd: str


@dataclass
class ExecutionError:
    """An error the code raised (``TimeoutError`` when the run was interrupted at its timeout)."""

    #: The exception's class, e.g. ``ZeroDivisionError``.
    name: str
    value: str
    #: The traceback as the kernel printed it (may hold ANSI colours).
    traceback: str


@dataclass
class Result:
    """One result of a run: the value of the cell's last expression (``is_main_result``) or a
    display output (a plot shown, ``display(...)``), with every representation the kernel gave.
    ``png``, ``jpeg`` and ``pdf`` are base64."""

    text: Optional[str] = None
    html: Optional[str] = None
    markdown: Optional[str] = None
    svg: Optional[str] = None
    png: Optional[str] = None
    jpeg: Optional[str] = None
    pdf: Optional[str] = None
    latex: Optional[str] = None
    json: Any = None
    javascript: Optional[str] = None
    #: A pandas DataFrame's data.
    data: Optional[Dict[str, Any]] = None
    #: A matplotlib figure read as a chart: ``type``, ``title``, ``elements``, axes.
    chart: Optional[Dict[str, Any]] = None
    #: Representations with no field of their own, by MIME type.
    extra: Dict[str, Any] = field(default_factory=dict)
    is_main_result: bool = False

    def formats(self) -> List[str]:
        """The representations this result has: ``text``, ``html``, ``png``, ..., then ``extra``'s MIME types."""
        return [k for k in FORMATS if getattr(self, k) is not None] + list(self.extra)


@dataclass
class Logs:
    """Printed output, in chunks as they came."""

    stdout: List[str] = field(default_factory=list)
    stderr: List[str] = field(default_factory=list)


@dataclass
class Execution:
    """What a run gave."""

    #: Results in the order they came: display outputs and the main result.
    results: List[Result] = field(default_factory=list)
    logs: Logs = field(default_factory=Logs)
    #: The error the code raised, or ``TimeoutError``; None when it ran through.
    error: Optional[ExecutionError] = None
    #: The kernel's execution counter after this run.
    execution_count: Optional[int] = None

    @property
    def text(self) -> Optional[str]:
        """The text of the main result (the last expression's value), if any."""
        for r in self.results:
            if r.is_main_result:
                return r.text
        return None


#: Callbacks of ``run_code``.
TextCallback = Callable[[str], Any]
ResultCallback = Callable[[Result], Any]
ErrorCallback = Callable[[ExecutionError], Any]


def result_of(d: Mapping[str, Any]) -> Result:
    kw: Dict[str, Any] = {k: d[k] for k in FORMATS if d.get(k) is not None}
    extra = d.get("extra")
    return Result(**kw, extra=dict(extra) if isinstance(extra, dict) else {}, is_main_result=d.get("isMainResult") is True)


def context_of(d: Mapping[str, Any]) -> CodeContext:
    return CodeContext(id=str(d["id"]), language=str(d.get("language", "")), cwd=str(d.get("cwd", "")))


def apply_event(ex: Execution, ev: Mapping[str, Any]) -> Optional[Tuple[str, Any]]:
    """Adds one event of the stream to ``ex``; returns the callback to call and its argument."""
    t = ev.get("type")
    if t in ("stdout", "stderr"):
        text = ev.get("text") if isinstance(ev.get("text"), str) else ""
        assert isinstance(text, str)
        (ex.logs.stdout if t == "stdout" else ex.logs.stderr).append(text)
        return (str(t), text)
    if t == "result":
        r = result_of(ev.get("result") or {})
        ex.results.append(r)
        return ("result", r)
    if t == "error":
        err = ExecutionError(
            name=str(ev.get("name") or ""), value=str(ev.get("value") or ""), traceback=str(ev.get("traceback") or "")
        )
        ex.error = err
        return ("error", err)
    if t == "executionCount" and isinstance(ev.get("count"), int):
        ex.execution_count = ev["count"]
    return None


def run_body(
    code: str,
    language: Optional[str],
    context: Union[CodeContext, str, None],
    envs: Optional[Mapping[str, str]],
    timeout_ms: Optional[int],
) -> Dict[str, Any]:
    if context is not None and language is not None:
        raise ValueError("run_code: give context or language, not both")
    body: Dict[str, Any] = {"code": code}
    if language is not None:
        body["language"] = language
    if context is not None:
        body["contextId"] = context if isinstance(context, str) else context.id
    if envs is not None:
        body["envs"] = dict(envs)
    if timeout_ms is not None:
        body["timeoutMs"] = timeout_ms
    return body


def _timeout(http: SyncHttp | AsyncHttp, timeout_ms: Optional[int]) -> httpx.Timeout:
    # The server sends a keepalive line every 5 s of silence; the read limit is the run's budget.
    run_s = (DEFAULT_TIMEOUT_MS if timeout_ms is None else timeout_ms) / 1000.0 + GRACE_S
    return httpx.Timeout(http.config.timeout, read=max(http.config.timeout, run_s))


def _context_id(context: Union[CodeContext, str]) -> str:
    return _wire.quote(context if isinstance(context, str) else context.id)


def _call(
    what: Optional[Tuple[str, Any]],
    on_stdout: Optional[TextCallback],
    on_stderr: Optional[TextCallback],
    on_result: Optional[ResultCallback],
    on_error: Optional[ErrorCallback],
) -> None:
    if what is None:
        return
    kind, arg = what
    fn: Optional[Callable[[Any], Any]] = {
        "stdout": on_stdout,
        "stderr": on_stderr,
        "result": on_result,
        "error": on_error,
    }.get(kind)
    if fn is not None:
        fn(arg)


def _incomplete(ended: bool, ex: Execution) -> None:
    # A run ends with `end`, or with an error event (timeout, the kernel gone); else the connection was cut.
    if not ended and ex.error is None:
        raise ConnectionError("The run's stream ended before its end", status=0, kind="connection")


class CodeInterpreter:
    """``sandbox.code``: the code interpreter calls of one sandbox (sync)."""

    def __init__(self, http: SyncHttp, sandbox_id: str) -> None:
        self._http = http
        self._sandbox_id = sandbox_id

    def _base(self) -> str:
        return f"/api/v1/sandboxes/{_wire.quote(self._sandbox_id)}/code"

    def run(
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
        """See :meth:`sandboxd.Sandbox.run_code`."""
        body = run_body(code, language, context, envs, timeout_ms)
        ex = Execution()
        ended = False
        dec = NdjsonDecoder()
        try:
            with self._http.stream(
                "POST",
                self._base() + "/execute",
                json=body,
                headers={"accept": "application/x-ndjson"},
                timeout=_timeout(self._http, timeout_ms),
            ) as res:
                for chunk in res.iter_bytes():
                    for ev in dec.feed(chunk):
                        if isinstance(ev, dict):
                            ended = ended or ev.get("type") == "end"
                            _call(apply_event(ex, ev), on_stdout, on_stderr, on_result, on_error)
                for ev in dec.end():
                    if isinstance(ev, dict):
                        ended = ended or ev.get("type") == "end"
                        _call(apply_event(ex, ev), on_stdout, on_stderr, on_result, on_error)
        except (httpx.TransportError, httpx.StreamError) as e:
            raise ConnectionError(f"The run's stream broke before its end ({e})", status=0, kind="connection") from e
        _incomplete(ended, ex)
        return ex

    def create_context(self, *, language: Optional[str] = None, cwd: Optional[str] = None) -> CodeContext:
        """Starts a context: a kernel of its own. Raises ValidationError for an unknown language."""
        body: Dict[str, Any] = {}
        if language is not None:
            body["language"] = language
        if cwd is not None:
            body["cwd"] = cwd
        return context_of(self._http.request_json("POST", self._base() + "/contexts", json=body))

    def list_contexts(self) -> List[CodeContext]:
        """The sandbox's contexts."""
        d = self._http.request_json("GET", self._base() + "/contexts")
        return [context_of(c) for c in _wire.items(d, "contexts")]

    def restart_context(self, context: Union[CodeContext, str]) -> None:
        """Restarts a context's kernel: its state is lost, its id stays. Raises NotFoundError."""
        self._http.request("POST", f"{self._base()}/contexts/{_context_id(context)}/restart")

    def remove_context(self, context: Union[CodeContext, str]) -> None:
        """Ends a context and its kernel. Raises NotFoundError."""
        self._http.request("DELETE", f"{self._base()}/contexts/{_context_id(context)}")


class AsyncCodeInterpreter:
    """``sandbox.code`` (asyncio)."""

    def __init__(self, http: AsyncHttp, sandbox_id: str) -> None:
        self._http = http
        self._sandbox_id = sandbox_id

    def _base(self) -> str:
        return f"/api/v1/sandboxes/{_wire.quote(self._sandbox_id)}/code"

    async def run(
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
        body = run_body(code, language, context, envs, timeout_ms)
        ex = Execution()
        ended = False
        dec = NdjsonDecoder()
        try:
            async with self._http.stream(
                "POST",
                self._base() + "/execute",
                json=body,
                headers={"accept": "application/x-ndjson"},
                timeout=_timeout(self._http, timeout_ms),
            ) as res:
                async for chunk in res.aiter_bytes():
                    for ev in dec.feed(chunk):
                        if isinstance(ev, dict):
                            ended = ended or ev.get("type") == "end"
                            _call(apply_event(ex, ev), on_stdout, on_stderr, on_result, on_error)
                for ev in dec.end():
                    if isinstance(ev, dict):
                        ended = ended or ev.get("type") == "end"
                        _call(apply_event(ex, ev), on_stdout, on_stderr, on_result, on_error)
        except (httpx.TransportError, httpx.StreamError) as e:
            raise ConnectionError(f"The run's stream broke before its end ({e})", status=0, kind="connection") from e
        _incomplete(ended, ex)
        return ex

    async def create_context(self, *, language: Optional[str] = None, cwd: Optional[str] = None) -> CodeContext:
        body: Dict[str, Any] = {}
        if language is not None:
            body["language"] = language
        if cwd is not None:
            body["cwd"] = cwd
        return context_of(await self._http.request_json("POST", self._base() + "/contexts", json=body))

    async def list_contexts(self) -> List[CodeContext]:
        d = await self._http.request_json("GET", self._base() + "/contexts")
        return [context_of(c) for c in _wire.items(d, "contexts")]

    async def restart_context(self, context: Union[CodeContext, str]) -> None:
        await self._http.request("POST", f"{self._base()}/contexts/{_context_id(context)}/restart")

    async def remove_context(self, context: Union[CodeContext, str]) -> None:
        await self._http.request("DELETE", f"{self._base()}/contexts/{_context_id(context)}")
