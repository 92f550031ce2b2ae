"""Terminals (PTY over WebSocket) through the sync client, on a real server: output arrives,
resize reaches the PTY, two clients share one terminal, reconnect with replay, exit, errors,
and no thread is left behind."""

from __future__ import annotations

import re
import threading
from typing import List

import pytest

from sandboxd import AuthenticationError, ConnectionError, NotFoundError, Sandbox, Sandboxd, ValidationError
from sandboxd.files import Files
from sandboxd.terminal import Terminal, TerminalExit, Terminals

#: Seconds any single wait may take (a loaded machine is slow, never a failure by itself).
WAIT = 60


def ws_threads() -> int:
    """The SDK's WebSocket threads alive now: one per open sync terminal or watch."""
    return sum(1 for t in threading.enumerate() if t.name == "sandboxd-websocket")


def test_echo_output_arrives_and_exit(sandbox: Sandbox) -> None:
    threads = ws_threads()
    with sandbox.terminals.create(cols=100, rows=30) as t:
        assert isinstance(t, Terminal) and t.id.startswith("term_")
        assert t.pid > 0 and t.shell in ("bash", "sh")
        assert ws_threads() == threads + 1
        # The echo of what is typed holds "$((6*7))"; only the shell's output holds 42.
        t.write("echo $((6*7))\n")
        out = t.read_until(re.compile(rb"\n42\r?\n"), timeout=WAIT)
        assert b"echo $((6*7))" in out
        info = sandbox.terminals.get(t.id)
        assert (info.id, info.status, info.client_count) == (t.id, "active", 1)
        assert t.id in [x.id for x in sandbox.terminals.list()]
        t.write(b"exit 3\n")
        assert t.wait(timeout=WAIT) == TerminalExit(exit_code=3, signal=None)
        assert sandbox.terminals.get(t.id).status == "exited"  # kept until deleted
        assert t.exit is not None and t.exit.exit_code == 3
        # What came before the end is still there to read, then the end.
        rest = b""
        for chunk in t:
            rest += chunk
        assert t.read() == b""
        assert not t.connected
        with pytest.raises(ConnectionError):
            t.write("echo too late\n")
    assert ws_threads() == threads
    with pytest.raises(NotFoundError):  # leaving the with deleted it
        sandbox.terminals.get(t.id)


def test_resize_is_seen_by_stty(sandbox: Sandbox) -> None:
    with sandbox.terminals.create(cols=80, rows=24) as t:
        t.write("stty size\n")
        t.read_until(re.compile(rb"\n24 80\r?\n"), timeout=WAIT)
        t.resize(132, 43)
        t.write("stty size\n")
        t.read_until(re.compile(rb"\n43 132\r?\n"), timeout=WAIT)
        with pytest.raises(ValueError):
            t.resize(0, 10)


def test_two_clients_share_one_terminal_and_replay(sandbox: Sandbox) -> None:
    threads = ws_threads()
    a = sandbox.terminals.create()
    try:
        b = sandbox.terminals.connect(a.id)
        assert b.id == a.id and b.pid == a.pid
        assert sandbox.terminals.get(a.id).client_count == 2
        b.write("echo $((1000+234))\n")  # typed by one, seen by both
        a.read_until(re.compile(rb"\n1234\r?\n"), timeout=WAIT)
        b.read_until(re.compile(rb"\n1234\r?\n"), timeout=WAIT)

        # b leaves; the shell keeps running for a.
        b.disconnect()
        assert not b.connected
        b"".join(b)  # what arrived before is still there to read, then the end
        assert b.read() == b""
        a.write("echo $((2000+345))\n")
        a.read_until(re.compile(rb"\n2345\r?\n"), timeout=WAIT)

        # A reconnect with replay gets earlier output first.
        c = sandbox.terminals.connect(a.id, replay=True)
        c.read_until(re.compile(rb"\n2345\r?\n"), timeout=WAIT)

        # Closing a deletes the terminal: the shell is hung up, c sees the exit.
        a.close()
        assert c.wait(timeout=WAIT) == TerminalExit(exit_code=129, signal="SIGHUP")
        c.disconnect()
    finally:
        a.close()  # a second close is fine
    with pytest.raises(NotFoundError):
        sandbox.terminals.get(a.id)
    assert ws_threads() == threads


