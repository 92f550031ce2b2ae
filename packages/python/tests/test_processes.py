"""exec in every form, sync and async: one-shot with its options, streamed (iterator and
callbacks), background processes (list, get, stdin, signals, wait), and reconnecting to a
running process without losing or repeating output."""

from __future__ import annotations

import asyncio
from typing import List

import pytest

from sandboxd import (
    AsyncSandbox,
    ConflictError,
    ExecEvent,
    NotFoundError,
    Sandbox,
    ValidationError,
)


# -- one-shot ------------------------------------------------------------------------------


def test_exec_options_cwd_env_user_timeout(shared_sandbox: Sandbox) -> None:
    sb = shared_sandbox
    r = sb.exec("pwd; echo $A-$B; id -u", cwd="/tmp", env={"A": "1", "B": "two"}, user="1000")
    assert r.stdout == "/tmp\n1-two\n1000\n"
    assert r.exit_code == 0 and r.success
    r = sb.exec("sleep 5", timeout_ms=300)
    assert r.exit_code == 124
    assert r.success is False


def test_exec_bad_input_is_a_validation_error(shared_sandbox: Sandbox) -> None:
    with pytest.raises(ValidationError) as e:
        shared_sandbox.exec("true", timeout_ms=0)
    assert e.value.status == 400 and e.value.kind == "validation"
    assert any("timeoutMs" in p.get("path", "") for p in e.value.problems), e.value.problems


def test_exec_output_over_1_mib_is_truncated(shared_sandbox: Sandbox) -> None:
    r = shared_sandbox.exec("head -c 1100000 /dev/zero | tr '\\0' x")
    assert r.truncated is True
    assert len(r.stdout) == 1 << 20


def test_exec_with_input_feeds_stdin(shared_sandbox: Sandbox) -> None:
    r = shared_sandbox.exec("tr a-z A-Z; echo done >&2", input="hello\n")
    assert (r.stdout, r.stderr, r.exit_code) == ("HELLO\n", "done\n", 0)
    assert shared_sandbox.exec("wc -c", input=b"\x00\x01\x02").stdout.strip() == "3"
    # A command that stops reading early is not an error.
    assert shared_sandbox.exec("head -c 2", input="x" * 300_000).stdout == "xx"


async def test_async_exec_options(asandbox: AsyncSandbox) -> None:
    r = await asandbox.exec("pwd; echo $A; id -u", cwd="/tmp", env={"A": "async"}, user="root")
    assert r.stdout == "/tmp\nasync\n0\n"
    assert (await asandbox.exec("exit 7")).exit_code == 7
    assert (await asandbox.exec("cat", input="piped")).stdout == "piped"


# -- streamed ------------------------------------------------------------------------------


def test_exec_stream_iterates_events(shared_sandbox: Sandbox) -> None:
    h = shared_sandbox.exec_stream("echo one; echo err >&2; printf '\\377'; echo two; exit 3")
    assert h.pid > 0
    events: List[ExecEvent] = list(h)
    out = b"".join(e.raw for e in events if e.type == "stdout")
    err = "".join(e.data for e in events if e.type == "stderr")
    assert out == b"one\n\xfftwo\n"
    assert err == "err\n"
    assert events[-1].type == "exit" and events[-1].exit_code == 3
    assert h.exit is not None and h.exit.exit_code == 3


def test_exec_with_callbacks_streams_and_returns_the_result(shared_sandbox: Sandbox) -> None:
    out: List[str] = []
    err: List[str] = []
    r = shared_sandbox.exec(
        "for i in 1 2 3; do echo line$i; sleep 0.05; done; echo bad >&2",
        on_stdout=out.append,
        on_stderr=err.append,
    )
    assert "".join(out) == "line1\nline2\nline3\n"
    assert "".join(err) == "bad\n"
    assert (r.stdout, r.stderr, r.exit_code, r.success) == ("line1\nline2\nline3\n", "bad\n", 0, True)


async def test_async_exec_stream_and_callbacks(asandbox: AsyncSandbox) -> None:
    h = await asandbox.exec_stream("echo a; echo b >&2; exit 2")
    events = [e async for e in h]
    assert "".join(e.data for e in events if e.type == "stdout") == "a\n"
    assert "".join(e.data for e in events if e.type == "stderr") == "b\n"
    assert events[-1].type == "exit" and events[-1].exit_code == 2
    seen: List[str] = []
    r = await asandbox.exec("echo x; echo y", on_stdout=seen.append)
    assert "".join(seen) == "x\ny\n" and r.stdout == "x\ny\n"


# -- background processes ------------------------------------------------------------------


