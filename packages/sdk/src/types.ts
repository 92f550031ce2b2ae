/**
 * Wire types of the SDK, derived from the protocol's TypeBox schemas (never restated).
 * Type-only: nothing here exists at run time.
 */
import type { Static } from 'typebox';
import type {
  AccountSchema, EventKind, ExecOptionsSchema, ExecResultSchema, ExitMessageSchema, ImageProgressEventSchema, ImageSchema,
  KeyCreatedSchema, KeySchema, ReadyMessageSchema, SandboxCreateSchema, SandboxListQuerySchema, SandboxListSchema,
  SandboxSchema, TerminalCreateSchema, TerminalListItemSchema, TerminalSchema, VolumeSchema, BuildableImage, ImagePhase,
} from '@sandboxd/protocol';

/** A sandbox as the server describes it. */
export type SandboxInfo = Static<typeof SandboxSchema>;
/** The body of sandbox creation: `image` plus optional `env`, `volumes`, `timeoutMs`. */
export type SandboxCreateParams = Static<typeof SandboxCreateSchema>;
/** Filters and paging of the sandbox list. */
export type SandboxListQuery = Static<typeof SandboxListQuerySchema>;
/** One page of the sandbox list. */
export type SandboxListPage = Static<typeof SandboxListSchema>;
/** Options of an exec: `background`, `cwd`, `env`, `timeoutMs` (foreground, default 60000). */
export type ExecOptions = Static<typeof ExecOptionsSchema>;
/** The result of an exec; `pid` only for background, `truncated` only when output was cut. */
export type ExecResult = Static<typeof ExecResultSchema>;
/** Options of terminal creation: `shell`, `cwd`, `cols`, `rows`. */
export type TerminalCreateParams = Static<typeof TerminalCreateSchema>;
/** A terminal as `GET .../terminals/{id}` describes it. */
export type TerminalInfo = Static<typeof TerminalSchema>;
/** One item of a sandbox's terminal list. */
export type TerminalListItem = Static<typeof TerminalListItemSchema>;
/** The `ready` control message: the shell's pid and name. */
export type TerminalReady = Static<typeof ReadyMessageSchema>;
/** The `exit` control message: the shell's exit code and signal. */
export type TerminalExitMessage = Static<typeof ExitMessageSchema>;
/** How a terminal's shell ended. */
export type TerminalExit = Omit<TerminalExitMessage, 'type'>;
/** The account: plan, balance, limits and usage. */
export type AccountInfo = Static<typeof AccountSchema>;
/** An API key as listed (never the key itself). */
export type ApiKeyInfo = Static<typeof KeySchema>;
/** A new API key; `key` is shown this once. */
export type ApiKeyCreated = Static<typeof KeyCreatedSchema>;
/** A named volume of the account. */
export type VolumeInfo = Static<typeof VolumeSchema>;
/** An image in the server's cache. */
export type ImageInfo = Static<typeof ImageSchema>;
/** One line of streamed pull/build progress. */
export type ImageProgressEvent = Static<typeof ImageProgressEventSchema>;
/** A progress report of a pull or build (`bytes`/`totalBytes` when known). */
export type ImageProgress = Extract<ImageProgressEvent, { type: 'progress' }>;
export type { EventKind, BuildableImage, ImagePhase };
