import { Type, type Static } from 'typebox';
import { DateTime } from './common.js';

/** A process started through the API (background or streamed exec). */
export const ProcessInfoSchema = Type.Object(
  {
    pid: Type.Integer({ description: "Pid in the sandbox's pid namespace." }),
    command: Type.String(),
    tag: Type.Union([Type.String(), Type.Null()]),
    cwd: Type.String(),
    startedAt: DateTime,
    running: Type.Boolean(),
    exitCode: Type.Union([Type.Integer(), Type.Null()], { description: 'null while running.' }),
  },
  { title: 'ProcessInfo', additionalProperties: false },
);
export type ProcessInfo = Static<typeof ProcessInfoSchema>;

export const ProcessListSchema = Type.Object(
  { processes: Type.Array(ProcessInfoSchema) },
  { title: 'ProcessList', additionalProperties: false },
);

/** Signals a client may send to a process. */
export const PROCESS_SIGNALS = [
  'SIGTERM',
  'SIGKILL',
  'SIGINT',
  'SIGHUP',
  'SIGQUIT',
  'SIGUSR1',
  'SIGUSR2',
  'SIGSTOP',
  'SIGCONT',
] as const;
export type ProcessSignal = (typeof PROCESS_SIGNALS)[number];

export const SignalRequestSchema = Type.Object(
  { signal: Type.Union(PROCESS_SIGNALS.map((s) => Type.Literal(s))) },
  { title: 'SignalRequest', additionalProperties: false },
);

/** One line of an exec stream (`application/x-ndjson`). */
export type ProcessEvent =
  | { type: 'start'; pid: number; replayFrom?: { stdout: number; stderr: number } }
  | { type: 'stdout' | 'stderr'; data: string }
  | { type: 'stdout' | 'stderr'; dataBase64: string }
  | { type: 'exit'; exitCode: number; signal: string | null };

/** Output of a process the server keeps for replay, in bytes. */
export const PROCESS_REPLAY_BYTES = 1 << 20;
