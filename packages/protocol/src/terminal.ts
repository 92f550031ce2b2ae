import { Type, type Static } from 'typebox';
import { DateTime, TERMINAL_ID_PATTERN } from './common.js';

/** Shells a terminal may run. */
export const SHELLS = ['bash', 'zsh', 'fish', 'sh'] as const;
export type Shell = (typeof SHELLS)[number];
/** Terminal status values: `active` while the shell runs, `exited` after. */
export const TERMINAL_STATUSES = ['active', 'exited'] as const;

const id = Type.String({ pattern: TERMINAL_ID_PATTERN });
const shell = Type.Enum([...SHELLS]);
const status = Type.Enum([...TERMINAL_STATUSES]);
const clientCount = Type.Integer({ minimum: 0 });

/** The body of `POST /api/v1/sandboxes/{id}/terminals`; all fields optional. */
export const TerminalCreateSchema = Type.Object(
  {
    shell: Type.Optional(shell),
    cwd: Type.Optional(Type.String({ minLength: 1, maxLength: 4096, pattern: '^[^\\u0000]+$' })),
    cols: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000 })),
    rows: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000 })),
  },
  { title: 'TerminalCreate', additionalProperties: false },
);
export type TerminalCreate = Static<typeof TerminalCreateSchema>;

/** The answer of terminal create: the terminal and its `wss` address. */
export const TerminalCreatedSchema = Type.Object(
  {
    terminal: Type.Object(
      { id, sandboxId: Type.String(), shell, status, createdAt: DateTime },
      { additionalProperties: false },
    ),
    wsUrl: Type.String(),
  },
  { title: 'TerminalCreated', additionalProperties: false },
);
export type TerminalCreated = Static<typeof TerminalCreatedSchema>;

/** One item of the terminal list. */
export const TerminalListItemSchema = Type.Object(
  { id, shell, status, clientCount },
  { title: 'TerminalListItem', additionalProperties: false },
);

/** `{ terminals }` of a sandbox. */
export const TerminalListSchema = Type.Object(
  { terminals: Type.Array(TerminalListItemSchema) },
  { title: 'TerminalList', additionalProperties: false },
);
export type TerminalList = Static<typeof TerminalListSchema>;

/** One terminal, as get answers it. */
export const TerminalSchema = Type.Object(
  { id, sandboxId: Type.String(), shell, status, clientCount, createdAt: DateTime },
  { title: 'Terminal', additionalProperties: false },
);
export type Terminal = Static<typeof TerminalSchema>;

/** Path parameters of single-terminal operations. */
export const TerminalParamsSchema = Type.Object(
  { id: Type.String({ minLength: 1, maxLength: 64 }), terminalId: Type.String({ minLength: 1, maxLength: 64 }) },
  { additionalProperties: false },
);

/** Query of the terminal WebSocket: `replay=1` sends the last 64 KiB of output first. */
export const TerminalWsQuerySchema = Type.Object(
  { replay: Type.Optional(Type.Enum(['0', '1'])) },
  { additionalProperties: false },
);

/** Client to server control message (text frame). */
export const ResizeMessageSchema = Type.Object(
  { type: Type.Literal('resize'), cols: Type.Integer({ minimum: 1 }), rows: Type.Integer({ minimum: 1 }) },
  { title: 'ResizeMessage' },
);
/** Server to client: the terminal is ready. */
export const ReadyMessageSchema = Type.Object(
  { type: Type.Literal('ready'), pid: Type.Integer(), shell: Type.String() },
  { title: 'ReadyMessage' },
);
/** Server to client: the process exited; the server closes with 1000 next. */
export const ExitMessageSchema = Type.Object(
  { type: Type.Literal('exit'), exitCode: Type.Integer(), signal: Type.Union([Type.Null(), Type.String()]) },
  { title: 'ExitMessage' },
);
export type ResizeMessage = Static<typeof ResizeMessageSchema>;
export type ReadyMessage = Static<typeof ReadyMessageSchema>;
export type ExitMessage = Static<typeof ExitMessageSchema>;
/** Any server to client control message. */
export type ServerControlMessage = ReadyMessage | ExitMessage;
