import { connect } from 'node:net';
import type { Duplex } from 'node:stream';
import { errorBody } from '@sandboxd/protocol';
import { rawErrorResponse } from '../http/front-door.js';
import type { RuntimeDriver } from '../runtime/driver.js';
import { TUNNEL_PROTOCOL } from '../runtime/remote/wire.js';

/** How long the runner waits for a sandbox port to accept before answering 502. */
const CONNECT_TIMEOUT_MS = 10_000;

/**
 * `GET /runner/v1/tunnel?sandbox=<id>&port=<n>` with `Upgrade: sandboxd-tunnel`: a TCP
 * connection to `<address>:<port>` of a running sandbox of this runner (the address comes
 * from the driver, never from the caller). Answers `101` once the sandbox accepted, then
 * relays bytes both ways until either side closes; `404` for a sandbox that is not running
 * here, `400` for a bad port, `502` when the port refuses or does not answer.
 */
export async function serveTunnel(driver: RuntimeDriver, url: URL, socket: Duplex, head: Buffer): Promise<void> {
  const id = url.searchParams.get('sandbox') ?? '';
  const port = Number(url.searchParams.get('port'));
  if (!Number.isInteger(port) || port < 1 || port > 65535) {
    socket.end(rawErrorResponse(errorBody('validation', 'port must be 1..65535')));
    return;
  }
  const sb = await driver.inspect(id).catch(() => null);
  if (sb?.state !== 'running' || !sb.address) {
    socket.end(rawErrorResponse(errorBody('not_found', `No running sandbox ${id} on this runner`, { sandboxId: id })));
    return;
  }
  const upstream = connect({ host: sb.address, port, noDelay: true });
  const timer = setTimeout(
    () => upstream.destroy(Object.assign(new Error('connect timed out'), { code: 'ETIMEDOUT' })),
    CONNECT_TIMEOUT_MS,
  );
  let connected = false;
  upstream.once('error', (e: NodeJS.ErrnoException) => {
    clearTimeout(timer);
    const body = errorBody('upstream', `Sandbox ${id} port ${port}: ${e.message}`, {
      sandboxId: id,
      port,
      code: e.code,
    });
    if (!connected) socket.end(rawErrorResponse(body));
    else socket.destroy();
  });
  socket.once('close', () => upstream.destroy());
  upstream.once('connect', () => {
    connected = true;
    clearTimeout(timer);
    socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: ${TUNNEL_PROTOCOL}\r\nConnection: Upgrade\r\n\r\n`);
    if (head.length) upstream.write(head);
    upstream.pipe(socket);
    socket.pipe(upstream);
    upstream.once('close', () => socket.destroy());
  });
}
