import type { IncomingMessage, ServerResponse } from 'node:http';
import { SandboxdError } from '@sandboxd/protocol';
import type { Logger } from 'pino';
import type { RawData, WebSocket } from 'ws';
import type {
  DriverProcesses,
  FollowOptions,
  ProcessFollower,
  ProcessFollowing,
  ProcessSpec,
} from '../runtime/processes/types.js';
import { FOLLOW_WINDOW_BYTES, FRAME } from '../runtime/remote/wire.js';
import { ARGS_HEADER } from './files.js';

/**
 * A unary `processes.<name>` call of the runner protocol on the runner's tracked processes.
 * Every call names the sandbox first, the pid second.
 */
export async function serveProcessCall(processes: DriverProcesses, name: string, args: unknown[]): Promise<unknown> {
  const [sandboxId, pid] = args;
  if (typeof sandboxId !== 'string') throw new SandboxdError('validation', 'A process call names the sandbox first');
  if (name === 'list') return processes.list(sandboxId);
  if (name === 'start') return processes.start(sandboxId, args[1] as ProcessSpec);
  if (name === 'closeSandbox') return processes.closeSandbox(sandboxId);
  if (!Number.isSafeInteger(pid)) throw new SandboxdError('validation', 'A process call names the pid second');
  switch (name) {
    case 'get':
      return processes.get(sandboxId, pid as number);
    case 'closeStdin':
      return processes.closeStdin(sandboxId, pid as number);
    case 'signal':
      return processes.signal(sandboxId, pid as number, String(args[2]) as NodeJS.Signals);
  }
  throw new SandboxdError('not_found', `No runner call processes.${name}`);
}

/**
 * `processes.stdin`: `[sandboxId, pid]` in {@link ARGS_HEADER}, the bytes as the request
 * body, handed to the process as fast as it reads them (TCP carries the backpressure back
 * to the API replica). Answers `{result: null}` once every byte was taken, or the error
 * (`not_found`, `conflict`); on an error the rest of the body is read and dropped.
 */
export async function serveProcessStdin(
  processes: DriverProcesses,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  let args: [unknown, unknown];
  try {
    args = JSON.parse(String(req.headers[ARGS_HEADER] ?? ''));
  } catch {
    req.resume();
    throw new SandboxdError('validation', `processes.stdin needs its arguments in ${ARGS_HEADER}`);
  }
  const [sandboxId, pid] = args;
  try {
    if (typeof sandboxId !== 'string' || !Number.isSafeInteger(pid))
      throw new SandboxdError('validation', 'processes.stdin names the sandbox and the pid');
    await processes.writeStdin(sandboxId, pid as number, req as AsyncIterable<Uint8Array>);
  } catch (e) {
    if (!req.complete) req.resume();
    throw e;
  }
  const text = JSON.stringify({ result: null });
  res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) });
  res.end(text);
}

/** Sandbox, pid and options of a process socket's URL; null when the sandbox or pid is missing. */
export function processTarget(url: URL): ({ sandboxId: string; pid: number } & FollowOptions) | null {
  const sandboxId = url.searchParams.get('sandbox');
  const pid = Number(url.searchParams.get('pid'));
  if (!sandboxId || !Number.isSafeInteger(pid) || pid < 1) return null;
  return {
    sandboxId,
    pid,
    reconnect: url.searchParams.get('reconnect') === '1',
    follow: url.searchParams.get('follow') === '1',
    replay: url.searchParams.get('replay') !== '0',
  };
}

/**
 * One reader of a tracked process, attached from an API replica over `ws` (its client side
 * is `runtime/remote/processes.ts`). To the replica: `start` and `exit` as text frames,
 * output as binary frames (first byte {@link FRAME} stdout or stderr), then close 1000 once
 * the reader ends. From the replica: `{type:'ack', bytes}` once its reader took that much
 * output. The reader keeps up while less than {@link FOLLOW_WINDOW_BYTES} of output is
 * unacknowledged: past it the process is paused (as for a reader in this process), so a
 * slow client slows the process across the hop and what is in flight stays bounded. A
 * socket that closes detaches the reader; the process goes on.
 */
export function serveProcessSocket(
  processes: DriverProcesses,
  target: { sandboxId: string; pid: number } & FollowOptions,
  ws: WebSocket,
  log: Logger,
): void {
  let sent = 0;
  let acked = 0;
  let blocked = false;
  let wantsDrain = false;
  let following: ProcessFollowing | null = null;
  const follower: ProcessFollower = {
    send: (ev) => {
      if (ws.readyState !== ws.OPEN) return true;
      if (ev.type === 'output') {
        const frame = Buffer.allocUnsafe(ev.chunk.length + 1);
        frame[0] = ev.stream === 'stderr' ? FRAME.stderr : FRAME.stdout;
        ev.chunk.copy(frame, 1);
        sent += ev.chunk.length;
        ws.send(frame, { binary: true });
      } else ws.send(JSON.stringify(ev));
      if (sent - acked < FOLLOW_WINDOW_BYTES) return true;
      blocked = true;
      return false;
    },
    end: () => {
      if (ws.readyState === ws.OPEN) ws.close(1000);
    },
    lost: () => ws.terminate(),
  };
  ws.on('message', (data: RawData, isBinary: boolean) => {
    if (isBinary) return;
    let msg: { type?: string; bytes?: number };
    try {
      msg = JSON.parse(String(data));
    } catch {
      return;
    }
    if (msg.type !== 'ack' || !Number.isSafeInteger(msg.bytes) || (msg.bytes as number) <= 0) return;
    acked = Math.min(sent, acked + (msg.bytes as number));
    // Resumed once half the window is acknowledged (not at every ack near the edge).
    if (blocked && sent - acked <= FOLLOW_WINDOW_BYTES / 2) {
      blocked = false;
      if (following) following.drained();
      else wantsDrain = true;
    }
  });
  ws.on('close', () => following?.detach());
  ws.on('error', () => ws.terminate());
  processes.follow(target.sandboxId, target.pid, follower, target).then(
    (f) => {
      following = f;
      if (ws.readyState !== ws.OPEN) f.detach();
      else if (wantsDrain) f.drained();
    },
    (err: unknown) => {
      const gone = err instanceof SandboxdError && err.kind === 'not_found';
      if (!gone) log.warn({ err, ...target }, 'runner: following a process failed');
      if (ws.readyState === ws.OPEN) ws.close(gone ? 4404 : 1011, gone ? 'process not found' : '');
    },
  );
}
