"""Images, sync and async: the admin's image cache (list, import of a real OCI archive then a
sandbox from it, pull refused, progress streamed), and template builds for any account (a
Dockerfile and its context built into ``templates/<name>:<tag>``, its log followed, a failing
build's line and exit code, templates listed and deleted)."""

from __future__ import annotations

import os
import tarfile
import uuid
from pathlib import Path
from typing import Iterator, List

import pytest

from sandboxd import (
    AsyncSandboxd,
    BuildError,
    BuildLogEvent,
    ImageProgress,
    NotFoundError,
    Sandboxd,
    ValidationError,
)

from conftest import SANDBOX_TIMEOUT_MS, URL

LAYOUT = os.path.join(os.environ.get("SANDBOXD_TEST_IMAGE_DIR", ""), "layouts", "busybox_latest")


@pytest.fixture(scope="module")
def admin(admin_key: str) -> Iterator[Sandboxd]:
    with Sandboxd(api_key=admin_key, api_url=URL, timeout=300) as c:
        yield c


def test_image_cache_is_admin_only(client: Sandboxd, admin: Sandboxd, image: str) -> None:
    with pytest.raises(NotFoundError):
        client.images.list()
    images = admin.images.list()
    assert image in [i.ref for i in images]
    busybox = next(i for i in images if i.ref == image)
    assert busybox.digest.startswith("sha256:") and busybox.size_bytes > 0


def test_import_a_real_archive_and_create_from_it(admin: Sandboxd, client: Sandboxd, tmp_path: Path) -> None:
    if not os.path.isdir(LAYOUT):
        pytest.skip(f"set SANDBOXD_TEST_IMAGE_DIR to the test images (no {LAYOUT})")
    archive = tmp_path / "busybox.tar"
    with tarfile.open(archive, "w") as tar:
        for name in ("oci-layout", "index.json", "blobs"):
            tar.add(os.path.join(LAYOUT, name), arcname=name)
    img = admin.images.import_archive(archive, ref="pysdk/imported:1")  # streamed from the file
    assert img.ref == "pysdk/imported:1" and img.digest.startswith("sha256:")
    with client.sandboxes.create("pysdk/imported:1", timeout_ms=SANDBOX_TIMEOUT_MS) as sb:
        assert sb.exec("echo imported").stdout == "imported\n"
    with pytest.raises(ValidationError):
        admin.images.import_archive(b"\x01\x02\x03", ref="pysdk/junk:1")


def test_pull_refusals_with_and_without_progress(admin: Sandboxd) -> None:
    seen: List[ImageProgress] = []
    for progress in (None, seen.append):
        with pytest.raises(ValidationError) as e:
            admin.images.pull("127.0.0.1:1/nope:1", on_progress=progress)
        assert isinstance(e.value.details, dict) and e.value.details.get("host") == "127.0.0.1"


DOCKERFILE = """FROM local/busybox:latest
ARG GREETING=none
RUN echo "$GREETING" > /built.txt
COPY app/ /app/
"""


def test_build_template_from_a_directory(client: Sandboxd, tmp_path: Path) -> None:
    name = f"py-{uuid.uuid4().hex[:8]}"
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "main.txt").write_text("from the context\n")
    (tmp_path / "Dockerfile").write_text(DOCKERFILE)
    logs: List[BuildLogEvent] = []
    started: List[str] = []
    try:
        b = client.images.build_template(
            name,
            context=tmp_path,
            build_args={"GREETING": "hello"},
            on_log=logs.append,
            on_start=lambda b: started.append(b.id),
        )
        assert b.state == "ready" and b.image == f"templates/{name}:latest" and b.steps.done == b.steps.total >= 3
        assert started == [b.id]
        assert logs[-1].type == "end" and logs[-1].state == "ready"
        seqs = [e.seq for e in logs if e.type == "log"]
        assert seqs == sorted(set(seqs)) and seqs, "log lines in order, none repeated"
        again = [e.seq for e in client.builds.logs(b.id) if e.type == "log"]
        assert again == seqs
        assert [e.seq for e in client.builds.logs(b.id, offset=seqs[-1]) if e.type == "log"] == [seqs[-1]]
        assert client.builds.get(b.id).digest == b.digest
        assert b.id in [x.id for x in client.builds.list(name=name)]
        assert [t.image for t in client.templates.list(name=name)] == [b.image]
        with client.sandboxes.create(b.image, timeout_ms=SANDBOX_TIMEOUT_MS) as sb:
            assert sb.exec("cat /built.txt /app/main.txt").stdout == "hello\nfrom the context\n"

        with pytest.raises(BuildError) as e:
            client.images.build_template(
                name, tag="broken", dockerfile_text="FROM local/busybox:latest\nRUN echo failing >&2; exit 3\n"
            )
        assert e.value.state == "error"
        assert (e.value.step, e.value.line, e.value.exit_code) == (2, 2, 3)
        assert e.value.output is not None and "failing" in e.value.output
        with pytest.raises(ValidationError):
            client.builds.create(name, dockerfile_text="FROM local/busybox:latest\nNOSUCH instruction\n")
    finally:
        for t in client.templates.list(name=name):
            client.templates.delete(name, tag=t.tag)
    assert client.templates.list(name=name) == []
    with pytest.raises(NotFoundError):
        client.templates.delete(name)


async def test_async_images_and_templates(aclient: AsyncSandboxd, admin_key: str) -> None:
    name = f"pya-{uuid.uuid4().hex[:8]}"
    try:
        b = await aclient.images.build_template(
            name,
            context={"data/x.txt": "mapped\n"},
            dockerfile_text="FROM local/busybox:latest\nCOPY data /data\n",
        )
        assert b.state == "ready"
        assert [t.name for t in await aclient.templates.list(name=name)] == [name]
        lines = [e async for e in aclient.builds.logs(b.id)]
        assert lines and all(e.type == "log" for e in lines)
        async with await aclient.sandboxes.create(b.image, timeout_ms=SANDBOX_TIMEOUT_MS) as sb:
            assert (await sb.exec("cat /data/x.txt")).stdout == "mapped\n"
    finally:
        await aclient.templates.delete(name)
    with pytest.raises(NotFoundError):
        await aclient.images.list()
    async with AsyncSandboxd(api_key=admin_key, api_url=URL) as admin:
        assert len(await admin.images.list()) > 0
        with pytest.raises(ValidationError):
            await admin.images.import_archive(b"junk", ref="pysdk/junk:1")
        with pytest.raises(ValidationError):
            await admin.images.pull("127.0.0.1:1/nope:1", on_progress=lambda p: None)
