"""Terminals (PTY over WebSocket) through the asyncio client, on a real server: output
arrives, resize reaches the PTY, two clients share one terminal, reconnect with replay, exit,
and errors."""

from __future__ import annotations

import re

import pytest

from sandboxd import AsyncSandbox, ConnectionError, NotFoundError, ValidationError
from sandboxd.terminal import AsyncTerminal, TerminalExit

#: Seconds any single wait may take (a loaded machine is slow, never a failure by itself).
WAIT = 60


async def test_echo_output_arrives_and_exit(asandbox: AsyncSandbox) -> None:
    async with await asandbox.terminals.create(cols=100, rows=30) as t:
        assert isinstance(t, AsyncTerminal) and t.id.startswith("term_") and t.pid > 0
        await t.write("echo $((6*7))\n")
        out = await t.read_until(re.compile(rb"\n42\r?\n"), timeout=WAIT)
        assert b"echo $((6*7))" in out
        info = await asandbox.terminals.get(t.id)
        assert (info.status, info.client_count) == ("active", 1)
        assert [x.id for x in await asandbox.terminals.list()] == [t.id]
        await t.write(b"exit 4\n")
        assert await t.wait(timeout=WAIT) == TerminalExit(exit_code=4, signal=None)
        assert (await asandbox.terminals.get(t.id)).status == "exited"
        assert [c async for c in t] is not None  # the rest, then the end
        assert await t.read() == b""
        with pytest.raises(ConnectionError):
            await t.write("echo too late\n")
    with pytest.raises(NotFoundError):
        await asandbox.terminals.get(t.id)


async def test_resize_is_seen_by_stty(asandbox: AsyncSandbox) -> None:
    async with await asandbox.terminals.create(cols=80, rows=24) as t:
        await t.write("stty size\n")
        await t.read_until(re.compile(rb"\n24 80\r?\n"), timeout=WAIT)
        await t.resize(120, 50)
        await t.write("stty size\n")
        await t.read_until(re.compile(rb"\n50 120\r?\n"), timeout=WAIT)
        with pytest.raises(ValueError):
            await t.resize(10, -1)


async def test_two_clients_share_one_terminal_and_replay(asandbox: AsyncSandbox) -> None:
    a = await asandbox.terminals.create()
    try:
        b = await asandbox.terminals.connect(a.id)
        assert b.pid == a.pid
        assert (await asandbox.terminals.get(a.id)).client_count == 2
        await a.write("echo $((1000+234))\n")  # typed by one, seen by both
        await a.read_until(re.compile(rb"\n1234\r?\n"), timeout=WAIT)
        await b.read_until(re.compile(rb"\n1234\r?\n"), timeout=WAIT)
        await b.disconnect()
        assert not b.connected

        c = await asandbox.terminals.connect(a.id, replay=True)
        await c.read_until(re.compile(rb"\n1234\r?\n"), timeout=WAIT)  # from the replay
        await a.close()
        assert await c.wait(timeout=WAIT) == TerminalExit(exit_code=129, signal="SIGHUP")
        await c.disconnect()
    finally:
        await a.close()
    with pytest.raises(NotFoundError):
        await asandbox.terminals.get(a.id)


async def test_iteration_reads_until_the_shell_ends(asandbox: AsyncSandbox) -> None:
    async with await asandbox.terminals.create(shell="sh") as t:
        await t.write("echo $((3*5)); exit\n")
        out = b"".join([chunk async for chunk in t])
        assert re.search(rb"\n15\r?\n", out)
        assert t.exit == TerminalExit(exit_code=0, signal=None)


async def test_terminal_errors(asandbox: AsyncSandbox) -> None:
    with pytest.raises(NotFoundError) as e:
        await asandbox.terminals.connect("term_aaaaaaaaaaaaaaaa")
    assert e.value.kind == "not_found"
    with pytest.raises(ValidationError) as v:
        await asandbox.terminals.create(shell="zsh")  # busybox has no zsh
    assert v.value.problems[0]["path"] == "/shell"
    with pytest.raises(NotFoundError):
        await asandbox.terminals.delete("term_aaaaaaaaaaaaaaaa")
    assert await asandbox.terminals.list() == []
    async with await asandbox.terminals.create() as t:
        with pytest.raises(TimeoutError):
            await t.read_until("never printed", timeout=0.5)
        await t.write("echo $((50+5))\n")
        await t.read_until(re.compile(rb"\n55\r?\n"), timeout=WAIT)
