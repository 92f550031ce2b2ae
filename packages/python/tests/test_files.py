"""Files of a sandbox through the sync client, on a real server: streamed upload and download,
list, stat, mkdir, move, remove, watch, and the errors of each."""

from __future__ import annotations

import hashlib
import io
import os
import pathlib
import tempfile
import threading
from typing import Any, Iterator, List

import pytest

from sandboxd import (
    ConflictError,
    NotFoundError,
    PermissionError,
    RangeNotSatisfiableError,
    Sandbox,
    ValidationError,
)
from sandboxd.files import CHUNK_SIZE, FileDownload, Files

MIB = 1024 * 1024


def ws_threads() -> int:
    """The SDK's WebSocket threads alive now: one per open sync terminal or watch."""
    return sum(1 for t in threading.enumerate() if t.name == "sandboxd-websocket")


class CountingReader(io.RawIOBase):
    """A binary file object that records every read, so a test can see the upload streamed."""

    def __init__(self, f: Any) -> None:
        self.f = f
        self.sizes: List[int] = []

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        self.sizes.append(n)
        data: bytes = self.f.read(n)
        return data


@pytest.fixture
def big_file() -> Iterator[str]:
    """A 5 MiB file of random bytes in a temp dir (removed after)."""
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "big.bin")
        with open(p, "wb") as f:
            f.write(os.urandom(5 * MIB))
        yield p


def sha256_file(p: str) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for block in iter(lambda: f.read(MIB), b""):
            h.update(block)
    return h.hexdigest()


def test_5_mib_up_and_down_streamed_byte_exact(sandbox: Sandbox, big_file: str) -> None:
    want = sha256_file(big_file)
    # Up from a file object: read chunk by chunk, never whole.
    with open(big_file, "rb") as f:
        reader = CountingReader(f)
        entry = sandbox.files.write("/tmp/big.bin", reader)
    assert entry.path == "/tmp/big.bin" and entry.type == "file" and entry.size == 5 * MIB
    assert len(reader.sizes) > 5 * MIB // CHUNK_SIZE
    assert all(0 < n <= CHUNK_SIZE for n in reader.sizes), "every read is one bounded chunk"

    # Down as a stream, chunk by chunk, into a local file.
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "down.bin")
        chunks = 0
        with sandbox.files.stream("/tmp/big.bin", chunk_size=CHUNK_SIZE) as dl, open(out, "wb") as fo:
            assert isinstance(dl, FileDownload) and dl.size == 5 * MIB
            for chunk in dl:
                assert 0 < len(chunk) <= CHUNK_SIZE
                fo.write(chunk)
                chunks += 1
        assert chunks >= 5 * MIB // CHUNK_SIZE
        assert sha256_file(out) == want

    # Up from an iterator of bytes (sent chunked, no length), down whole.
    def gen() -> Iterator[bytes]:
        with open(big_file, "rb") as f:
            for block in iter(lambda: f.read(100_000), b""):
                yield block

    entry = sandbox.files.write("/tmp/big2.bin", gen())
    assert entry.size == 5 * MIB
    data = sandbox.files.read("/tmp/big2.bin")
    assert hashlib.sha256(data).hexdigest() == want

    # Up from a local path (a pathlib.Path; a str would be content).
    assert sandbox.files.write("/tmp/big3.bin", pathlib.Path(big_file)).size == 5 * MIB
    assert hashlib.sha256(sandbox.files.read("/tmp/big3.bin")).hexdigest() == want
    with pytest.raises(FileNotFoundError):
        sandbox.files.write("/tmp/big4.bin", pathlib.Path(big_file + ".missing"))
    assert not sandbox.files.exists("/tmp/big4.bin")


def test_text_bytes_iterables_and_ranges(sandbox: Sandbox) -> None:
    f = sandbox.files
    assert f.write("/tmp/t/hello.txt", "héllo\n").size == len("héllo\n".encode())
    assert f.read_text("/tmp/t/hello.txt") == "héllo\n"
    assert f.read("/tmp/t/hello.txt") == "héllo\n".encode()
    f.write("/tmp/t/parts.txt", ["ab", b"", b"cd", "ef"])
    assert f.read("/tmp/t/parts.txt") == b"abcdef"
    f.write("/tmp/t/bytes.bin", bytearray(b"\x00\x01\xff"))
    assert f.read("/tmp/t/bytes.bin") == b"\x00\x01\xff"
    # A text-mode file object is sent as UTF-8.
    f.write("/tmp/t/text-io.txt", io.StringIO("line 1\nline 2\n"))
    assert f.read_text("/tmp/t/text-io.txt") == "line 1\nline 2\n"
    # Ranges: both ends included; open-ended; past the end is 416.
    assert f.read("/tmp/t/parts.txt", range=(1, 3)) == b"bcd"
    assert f.read("/tmp/t/parts.txt", range=(4, None)) == b"ef"
    with f.stream("/tmp/t/parts.txt", range=(2, 4)) as dl:
        assert dl.read() == b"cde"
        assert dl.content_range == "bytes 2-4/6"
    with pytest.raises(RangeNotSatisfiableError):
        f.read("/tmp/t/parts.txt", range=(100, None))
    # Modes: as a number or octal text; what the exec sees agrees.
    assert f.write("/tmp/t/run.sh", "#!/bin/sh\necho ran\n", mode=0o755).mode == 0o755
    assert sandbox.exec("/tmp/t/run.sh").stdout == "ran\n"
    assert f.write("/tmp/t/ro.txt", "x", mode="0600").mode == 0o600


