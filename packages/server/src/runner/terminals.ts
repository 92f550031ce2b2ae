import { SandboxdError } from '@sandboxd/protocol';
import type { Logger } from 'pino';
import type { RawData, WebSocket } from 'ws';
import {
  CLOSE,
  type DriverTerminals,
  type TerminalAttachment,
  type TerminalClient,
  type TerminalSpec,
} from '../runtime/terminals/types.js';

/**
 * A unary `terminals.<name>` call of the runner protocol on the runner's terminals. Every
 * call names the sandbox first; `input` carries its bytes as base64.
 */
export async function serveTerminalCall(terminals: DriverTerminals, name: string, args: unknown[]): Promise<unknown> {
  const [sandboxId, terminalId] = args;
  if (typeof sandboxId !== 'string') throw new SandboxdError('validation', 'A terminal call names the sandbox first');
  if (name === 'list') return terminals.list(sandboxId);
  if (name === 'create') return terminals.create(sandboxId, args[1] as TerminalSpec);
  if (name === 'closeSandbox') return terminals.closeSandbox(sandboxId, String(args[1] ?? 'sandbox stopped'));
  if (typeof terminalId !== 'string')
    throw new SandboxdError('validation', 'A terminal call names the terminal second');
  switch (name) {
    case 'get':
      return terminals.get(sandboxId, terminalId);
    case 'delete':
      return terminals.delete(sandboxId, terminalId, args[2] === undefined ? undefined : String(args[2]));
    case 'input':
      return terminals.input(sandboxId, terminalId, Buffer.from(String(args[2] ?? ''), 'base64'));
    case 'resize':
      return terminals.resize(sandboxId, terminalId, args[2] as number, args[3] as number);
    case 'signal':
      return terminals.signal(sandboxId, terminalId, String(args[2]) as NodeJS.Signals);
  }
  throw new SandboxdError('not_found', `No runner call terminals.${name}`);
}

/** Sandbox, terminal and replay of a terminal socket's URL; null when the sandbox or terminal is missing. */
export function terminalTarget(url: URL): { sandboxId: string; terminalId: string; replay: boolean } | null {
  const sandboxId = url.searchParams.get('sandbox');
  const terminalId = url.searchParams.get('terminal');
  if (!sandboxId || !terminalId) return null;
  return { sandboxId, terminalId, replay: url.searchParams.get('replay') === '1' };
}

/**
 * One client of a terminal, attached from an API replica over `ws` (its client side is
 * `runtime/remote/terminals.ts`). To the replica: output in binary frames, `ready`/`exit`
 * as text frames, `{type:'input.pause'|'input.resume'}` when the program stops or starts
 * reading its input again, and the close code the client must get (1000, 1001, 1013).
 * From the replica: input (binary frames), `{type:'resize', cols, rows}`, and
 * `{type:'ack', bytes}` once its client handed that much output on. The client is as far
 * behind as the output sent and not yet acknowledged: that is what the terminal's flow
 * control weighs. A socket that closes detaches the client; the terminal lives on.
 */
export function serveTerminalSocket(
  terminals: DriverTerminals,
  target: { sandboxId: string; terminalId: string; replay: boolean },
  ws: WebSocket,
  log: Logger,
): void {
  let sent = 0;
  let acked = 0;
  let attachment: TerminalAttachment | null = null;
  const control = (msg: object) => {
    if (ws.readyState === ws.OPEN) ws.send(JSON.stringify(msg));
  };
  const client: TerminalClient = {
    sendOutput: (chunk) => {
      if (ws.readyState !== ws.OPEN) return;
      sent += chunk.length;
      ws.send(chunk, { binary: true });
    },
    sendControl: (msg) => control(msg),
    get bufferedBytes() {
      return sent - acked;
    },
    close: (code, reason) => ws.close(code, reason),
    pauseInput: () => control({ type: 'input.pause' }),
    resumeInput: () => control({ type: 'input.resume' }),
  };
  ws.on('message', (data: RawData, isBinary: boolean) => {
    if (!attachment) return;
    const buf = Buffer.isBuffer(data) ? data : Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data);
    if (isBinary) return attachment.input(buf);
    let msg: { type?: string; cols?: number; rows?: number; bytes?: number };
    try {
      msg = JSON.parse(buf.toString('utf8'));
    } catch {
      return;
    }
    if (msg.type === 'resize') attachment.resize(msg.cols as number, msg.rows as number);
    else if (msg.type === 'ack' && Number.isSafeInteger(msg.bytes) && (msg.bytes as number) > 0) {
      acked = Math.min(sent, acked + (msg.bytes as number));
      attachment.written();
    }
  });
  ws.on('close', () => attachment?.detach());
  ws.on('error', () => ws.terminate());
  terminals.attach(target.sandboxId, target.terminalId, client, { replay: target.replay }).then(
    (a) => {
      attachment = a;
      if (ws.readyState !== ws.OPEN) a.detach();
    },
    (err: unknown) => {
      const gone = err instanceof SandboxdError && err.kind === 'not_found';
      // The terminal has its share of clients (a race the api's check before the handshake lost):
      // 1013 with the limit's message, which the api passes on to its client.
      const full = err instanceof SandboxdError && err.kind === 'rate_limited';
      if (!gone && !full) log.warn({ err, ...target }, 'runner: attaching a terminal client failed');
      if (ws.readyState !== ws.OPEN) return;
      if (full) ws.close(CLOSE.tooSlow, err.message);
      else ws.close(gone ? CLOSE.normal : CLOSE.lostRunner, gone ? 'terminal not found' : '');
    },
  );
}
