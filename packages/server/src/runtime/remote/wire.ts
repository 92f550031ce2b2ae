import { createHash, timingSafeEqual } from 'node:crypto';
import { errorBody, isErrorKind, SandboxdError, type ErrorBody } from '@sandboxd/protocol';
import type { RuntimeSandbox } from '../driver.js';

/**
 * The runner protocol, shared by the runner (`runner/`) and its client (`RemoteDriver`).
 *
 * - Unary driver calls: text messages on one WebSocket per client at `/runner/v1/calls`,
 *   `{"id": n, "method": "...", "args": [...]}`, each answered (in the order they end) by
 *   `{"id": n, "result": ...}` or `{"id": n, "error": {code, kind, message, details}}`; the
 *   same call also as `POST /runner/v1/<method>` with `{"args": [...]}`, answered
 *   `{"result": ...}` (200) or the error body with the kind's status (clients fall back to it
 *   when a runner refuses the calls socket with 404). A runtime failure that is no
 *   `SandboxdError` travels as `internal` with its message (the services read capacity words
 *   like `Exchange full` from it).
 * - `GET /runner/v1/health`: `{node, capacity, warmPool, sandboxes, isolations}`.
 * - Streams: WebSockets at `/runner/v1/spawn` and `/runner/v1/tty` (see the frame tags
 *   below); each client of a terminal held by the runner as a WebSocket at
 *   `/runner/v1/terminal?sandbox=&terminal=&replay=` (`runner/terminals.ts`); each reader
 *   of a tracked process as a WebSocket at
 *   `/runner/v1/process?sandbox=&pid=&reconnect=&follow=&replay=` and stdin written to one
 *   as a streamed HTTP body (`processes.stdin`, `runner/processes.ts`); file
 *   contents as streamed HTTP bodies (`files.read`, `files.write`), image builds' copy
 *   streams likewise (`files.pack`, `files.unpack`: runtime/copy-stream.ts) and a watch as
 *   NDJSON (`files.watch`); the port proxy's TCP tunnel as an HTTP upgrade at `/runner/v1/tunnel`.
 * - Every request and upgrade carries `Authorization: Bearer <SANDBOXD_RUNNER_TOKEN>`.
 */
export const RUNNER_PREFIX = '/runner/v1';

/** The `Upgrade` protocol name of the port proxy's tunnel. */
export const TUNNEL_PROTOCOL = 'sandboxd-tunnel';

/**
 * Binary frames of the process sockets start with one of these bytes: the rest is data.
 * Control messages are text frames holding JSON (`{type: ...}`).
 */
export const FRAME = { stdin: 0, stdout: 1, stderr: 2 } as const;

/** Bytes of stdin (or PTY input) one client keeps in flight before `write` answers false. */
export const INPUT_WINDOW_BYTES = 256 * 1024;

/**
 * Bytes of a tracked process's output sent to one reader on an API replica and not yet
 * acknowledged, past which that reader is behind (the process is paused). As large as the
 * raw process socket's window: at 256 KiB the acknowledgements' round trip capped a
 * streamed exec's throughput (-13% against the spawn socket, measured api + runner).
 */
export const FOLLOW_WINDOW_BYTES = 1024 * 1024;

/**
 * The unary methods of a driver (its `files` ones prefixed `files.`, its image store's
 * `images.`, its terminals' `terminals.`, its tracked processes' `processes.`).
 */
export const UNARY_METHODS = [
  'recover',
  'resolveImage',
  'listImages',
  'create',
  'inspect',
  'list',
  'kill',
  'pause',
  'resume',
  'stop',
  'start',
  'fork',
  'snapshot',
  'deriveImage',
  'deleteImage',
  'listSnapshots',
  'setEgress',
  'setSecrets',
  'injections',
  'delete',
  'exec',
  'execBackground',
  'ensureVolume',
  'listVolumes',
  'deleteVolume',
  'files.stat',
  'files.list',
  'files.mkdir',
  'files.move',
  'files.remove',
  'files.whoami',
  'images.pull',
  'images.build',
  'terminals.create',
  'terminals.list',
  'terminals.get',
  'terminals.delete',
  'terminals.input',
  'terminals.resize',
  'terminals.signal',
  'terminals.closeSandbox',
  'processes.start',
  'processes.list',
  'processes.get',
  'processes.closeStdin',
  'processes.signal',
  'processes.closeSandbox',
] as const;
export type UnaryMethod = (typeof UNARY_METHODS)[number];

/** What a runner says about itself at `/runner/v1/health`. */
export interface RunnerHealth {
  node: string;
  capacity: import('../driver.js').RuntimeCapacity;
  warmPool: Record<string, number>;
  /** Sandboxes holding the host's resources (running or paused); absent from older runners. */
  sandboxes?: number;
  /** The isolation tiers its driver offers (`isolations()`); absent: containers only (a runner from before tiers). */
  isolations?: import('../driver.js').IsolationSupport[];
}

/** The wire form of any error: a `SandboxdError` as it is, anything else `internal` with its message. */
export function toErrorBody(e: unknown): ErrorBody {
  if (e instanceof SandboxdError) return e.toBody();
  return errorBody('internal', e instanceof Error ? e.message : String(e));
}

/** The `SandboxdError` an error body stands for (an unknown kind becomes `internal`). */
export function fromErrorBody(body: unknown, fallback: string): SandboxdError {
  const b = (body ?? {}) as Partial<ErrorBody>;
  const kind = isErrorKind(b.kind) ? b.kind : 'internal';
  return new SandboxdError(kind, typeof b.message === 'string' ? b.message : fallback, b.details);
}

/** JSON turns `createdAt` into a string: back to a Date. */
export function reviveSandbox(s: RuntimeSandbox): RuntimeSandbox;
export function reviveSandbox(s: RuntimeSandbox | null): RuntimeSandbox | null;
export function reviveSandbox(s: RuntimeSandbox | null): RuntimeSandbox | null {
  if (!s) return s;
  return { ...s, createdAt: new Date(s.createdAt) };
}

/**
 * Whether `header` (an `Authorization` value) carries `token` as a bearer token. Constant
 * time in the token's content: both sides are hashed first, so lengths leak nothing either.
 */
export function bearerMatches(header: string | undefined, token: string): boolean {
  const given = header?.startsWith('Bearer ') ? header.slice(7) : '';
  const a = createHash('sha256').update(given).digest();
  const b = createHash('sha256').update(token).digest();
  return timingSafeEqual(a, b) && given.length > 0;
}

/** JSON makes an omitted argument `null`: back to `undefined`, so the driver's defaults apply. */
export function fromWireArgs(args: unknown[]): unknown[] {
  return args.map((a) => (a === null ? undefined : a));
}