def test_list_stat_mkdir_move_remove(sandbox: Sandbox) -> None:
    f = sandbox.files
    d = f.mkdir("/tmp/w/a/b")
    assert d.type == "dir" and d.path == "/tmp/w/a/b"
    with pytest.raises(ConflictError):
        f.mkdir("/tmp/w/a/b")
    f.write("/tmp/w/a/one.txt", "1")
    f.write("/tmp/w/a/b/two.txt", "22")

    top = f.list("/tmp/w/a")
    assert sorted(e.name for e in top) == ["b", "one.txt"]
    assert top.truncated is False
    deep = f.list("/tmp/w/a", depth=2)
    assert sorted(e.path for e in deep) == ["/tmp/w/a/b", "/tmp/w/a/b/two.txt", "/tmp/w/a/one.txt"]

    st = f.stat("/tmp/w/a/b/two.txt")
    assert (st.name, st.type, st.size) == ("two.txt", "file", 2)
    assert st.modified_at.tzinfo is not None
    assert f.exists("/tmp/w/a/one.txt") and not f.exists("/tmp/w/nope")

    moved = f.move("/tmp/w/a/one.txt", "/tmp/w/one-moved.txt")
    assert moved.path == "/tmp/w/one-moved.txt" and moved.size == 1
    assert not f.exists("/tmp/w/a/one.txt")
    with pytest.raises(ConflictError):
        f.move("/tmp/w/one-moved.txt", "/tmp/w/a/b/two.txt")  # the target exists
    assert f.rename("/tmp/w/a/b", "/tmp/w/c").type == "dir"
    assert f.read("/tmp/w/c/two.txt") == b"22"

    f.remove("/tmp/w/a")  # a directory, with what is in it
    f.remove("/tmp/w/one-moved.txt")
    assert sorted(e.name for e in f.list("/tmp/w")) == ["c"]
    with pytest.raises(NotFoundError):
        f.remove("/tmp/w/a")


def test_missing_and_invalid(sandbox: Sandbox) -> None:
    f = sandbox.files
    with pytest.raises(NotFoundError) as e:
        f.read("/tmp/does-not-exist")
    assert e.value.kind == "not_found" and e.value.status == 404
    assert e.value.details["path"] == "/tmp/does-not-exist"
    with pytest.raises(NotFoundError):
        f.stream("/tmp/does-not-exist")
    with pytest.raises(NotFoundError):
        f.stat("/tmp/does-not-exist")
    with pytest.raises(NotFoundError):
        f.list("/tmp/does-not-exist")
    with pytest.raises(NotFoundError):
        f.move("/tmp/does-not-exist", "/tmp/x")
    with pytest.raises(ValidationError):
        f.read("/tmp")  # a directory
    with pytest.raises(ValidationError):
        f.read("relative/path")
    f.write("/tmp/file.txt", "x")
    with pytest.raises(ValidationError):
        f.list("/tmp/file.txt")  # not a directory
    # As another user: the sandbox's own permissions apply.
    with pytest.raises(PermissionError) as pe:
        f.read("/etc/shadow", user="1000")
    assert pe.value.status == 403 and pe.value.details["path"] == "/etc/shadow"
    assert f.write("/tmp/by-1000.txt", "x", user="1000").owner != "root"
    # A missing sandbox is not a missing path: exists() raises.
    with pytest.raises(NotFoundError):
        Files(sandbox.http, "sbx_does_not_exist").exists("/tmp")
    # Bad arguments are refused before any request.
    with pytest.raises(ValueError):
        f.write("/tmp/m.txt", "x", mode=0o10000)
    with pytest.raises(ValueError):
        f.read("/tmp/file.txt", range=(3, 1))
    with pytest.raises(TypeError):
        f.write("/tmp/m.txt", 12345)  # type: ignore[arg-type]
    assert f.read("/tmp/file.txt") == b"x"


def test_watch_sees_a_file_an_exec_creates(sandbox: Sandbox) -> None:
    threads = ws_threads()
    sandbox.files.mkdir("/tmp/watched/sub")
    with sandbox.files.watch("/tmp/watched", recursive=True) as w:
        assert ws_threads() == threads + 1  # the connection's thread
        r = sandbox.exec("echo hi > /tmp/watched/sub/made-by-exec.txt")
        assert r.exit_code == 0
        seen = []
        for _ in range(50):  # bounded: events of other paths are skipped
            ev = w.next_event(timeout=30)
            assert ev is not None, "the watch ended early"
            seen.append((ev.type, ev.path))
            if ev.path == "/tmp/watched/sub/made-by-exec.txt" and ev.type in ("create", "write"):
                break
        assert ("create", "/tmp/watched/sub/made-by-exec.txt") in seen
    # Closed: iteration ends at once, and the thread is gone.
    assert w.next_event(timeout=5) is None
    assert list(w) == []
    assert w.close_code == 1000
    assert ws_threads() == threads


def test_watch_close_from_another_thread_ends_iteration(sandbox: Sandbox) -> None:
    threads = ws_threads()
    w = sandbox.files.watch("/tmp")
    got: List[Any] = []
    t = threading.Thread(target=lambda: got.extend(w))
    t.start()
    w.close()
    t.join(timeout=30)
    assert not t.is_alive() and got == []
    assert ws_threads() == threads


def test_watch_errors(sandbox: Sandbox) -> None:
    threads = ws_threads()
    with pytest.raises(NotFoundError) as e:
        sandbox.files.watch("/tmp/no-such-dir")
    assert e.value.kind == "not_found"
    with pytest.raises(ValidationError) as v:
        sandbox.files.watch("relative/dir")
    assert v.value.problems[0]["path"] == "/path"
    assert ws_threads() == threads  # a refused watch leaves no thread