def test_iteration_reads_until_the_shell_ends(sandbox: Sandbox) -> None:
    with sandbox.terminals.create(shell="sh") as t:
        assert t.shell == "sh"
        t.write("echo $((3*5)); exit\n")
        out = b"".join(t)  # ends when the shell exits and the server closes
        assert re.search(rb"\n15\r?\n", out)
        assert t.exit == TerminalExit(exit_code=0, signal=None)


def test_terminal_errors(sandbox: Sandbox) -> None:
    threads = ws_threads()
    with pytest.raises(NotFoundError) as e:
        sandbox.terminals.connect("term_aaaaaaaaaaaaaaaa")
    assert e.value.kind == "not_found" and e.value.status == 404
    with pytest.raises(ValidationError) as v:
        sandbox.terminals.create(cwd="/no/such/dir")
    assert v.value.problems[0]["path"] == "/cwd"
    with pytest.raises(ValidationError):
        sandbox.terminals.create(cols=5000)
    with pytest.raises(NotFoundError):
        sandbox.terminals.delete("term_aaaaaaaaaaaaaaaa")
    assert sandbox.terminals.list() == []  # a failed create leaves no terminal
    assert ws_threads() == threads


def test_read_until_timeout_keeps_the_output(sandbox: Sandbox) -> None:
    with sandbox.terminals.create() as t:
        t.write("echo $((40+2))\n")
        t.read_until(re.compile(rb"\n42\r?\n"), timeout=WAIT)
        with pytest.raises(TimeoutError):
            t.read_until("never printed", timeout=0.5)
        t.write("echo $((50+5))\n")
        t.read_until(re.compile(rb"\n55\r?\n"), timeout=WAIT)


def test_one_thread_reads_while_another_writes(sandbox: Sandbox) -> None:
    threads = ws_threads()
    t = sandbox.terminals.create()
    out: List[bytes] = []
    reader = threading.Thread(target=lambda: out.extend(t))  # until the shell ends
    reader.start()
    try:
        for i in range(5):
            t.write(f"echo line-$(({i}+100))\n")
        t.write("exit 7\n")
        reader.join(timeout=WAIT)
        assert not reader.is_alive()
    finally:
        t.close()
        reader.join(timeout=WAIT)
    text = b"".join(out)
    for i in range(5):
        assert re.search(rb"\nline-%d\r?\n" % (i + 100), text)
    assert t.exit == TerminalExit(exit_code=7, signal=None)
    assert ws_threads() == threads


def test_a_megabyte_of_output_and_a_literal_pattern(sandbox: Sandbox) -> None:
    with sandbox.terminals.create() as t:
        # The echo holds "END-$((1+1))"; the output ends in "END-2".
        t.write("head -c 1000000 /dev/zero | tr '\\0' a; echo; echo END-$((1+1))\n")
        out = t.read_until("END-2", timeout=WAIT)
        assert out.count(b"a") >= 1_000_000


def test_bad_credentials_are_refused_before_the_upgrade(sandbox: Sandbox, api_url: str) -> None:
    threads = ws_threads()
    with sandbox.terminals.create() as t:
        with Sandboxd(api_key="sk_" + "x" * 40, api_url=api_url) as bad:
            with pytest.raises(AuthenticationError) as e:
                Terminals(bad.http, sandbox.id).connect(t.id)
            assert e.value.status == 401 and e.value.kind == "unauthorized"
            with pytest.raises(AuthenticationError):
                Files(bad.http, sandbox.id).watch("/tmp")
    assert ws_threads() == threads
