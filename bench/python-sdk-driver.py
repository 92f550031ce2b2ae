"""The Python side of bench/python-sdk.ts: one long-lived process, driven over stdin/stdout.

Each request is one JSON line on stdin; each answer one JSON line on stdout. Timings are
taken here, with time.perf_counter_ns, around the Python calls alone (the interpreter's
start and the pipe to the Node side are outside them).

  {"op": "tti", "client": C}              create a sandbox, then exec `true`: {"ms": t}; the
                                          sandbox is deleted afterwards (not timed)
  {"op": "exec", "client": C, "id": ID, "n": N}
                                          N execs of `true` on sandbox ID: {"ms": [t, ...]}
  {"op": "quit"}                          closes the clients and exits

C is "sync" (sandboxd.Sandboxd), "async" (sandboxd.AsyncSandboxd), "httpx" (a plain
httpx.Client with keep-alive, the same requests without the SDK: Python's own floor) or
"httpx-nodelay" (the same with TCP_NODELAY on its sockets). httpcore before 1.0 (Debian 12
has 0.16.3) leaves Nagle's algorithm on in its sync backend, and a request written as
headers then body then waits for the server's delayed ACK (about 40 ms on Linux); its async
backend (anyio) sets TCP_NODELAY. The last row shows what the sync client would cost without
that wait.
Reads SANDBOX_API_URL, SANDBOX_API_KEY and BENCH_IMAGE from the environment; needs
PYTHONPATH=packages/python.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any

import socket

import httpcore
import httpx

from sandboxd import AsyncSandboxd, Sandboxd

IMAGE = os.environ.get("BENCH_IMAGE", "local/busybox:latest")
URL = os.environ["SANDBOX_API_URL"]
KEY = os.environ["SANDBOX_API_KEY"]
LIFETIME_MS = 600_000


def ms_since(t0: int) -> float:
    return (time.perf_counter_ns() - t0) / 1e6


def nodelay_pool() -> Any:
    """An httpcore pool whose sync sockets have TCP_NODELAY (httpcore 0.16's layout; 1.0 sets it itself)."""
    try:
        from httpcore.backends.sync import SyncBackend  # httpcore 0.16, 0.17
    except ImportError:
        from httpcore import SyncBackend  # type: ignore[attr-defined,no-redef]  # httpcore 1.x

    class NoDelay(SyncBackend):
        def connect_tcp(self, *args: Any, **kwargs: Any) -> Any:
            stream = super().connect_tcp(*args, **kwargs)
            stream.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return stream

    return httpcore.ConnectionPool(network_backend=NoDelay())


class Raw:
    """The exec and create requests with httpx and no SDK."""

    def __init__(self, nodelay: bool = False) -> None:
        self.http = httpx.Client(base_url=URL, headers={"Authorization": f"Bearer {KEY}"}, timeout=120)
        if nodelay:
            self.http._transport._pool = nodelay_pool()  # type: ignore[attr-defined]

    def create(self) -> str:
        r = self.http.post("/api/v1/sandboxes", json={"image": IMAGE, "timeoutMs": LIFETIME_MS})
        r.raise_for_status()
        return str(r.json()["sandbox"]["id"])

    def exec_true(self, sid: str) -> None:
        r = self.http.post(f"/api/v1/sandboxes/{sid}/exec", json={"command": "true"})
        r.raise_for_status()
        if r.json()["exitCode"] != 0:
            raise RuntimeError(f"exec true: {r.text}")

    def delete(self, sid: str) -> None:
        self.http.delete(f"/api/v1/sandboxes/{sid}").raise_for_status()


async def main() -> None:
    sync = Sandboxd(api_key=KEY, api_url=URL)
    aclient = AsyncSandboxd(api_key=KEY, api_url=URL)
    raws = {"httpx": Raw(), "httpx-nodelay": Raw(nodelay=True)}
    loop = asyncio.get_running_loop()

    async def tti(client: str) -> dict[str, Any]:
        if client == "sync":
            t0 = time.perf_counter_ns()
            sb = sync.sandboxes.create(image=IMAGE, timeout_ms=LIFETIME_MS)
            r = sb.exec("true")
            ms = ms_since(t0)
            sb.delete()
        elif client == "async":
            t0 = time.perf_counter_ns()
            asb = await aclient.sandboxes.create(image=IMAGE, timeout_ms=LIFETIME_MS)
            r = await asb.exec("true")
            ms = ms_since(t0)
            await asb.delete()
        else:
            raw = raws[client]
            t0 = time.perf_counter_ns()
            sid = raw.create()
            raw.exec_true(sid)
            ms = ms_since(t0)
            raw.delete(sid)
            return {"ms": ms}
        if r.exit_code != 0:
            raise RuntimeError(f"exec true exited {r.exit_code}")
        return {"ms": ms}

    async def execs(client: str, sid: str, n: int) -> dict[str, Any]:
        out: list[float] = []
        if client == "sync":
            sb = sync.sandboxes.get(sid)
            for _ in range(n):
                t0 = time.perf_counter_ns()
                sb.exec("true")
                out.append(ms_since(t0))
        elif client == "async":
            asb = await aclient.sandboxes.get(sid)
            for _ in range(n):
                t0 = time.perf_counter_ns()
                await asb.exec("true")
                out.append(ms_since(t0))
        else:
            raw = raws[client]
            for _ in range(n):
                t0 = time.perf_counter_ns()
                raw.exec_true(sid)
                out.append(ms_since(t0))
        return {"ms": out}

    try:
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line:
                break
            req = json.loads(line)
            try:
                if req["op"] == "quit":
                    break
                if req["op"] == "tti":
                    answer = await tti(req["client"])
                elif req["op"] == "exec":
                    answer = await execs(req["client"], req["id"], int(req["n"]))
                else:
                    answer = {"error": f"unknown op {req['op']!r}"}
            except Exception as e:  # the Node side reports it and stops
                answer = {"error": f"{type(e).__name__}: {e}"}
            sys.stdout.write(json.dumps(answer) + "\n")
            sys.stdout.flush()
    finally:
        sync.close()
        await aclient.close()
        for raw in raws.values():
            raw.http.close()


asyncio.run(main())
