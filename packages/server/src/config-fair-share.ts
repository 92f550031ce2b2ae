/**
 * Fair shares of the host resources one sandbox can hold through the API (terminals, their
 * clients, tracked processes and their readers, file watches and transfers): each is counted
 * per sandbox, so a sandbox at its limit leaves its neighbours (of any account, its own
 * included) what they need. Set by `SANDBOXD_FAIR_SHARE_<FIELD>` (e.g.
 * `SANDBOXD_FAIR_SHARE_CLIENTS_PER_TERMINAL`), the config file's `fairShare` object, or
 * overrides; the defaults are far above honest use.
 */
import { parseIntStrict } from './config-values.js';

type Env = Record<string, string | undefined>;

export interface FairShareConfig {
  /** Terminals a sandbox holds, active and exited (the oldest exited one without a client is evicted first); past it 409. */
  terminalsPerSandbox: number;
  /** Clients (WebSockets, E2B streams) attached to one terminal at once; past it 429. */
  clientsPerTerminal: number;
  /**
   * Terminal WebSockets open at once to the terminals of one sandbox, counted per API
   * process beside the account's `terminalSocketsPerAccount`; past it 429. Keep it below
   * the account's cap so one sandbox never holds all of its account's sockets.
   */
  terminalSocketsPerSandbox: number;
  /** Processes started through the API running at once in a sandbox; past it 409. */
  runningProcessesPerSandbox: number;
  /** Exited processes kept listed per sandbox (output replayable); the oldest is forgotten first. */
  exitedProcessesPerSandbox: number;
  /** Readers (streamed exec, output followers, E2B streams) of one process at once; past it 429. */
  followersPerProcess: number;
  /** Readers of all the processes of a sandbox at once (each may hold 1 MiB of replay); past it 429. */
  followersPerSandbox: number;
  /** File watches (WebSocket, E2B WatchDir and watchers) a sandbox holds open; past it 409. */
  watchesPerSandbox: number;
  /** File uploads, downloads and listings (native and E2B) in flight at once per sandbox; past it 429. */
  fileTransfersPerSandbox: number;
  /** Foreground (one-shot, collected) execs in flight at once per sandbox (each may hold 1 MiB per stream); past it 429. */
  execsPerSandbox: number;
  /** Code interpreter runs streaming at once per sandbox through the API (each may hold a 16 MiB line); past it 429. */
  codeRunsPerSandbox: number;
}

/** Defaults: far above honest use (a few terminals, a handful of viewers, tens of streams). */
export const DEFAULT_FAIR_SHARE: Readonly<FairShareConfig> = {
  terminalsPerSandbox: 32,
  clientsPerTerminal: 16,
  terminalSocketsPerSandbox: 64,
  runningProcessesPerSandbox: 64,
  exitedProcessesPerSandbox: 16,
  followersPerProcess: 16,
  followersPerSandbox: 128,
  watchesPerSandbox: 16,
  fileTransfersPerSandbox: 32,
  execsPerSandbox: 128,
  codeRunsPerSandbox: 16,
};

/** Smallest value of each field (0 only where nothing needs to be kept). */
const MIN: Partial<Record<keyof FairShareConfig, number>> = { exitedProcessesPerSandbox: 0 };

/** `SANDBOXD_FAIR_SHARE_<FIELD>` over the file's `fairShare` over the defaults; overrides win. */
export function fairShare(env: Env, fromFile: unknown, fromOverrides?: Partial<FairShareConfig>): FairShareConfig {
  const file = (fromFile ?? {}) as Record<string, unknown>;
  const out = { ...DEFAULT_FAIR_SHARE };
  for (const k of Object.keys(out) as Array<keyof FairShareConfig>) {
    const name = `SANDBOXD_FAIR_SHARE_${k.replace(/[A-Z]/g, (c) => `_${c}`).toUpperCase()}`;
    const raw = fromOverrides?.[k] ?? (env[name] || undefined) ?? file[k];
    if (raw === undefined) continue;
    out[k] = parseIntStrict(name, String(raw), MIN[k] ?? 1, 1_000_000);
  }
  return out;
}