def test_background_list_get_stdin_wait(sandbox: Sandbox) -> None:
    h = sandbox.exec("cat; echo done $X", stdin=True, env={"X": "x"}, tag="py-cat")
    info = sandbox.processes.get(h.pid)
    assert info.running is True and info.tag == "py-cat"
    assert any(p.pid == h.pid for p in sandbox.processes.list())
    h.send_stdin("hello ")
    h.send_stdin(b"bytes\n")
    h.close_stdin()
    r = h.wait()
    assert r.stdout == "hello bytes\ndone x\n"
    assert r.exit_code == 0
    info = sandbox.processes.get(h.pid)
    assert info.running is False and info.exit_code == 0
    with pytest.raises(ConflictError):
        h.send_stdin("too late")
    with pytest.raises(NotFoundError):
        sandbox.processes.get(999_999)
    with pytest.raises(NotFoundError):
        sandbox.processes.signal(999_999, "SIGTERM")


def test_background_kill_and_signal(sandbox: Sandbox) -> None:
    h = sandbox.exec("sleep 60", background=True)
    assert h.pid > 0
    h.kill()
    r = h.wait()
    assert r.exit_code == 128 + 9
    assert h.exit is not None and h.exit.signal == "SIGKILL"
    with pytest.raises(ConflictError):
        h.kill()
    t = sandbox.exec("trap 'echo got term; exit 5' TERM; while true; do sleep 0.1; done", background=True)
    sandbox.processes.signal(t.pid, "SIGTERM")
    assert t.wait().exit_code in (5, 128 + 15)


async def test_async_background_stdin_kill(asandbox: AsyncSandbox) -> None:
    h = await asandbox.exec("cat", stdin=True)
    assert any(p.pid == h.pid and p.running for p in await asandbox.processes.list())
    await h.send_stdin("one\n")
    await h.send_stdin("two\n")
    await h.close_stdin()
    assert (await h.wait()).stdout == "one\ntwo\n"
    k = await asandbox.exec("sleep 60", background=True)
    await k.kill("SIGTERM")
    r = await k.wait()
    assert r.exit_code == 128 + 15
    with pytest.raises(NotFoundError):
        await asandbox.processes.get(999_999)


# -- reconnect -----------------------------------------------------------------------------

COUNT = "i=0; while [ $i -lt 40 ]; do echo n$i; i=$((i+1)); sleep 0.02; done; echo end >&2"
EXPECTED = "".join(f"n{i}\n" for i in range(40))


def test_iteration_resumes_where_it_stopped(sandbox: Sandbox) -> None:
    h = sandbox.exec_stream(COUNT)
    got: List[str] = []
    for ev in h:
        if ev.type == "stdout":
            got.append(ev.data)
        if "".join(got).count("\n") >= 5:
            break  # drops the connection; the process goes on
    r = h.wait(on_stdout=got.append)  # reconnects: replay skips what was delivered
    assert "".join(got) == EXPECTED
    assert r.exit_code == 0
    assert h.output_lost is False


def test_a_dropped_connection_is_resumed_without_loss_or_repeat(sandbox: Sandbox) -> None:
    h = sandbox.exec_stream(COUNT)
    got: List[str] = []
    it = iter(h)
    while "".join(got).count("\n") < 3:
        ev = next(it)
        if ev.type == "stdout":
            got.append(ev.data)
    # Cut the connection being read under the iterator, as a network failure would.
    assert h._current is not None
    h._current._res.close()
    for ev in it:
        if ev.type == "stdout":
            got.append(ev.data)
    assert "".join(got) == EXPECTED
    assert h.exit is not None and h.exit.exit_code == 0
    assert h._tracker._connections == 2  # it did reconnect


def test_connect_replays_a_running_process(sandbox: Sandbox) -> None:
    h = sandbox.exec("echo first; sleep 0.3; echo second; exit 4", background=True)
    c = sandbox.processes.connect(h.pid)
    r = c.wait()
    assert r.stdout == "first\nsecond\n"
    assert r.exit_code == 4
    with pytest.raises(NotFoundError):
        sandbox.processes.connect(999_999)


async def test_async_reconnect(asandbox: AsyncSandbox) -> None:
    h = await asandbox.exec_stream(COUNT)
    got: List[str] = []
    async for ev in h:
        if ev.type == "stdout":
            got.append(ev.data)
        if "".join(got).count("\n") >= 5:
            break
    await h.disconnect()
    r = await h.wait(on_stdout=got.append)
    assert "".join(got) == EXPECTED and r.exit_code == 0
    c = await asandbox.processes.connect(h.pid)
    assert (await c.wait()).stdout == EXPECTED
    await asyncio.sleep(0)
