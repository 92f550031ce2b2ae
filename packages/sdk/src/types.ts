/**
 * Wire types of the SDK, derived from the protocol's TypeBox schemas (never restated).
 * Type-only: nothing here exists at run time.
 */
import type { Static } from 'typebox';
import type * as P from '@sandboxd/protocol';

/** A sandbox as the server describes it. */
export type SandboxInfo = Static<typeof P.SandboxSchema>;
/** The body of sandbox creation: `image` plus optional `env`, `volumes`, `timeoutMs`. */
export type SandboxCreateParams = Static<typeof P.SandboxCreateSchema>;
/** Filters and paging of the sandbox list. */
export type SandboxListQuery = Static<typeof P.SandboxListQuerySchema>;
/** One page of the sandbox list. */
export type SandboxListPage = Static<typeof P.SandboxListSchema>;
/** Options of an exec: `background`, `cwd`, `env`, `timeoutMs` (foreground, default 60000). */
export type ExecOptions = Static<typeof P.ExecOptionsSchema>;
/** The result of an exec; `pid` only for background, `truncated` only when output was cut. */
export type ExecResult = Static<typeof P.ExecResultSchema>;
/** Options of terminal creation: `shell`, `cwd`, `cols`, `rows`. */
export type TerminalCreateParams = Static<typeof P.TerminalCreateSchema>;
/** A terminal as `GET .../terminals/{id}` describes it. */
export type TerminalInfo = Static<typeof P.TerminalSchema>;
/** One item of a sandbox's terminal list. */
export type TerminalListItem = Static<typeof P.TerminalListItemSchema>;
/** The `ready` control message: the shell's pid and name. */
export type TerminalReady = Static<typeof P.ReadyMessageSchema>;
/** The `exit` control message: the shell's exit code and signal. */
export type TerminalExitMessage = Static<typeof P.ExitMessageSchema>;
/** How a terminal's shell ended. */
export type TerminalExit = Omit<TerminalExitMessage, 'type'>;
/** The account: plan, balance, limits and usage. */
export type AccountInfo = Static<typeof P.AccountSchema>;
/** An API key as listed (never the key itself). */
export type ApiKeyInfo = Static<typeof P.KeySchema>;
/** A new API key; `key` is shown this once. */
export type ApiKeyCreated = Static<typeof P.KeyCreatedSchema>;
/** A named volume of the account. */
export type VolumeInfo = Static<typeof P.VolumeSchema>;
/** An image in the server's cache. */
export type ImageInfo = Static<typeof P.ImageSchema>;
/** One line of streamed pull/build progress. */
export type ImageProgressEvent = Static<typeof P.ImageProgressEventSchema>;
/** A progress report of a pull or build (`bytes`/`totalBytes` when known). */
export type ImageProgress = Extract<ImageProgressEvent, { type: 'progress' }>;
/** The onboarding event kinds `events.track` accepts. */
export type EventKind = P.EventKind;
/** Images the server builds offline. */
export type BuildableImage = P.BuildableImage;
/** Phases of a pull or build. */
export type ImagePhase = P.ImagePhase;
/** The server's error kinds (`validation`, `not_found`, ...). */
export type ErrorKind = P.ErrorKind;
