"""Pure helpers of streamed answers, shared by the sync and async clients: NDJSON decoding,
and the bookkeeping of a process's output across reconnections (``replayFrom``)."""

from __future__ import annotations

import codecs
import json
from dataclasses import replace
from typing import Any, Dict, List, Optional

from .errors import ServerError
from .types import ExecEvent, ExecResult, ProcessExit

#: What a handle's result keeps of each stream, like a one-shot exec; iterators get everything.
MAX_RESULT_BYTES = 1 << 20
#: Consecutive failed reconnections before a handle gives up.
MAX_RECONNECTS = 8


class NdjsonDecoder:
    """Splits bytes into lines of JSON as they arrive. A complete line that is not JSON raises
    ServerError; a last line without its newline is kept when it parses and dropped when it
    does not (the connection was cut inside it)."""

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, chunk: bytes) -> List[Any]:
        self._buf += chunk
        out: List[Any] = []
        while True:
            nl = self._buf.find(b"\n")
            if nl < 0:
                return out
            line = self._buf[:nl].strip()
            self._buf = self._buf[nl + 1 :]
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except ValueError:
                raise ServerError(
                    f"The server sent a line that is not JSON: {line[:80]!r}", status=200, kind="internal"
                ) from None

    def end(self) -> List[Any]:
        rest = self._buf.strip()
        self._buf = b""
        if not rest:
            return []
        try:
            return [json.loads(rest)]
        except ValueError:
            return []


def backoff(failures: int) -> float:
    """Seconds to wait before reconnection attempt ``failures`` (1-based)."""
    return float(min(0.1 * 2 ** (failures - 1), 4.0))


class OutputTracker:
    """What a process handle has delivered, so that a reconnection neither loses nor repeats
    output: the server's ``start`` line of a reconnection says in ``replayFrom`` how many bytes
    of each stream came before what it replays; the handle skips the replayed bytes it
    already delivered. It keeps the first 1 MiB of each stream for :meth:`result`, and decodes
    text incrementally (a character split between chunks is decoded whole)."""

    def __init__(self) -> None:
        self.delivered: Dict[str, int] = {"stdout": 0, "stderr": 0}
        self._skip: Dict[str, int] = {"stdout": 0, "stderr": 0}
        self._kept: Dict[str, List[bytes]] = {"stdout": [], "stderr": []}
        self._kept_bytes: Dict[str, int] = {"stdout": 0, "stderr": 0}
        self._decoders = {s: codecs.getincrementaldecoder("utf-8")("replace") for s in ("stdout", "stderr")}
        #: True when output written while disconnected was lost (more than the server keeps).
        self.lost = False
        self.truncated = False
        self.exit: Optional[ProcessExit] = None
        self._connections = 0

    def begin(self, start: ExecEvent) -> None:
        """Takes the ``start`` line of a (re)connection. On the first connection the replay is
        wherever the server begins it; on a later one, bytes before ``delivered`` are skipped."""
        first = self._connections == 0
        self._connections += 1
        rf = start.replay_from or {}
        for s in ("stdout", "stderr"):
            before = int(rf.get(s, 0))
            if first:
                self._skip[s] = 0
                continue
            skip = self.delivered[s] - before
            if skip < 0:
                self.lost = True
                self.truncated = True
                skip = 0
            self._skip[s] = skip

    def take(self, ev: ExecEvent) -> Optional[ExecEvent]:
        """The new part of an output event (None when all of it was delivered before)."""
        if ev.type not in ("stdout", "stderr"):
            return ev
        s = ev.type
        raw = ev.raw
        if self._skip[s]:
            n = min(self._skip[s], len(raw))
            self._skip[s] -= n
            raw = raw[n:]
        if not raw:
            return None
        self.delivered[s] += len(raw)
        room = MAX_RESULT_BYTES - self._kept_bytes[s]
        if room > 0:
            part = raw[:room]
            self._kept[s].append(part)
            self._kept_bytes[s] += len(part)
        if len(raw) > room:
            self.truncated = True
        return replace(ev, raw=raw, data=self._decoders[s].decode(raw))

    def finish(self, exit_code: int, signal: Optional[str]) -> List[ExecEvent]:
        """Records the exit; returns the text the decoders still held (as output events)."""
        self.exit = ProcessExit(exit_code=exit_code, signal=signal)
        out: List[ExecEvent] = []
        for s in ("stdout", "stderr"):
            rest = self._decoders[s].decode(b"", final=True)
            if rest:
                out.append(ExecEvent(type="stdout" if s == "stdout" else "stderr", data=rest, raw=b""))
        return out

    def result(self) -> ExecResult:
        """The result once exited: the first 1 MiB of each stream, the exit code."""
        assert self.exit is not None
        code = self.exit.exit_code
        return ExecResult(
            stdout=b"".join(self._kept["stdout"]).decode("utf-8", "replace"),
            stderr=b"".join(self._kept["stderr"]).decode("utf-8", "replace"),
            exit_code=code,
            success=code == 0,
            truncated=self.truncated,
        )


def start_event(obj: Any) -> ExecEvent:
    """The ``start`` line that must begin a process output stream; ServerError otherwise."""
    from . import _wire

    ev = _wire.exec_event(obj) if isinstance(obj, dict) else None
    if ev is None or ev.type != "start" or not isinstance(ev.pid, int):
        raise ServerError("The process output stream did not begin with a start line", status=200, kind="internal")
    return ev
