"""Files of a sandbox through the asyncio client, on a real server: streamed upload and
download, list, stat, mkdir, move, remove, watch, and the errors of each."""

from __future__ import annotations

import asyncio
import hashlib
import os
import pathlib
import tempfile
from typing import AsyncIterator, Iterator, List

import pytest

from sandboxd import AsyncSandbox, ConflictError, NotFoundError, RangeNotSatisfiableError, ValidationError
from sandboxd.files import CHUNK_SIZE, AsyncFileDownload, AsyncFiles, AsyncFileWatcher

MIB = 1024 * 1024


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


class AsyncReader:
    """A file object whose ``read`` is a coroutine (as aiofiles'), recording each read."""

    def __init__(self, path: str) -> None:
        self.f = open(path, "rb")
        self.sizes: List[int] = []

    async def read(self, n: int = -1) -> bytes:
        self.sizes.append(n)
        await asyncio.sleep(0)
        data: bytes = self.f.read(n)
        return data

    def close(self) -> None:
        self.f.close()


async def test_5_mib_up_and_down_streamed_byte_exact(asandbox: AsyncSandbox, big_file: str) -> None:
    want = sha256_file(big_file)
    # Up from a plain file object: read off the loop, chunk by chunk.
    with open(big_file, "rb") as f:
        entry = await asandbox.files.write("/tmp/big.bin", f)
    assert entry.size == 5 * MIB and entry.type == "file"

    # Down as a stream into a local file.
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "down.bin")
        chunks = 0
        async with await asandbox.files.stream("/tmp/big.bin") as dl:
            assert isinstance(dl, AsyncFileDownload) and dl.size == 5 * MIB
            with open(out, "wb") as fo:
                async for chunk in dl:
                    assert 0 < len(chunk) <= CHUNK_SIZE
                    fo.write(chunk)
                    chunks += 1
        assert chunks >= 5 * MIB // CHUNK_SIZE
        assert sha256_file(out) == want

    # Up from an async iterator (sent chunked), and from an async file object.
    async def agen() -> AsyncIterator[bytes]:
        with open(big_file, "rb") as f:
            for block in iter(lambda: f.read(100_000), b""):
                yield block

    assert (await asandbox.files.write("/tmp/big2.bin", agen())).size == 5 * MIB
    assert hashlib.sha256(await asandbox.files.read("/tmp/big2.bin")).hexdigest() == want
    reader = AsyncReader(big_file)
    try:
        assert (await asandbox.files.write("/tmp/big3.bin", reader)).size == 5 * MIB
    finally:
        reader.close()
    assert all(0 < n <= CHUNK_SIZE for n in reader.sizes)
    assert hashlib.sha256(await asandbox.files.read("/tmp/big3.bin")).hexdigest() == want
    # And from a local path.
    assert (await asandbox.files.write("/tmp/big4.bin", pathlib.Path(big_file))).size == 5 * MIB
    assert hashlib.sha256(await asandbox.files.read("/tmp/big4.bin")).hexdigest() == want


async def test_text_bytes_iterables_and_ranges(asandbox: AsyncSandbox) -> None:
    f = asandbox.files
    await f.write("/tmp/t/hello.txt", "héllo\n")
    assert await f.read_text("/tmp/t/hello.txt") == "héllo\n"
    await f.write("/tmp/t/parts.txt", ["ab", b"cd", "ef"])  # a plain iterable works too
    assert await f.read("/tmp/t/parts.txt") == b"abcdef"
    assert await f.read("/tmp/t/parts.txt", range=(1, 3)) == b"bcd"
    async with await f.stream("/tmp/t/parts.txt", range=(2, None)) as dl:
        assert await dl.read() == b"cdef"
    with pytest.raises(RangeNotSatisfiableError):
        await f.read("/tmp/t/parts.txt", range=(100, 200))
    assert (await f.write("/tmp/t/run.sh", "#!/bin/sh\necho ran\n", mode=0o755)).mode == 0o755
    assert (await asandbox.exec("/tmp/t/run.sh")).stdout == "ran\n"


