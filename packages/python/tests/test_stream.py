"""The pure parts of streamed answers (no server): NDJSON split at any byte, and a process
handle's bookkeeping across reconnections (``replayFrom``), which the reconnect tests of
test_processes.py exercise for real."""

from __future__ import annotations

import pytest

from sandboxd import ExecEvent, ServerError
from sandboxd._stream import NdjsonDecoder, OutputTracker


def test_ndjson_lines_split_anywhere() -> None:
    data = b'{"a":1}\n\n{"b":"\xc3\xa9"}\n{"c":'
    for cut in range(len(data) + 1):
        d = NdjsonDecoder()
        got = d.feed(data[:cut]) + d.feed(data[cut:])
        assert got == [{"a": 1}, {"b": "é"}]
        assert d.end() == []  # a last line cut inside is dropped
    d = NdjsonDecoder()
    d.feed(b'{"x":2}')
    assert d.end() == [{"x": 2}]  # a last line without its newline is kept when whole
    with pytest.raises(ServerError):
        NdjsonDecoder().feed(b"not json\n")


def _out(stream: str, raw: bytes) -> ExecEvent:
    return ExecEvent(type="stdout" if stream == "stdout" else "stderr", raw=raw, data=raw.decode("utf-8", "replace"))


def test_reconnect_skips_exactly_what_was_delivered() -> None:
    t = OutputTracker()
    t.begin(ExecEvent(type="start", pid=1))
    assert t.take(_out("stdout", b"abc")) is not None
    assert t.take(_out("stderr", b"E")) is not None
    # The server replays from the start of each stream: abc and E again, then new bytes.
    t.begin(ExecEvent(type="start", pid=1, replay_from={"stdout": 0, "stderr": 0}))
    assert t.take(_out("stdout", b"ab")) is None
    new = t.take(_out("stdout", b"cdef"))
    assert new is not None and new.raw == b"def"
    assert t.take(_out("stderr", b"EF")) == _out("stderr", b"F")
    # A replay that starts later (the server dropped old output) skips less.
    t.begin(ExecEvent(type="start", pid=1, replay_from={"stdout": 4, "stderr": 2}))
    new = t.take(_out("stdout", b"efg"))
    assert new is not None and new.raw == b"g" and t.lost is False
    # One that starts past what was delivered: bytes were lost in between.
    t.begin(ExecEvent(type="start", pid=1, replay_from={"stdout": 100, "stderr": 2}))
    assert t.lost is True
    t.finish(0, None)
    r = t.result()
    assert (r.stdout, r.stderr, r.exit_code, r.truncated) == ("abcdefg", "EF", 0, True)


def test_text_split_inside_a_character_is_decoded_whole() -> None:
    t = OutputTracker()
    t.begin(ExecEvent(type="start", pid=1))
    e = "é".encode()
    a = t.take(_out("stdout", b"x" + e[:1]))
    b = t.take(_out("stdout", e[1:]))
    assert a is not None and b is not None and (a.data, b.data) == ("x", "é")
