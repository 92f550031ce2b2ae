"""A small HTTP/1.1 server on asyncio streams (stdlib only).

Contract: `serve(handler, host, port)` calls `await handler(req)` for each request, with
keep-alive. The handler answers with a `Response` (whole body) or a `Stream` (chunked body
from an async iterator of bytes). While a `Stream` is written, the connection is watched:
when the client closes it, `req.disconnected` is set and the iterator is closed (its
`finally` blocks run), so a run whose client went away is interrupted at once, even while
the kernel prints nothing. Request bodies: Content-Length or chunked, at most 64 MiB.
"""

import asyncio
import json
import logging

log = logging.getLogger("sandboxd-ci.http")

MAX_BODY = 64 * 1024 * 1024
MAX_HEAD = 64 * 1024
REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    411: "Length Required",
    413: "Payload Too Large",
    422: "Unprocessable Entity",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


class Request:
    def __init__(self, method, path, query, headers, body):
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
        self.disconnected = asyncio.Event()

    def json(self):
        return json.loads(self.body.decode("utf-8")) if self.body else None


class Response:
    def __init__(self, status, body=b"", content_type="text/plain; charset=utf-8"):
        self.status = status
        self.body = body if isinstance(body, bytes) else str(body).encode("utf-8")
        self.content_type = content_type


def json_response(status, value):
    return Response(status, json.dumps(value).encode("utf-8"), "application/json")


def text_response(status, text):
    return Response(status, text)


class Stream:
    """A chunked answer: `chunks` is an async iterator of bytes (one NDJSON line each)."""

    def __init__(self, chunks, content_type="application/x-ndjson"):
        self.chunks = chunks
        self.content_type = content_type


class BadRequest(Exception):
    pass


async def _read_head(reader):
    data = await reader.readuntil(b"\r\n\r\n")
    if len(data) > MAX_HEAD:
        raise BadRequest("header too large")
    lines = data.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3:
        raise BadRequest("bad request line")
    method, target, _version = parts
    headers = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise BadRequest("bad header")
        headers[name.strip().lower()] = value.strip()
    path, _, query = target.partition("?")
    return method.upper(), path, query, headers


async def _read_body(reader, headers):
    if "chunked" in headers.get("transfer-encoding", "").lower():
        out = bytearray()
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size = int(size_line.split(b";")[0].strip(), 16)
            if size == 0:
                while (await reader.readuntil(b"\r\n")) != b"\r\n":
                    pass
                return bytes(out)
            if len(out) + size > MAX_BODY:
                raise BadRequest("body too large")
            out += await reader.readexactly(size)
            await reader.readexactly(2)
    n = int(headers.get("content-length", "0") or "0")
    if n < 0 or n > MAX_BODY:
        raise BadRequest("bad content length")
    return await reader.readexactly(n) if n else b""


def _head(status, content_type, extra):
    lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}", f"Content-Type: {content_type}"]
    lines += extra
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _write_stream(req, writer, reader, stream):
    writer.write(_head(200, stream.content_type, ["Transfer-Encoding: chunked", "Cache-Control: no-store", "Connection: close"]))
    await writer.drain()

    async def watch():
        # The client sends nothing more on this connection while it reads the stream:
        # EOF (or an error) here means it went away.
        try:
            while await reader.read(4096):
                pass
        except Exception:  # noqa: BLE001
            pass
        req.disconnected.set()

    watcher = asyncio.ensure_future(watch())
    it = stream.chunks.__aiter__()
    try:
        while True:
            nxt = asyncio.ensure_future(it.__anext__())
            gone = asyncio.ensure_future(req.disconnected.wait())
            done, _ = await asyncio.wait({nxt, gone}, return_when=asyncio.FIRST_COMPLETED)
            if nxt not in done:
                nxt.cancel()
                try:
                    await nxt
                except (asyncio.CancelledError, StopAsyncIteration, Exception):  # noqa: BLE001
                    pass
                return False
            gone.cancel()
            try:
                chunk = nxt.result()
            except StopAsyncIteration:
                break
            writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True
    finally:
        watcher.cancel()
        if hasattr(it, "aclose"):
            try:
                await it.aclose()
            except Exception:  # noqa: BLE001
                log.exception("closing a stream")


async def _connection(handler, reader, writer):
    try:
        while True:
            try:
                method, path, query, headers = await _read_head(reader)
                body = await _read_body(reader, headers)
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            except (BadRequest, ValueError, asyncio.LimitOverrunError) as e:
                writer.write(_head(400, "text/plain", ["Content-Length: %d" % len(str(e)), "Connection: close"]))
                writer.write(str(e).encode())
                await writer.drain()
                return
            req = Request(method, path, query, headers, body)
            try:
                res = await handler(req)
            except Exception as e:  # noqa: BLE001
                log.exception("handler failed: %s %s", method, path)
                res = text_response(500, f"Internal error: {e}")
            if isinstance(res, Stream):
                if not await _write_stream(req, writer, reader, res):
                    return
                # The watcher consumed the reader: one streamed answer per connection.
                return
            keep = headers.get("connection", "").lower() != "close"
            extra = [f"Content-Length: {len(res.body)}"]
            if not keep:
                extra.append("Connection: close")
            writer.write(_head(res.status, res.content_type, extra) + (res.body if method != "HEAD" else b""))
            await writer.drain()
            if not keep:
                return
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        try:
            writer.close()
        except Exception:  # noqa: BLE001
            pass


async def serve(handler, host, port):
    """Starts listening; returns the asyncio Server."""
    return await asyncio.start_server(
        lambda r, w: _connection(handler, r, w), host, port, limit=MAX_HEAD, reuse_address=True
    )