async def test_list_stat_mkdir_move_remove(asandbox: AsyncSandbox) -> None:
    f = asandbox.files
    assert (await f.mkdir("/tmp/w/a/b")).type == "dir"
    with pytest.raises(ConflictError):
        await f.mkdir("/tmp/w/a/b")
    await f.write("/tmp/w/a/one.txt", "1")
    await f.write("/tmp/w/a/b/two.txt", "22")
    assert sorted(e.name for e in await f.list("/tmp/w/a")) == ["b", "one.txt"]
    deep = await f.list("/tmp/w/a", depth=2)
    assert sorted(e.path for e in deep) == ["/tmp/w/a/b", "/tmp/w/a/b/two.txt", "/tmp/w/a/one.txt"]
    assert deep.truncated is False
    st = await f.stat("/tmp/w/a/b/two.txt")
    assert (st.type, st.size) == ("file", 2)
    assert await f.exists("/tmp/w/a/one.txt") and not await f.exists("/tmp/w/nope")
    assert (await f.move("/tmp/w/a/one.txt", "/tmp/w/moved.txt")).path == "/tmp/w/moved.txt"
    with pytest.raises(ConflictError):
        await f.rename("/tmp/w/moved.txt", "/tmp/w/a/b/two.txt")
    await f.remove("/tmp/w/a")
    assert [e.name for e in await f.list("/tmp/w")] == ["moved.txt"]
    with pytest.raises(NotFoundError):
        await f.remove("/tmp/w/a")


async def test_missing_and_invalid(asandbox: AsyncSandbox) -> None:
    f = asandbox.files
    with pytest.raises(NotFoundError) as e:
        await f.read("/tmp/does-not-exist")
    assert e.value.kind == "not_found" and e.value.details["path"] == "/tmp/does-not-exist"
    with pytest.raises(NotFoundError):
        await f.stream("/tmp/does-not-exist")
    with pytest.raises(NotFoundError):
        await f.stat("/tmp/does-not-exist")
    with pytest.raises(ValidationError):
        await f.read("/tmp")
    with pytest.raises(ValidationError):
        await f.list("relative")
    with pytest.raises(NotFoundError):
        await AsyncFiles(asandbox.http, "sbx_does_not_exist").exists("/tmp")
    with pytest.raises(ValueError):
        await f.write("/tmp/m.txt", "x", mode=-1)
    with pytest.raises(TypeError):
        await f.write("/tmp/m.txt", 3.5)  # type: ignore[arg-type]
    assert not await f.exists("/tmp/m.txt")


async def test_watch_sees_a_file_an_exec_creates(asandbox: AsyncSandbox) -> None:
    await asandbox.files.mkdir("/tmp/watched/sub")
    async with await asandbox.files.watch("/tmp/watched", recursive=True) as w:
        r = await asandbox.exec("echo hi > /tmp/watched/sub/made-by-exec.txt")
        assert r.exit_code == 0
        seen = []
        for _ in range(50):  # bounded: events of other paths are skipped
            ev = await w.next_event(timeout=30)
            assert ev is not None, "the watch ended early"
            seen.append((ev.type, ev.path))
            if ev.path == "/tmp/watched/sub/made-by-exec.txt":
                break
        assert ("create", "/tmp/watched/sub/made-by-exec.txt") in seen
    assert await w.next_event(timeout=5) is None
    assert [ev async for ev in w] == []
    assert w.close_code == 1000


async def test_watch_iteration_ends_when_closed(asandbox: AsyncSandbox) -> None:
    w = await asandbox.files.watch("/tmp")

    async def collect() -> List[object]:
        return [ev async for ev in w]

    task = asyncio.ensure_future(collect())
    await asyncio.sleep(0)
    await w.close()
    assert await asyncio.wait_for(task, 30) == []


async def test_watch_errors(asandbox: AsyncSandbox) -> None:
    with pytest.raises(NotFoundError):
        await asandbox.files.watch("/tmp/no-such-dir")
    with pytest.raises(ValidationError):
        await asandbox.files.watch("relative/dir")


async def test_the_17th_watch_is_refused_with_the_limit(asandbox: AsyncSandbox) -> None:
    watches: List[AsyncFileWatcher] = []
    try:
        for _ in range(16):
            watches.append(await asandbox.files.watch("/tmp"))
        with pytest.raises(ConflictError) as e:
            await asandbox.files.watch("/tmp")
        assert e.value.status == 409 and e.value.details["limit"] == "watchesPerSandbox"
    finally:
        for w in watches:
            await w.close()
    # Room again once they are closed: the server frees a slot when the watch inside the
    # sandbox has ended, a moment after the close (bounded retries, no timing asserted).
    for _ in range(100):
        try:
            async with await asandbox.files.watch("/tmp"):
                break
        except ConflictError:
            await asyncio.sleep(0.2)
    else:
        raise AssertionError("no watch slot came free after closing 16 watches")
