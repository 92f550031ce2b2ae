/**
 * Image-declared services: an image whose OCI config carries the labels
 *
 *   org.sandboxd.service.cmd     JSON array of strings: the argv (an absolute program path)
 *   org.sandboxd.service.port    TCP port the service listens on inside the sandbox (1..65535)
 *   org.sandboxd.service.health  path answered with a 2xx once the service is ready (`/...`)
 *
 * has that command started, detached, as the sandbox's root (cwd `/`, stdio on /dev/null,
 * the image's env), every time a sandbox of it boots: cold create, warm-pool fill, start
 * after stop, create from a snapshot of such a sandbox. The command outlives the exec that
 * started it (its parent is the sandbox's init). The boot is done only once
 * `GET http://<sandbox address>:<port><health>` answers 2xx from the host, within the
 * driver's `serviceStartTimeoutMs`; else the boot fails (and whatever it made is removed).
 *
 * The sandbox's own env (create-time `env`, which a warm-pooled sandbox learns only when it
 * is claimed) is not the service's: it is written to {@link ENVS_FILE} (see
 * {@link writeEnvsFile}) before the create answers, for the service to read.
 *
 * An image may also declare a start command and a ready check (E2B's template start and
 * ready commands), alone or with a service:
 *
 *   org.sandboxd.start.cmd       a shell command, run by `/bin/sh -c` at every boot (same
 *                                boots as a service), detached, as the image's user, in its
 *                                WorkingDir, with the sandbox's env (at a warm-pool fill: the
 *                                image's; the create's is in {@link ENVS_FILE} then)
 *   org.sandboxd.ready.cmd       a shell command run (likewise, in the foreground, each run
 *                                bounded) every ~200 ms until it exits 0: the boot is done
 *                                only then (and once the service's health answers, if any)
 *   org.sandboxd.ready.timeout   ms the ready check may take in all (default: the driver's
 *                                `serviceStartTimeoutMs`); past it the boot fails
 *                                `upstream_timeout` with the last run's exit code and output
 *
 * See docs/runtime.md ("Image-declared services", "Start and ready commands").
 */
import { request } from 'node:http';
import { Readable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { SandboxdError } from '@sandboxd/protocol';
import type { ExecResult } from '../driver.js';
import type { CommandTarget, SandboxCommands } from './commands/exec.js';
import { AgentFiles } from './files.js';
import { type DeclaredService, type DeclaredStart, isAlive, type SandboxRecord } from './records.js';

export const SERVICE_LABELS = {
  cmd: 'org.sandboxd.service.cmd',
  port: 'org.sandboxd.service.port',
  health: 'org.sandboxd.service.health',
} as const;

/** Where the sandbox's create-time env vars are written, as a JSON object name -> value (0644, root's). */
export const ENVS_FILE = '/run/sandboxd/envs.json';

export const START_LABELS = {
  cmd: 'org.sandboxd.start.cmd',
  ready: 'org.sandboxd.ready.cmd',
  readyTimeout: 'org.sandboxd.ready.timeout',
} as const;

export type { DeclaredService, DeclaredStart } from './records.js';

/** Longest start or ready command taken from a label (kept in every record of its sandboxes). */
const MAX_SHELL_LABEL = 64 * 1024;
/** Longest `org.sandboxd.ready.timeout` taken: an hour. */
const MAX_READY_TIMEOUT_MS = 3_600_000;
/** Each run of a ready check is killed past this (or past what is left of the whole wait). */
const READY_RUN_MS = 10_000;
/** Pause between two runs of a ready check. */
const READY_EVERY_MS = 200;
/** The output of a failed ready check kept in the error (its last bytes). */
const READY_OUTPUT_BYTES = 4096;

/** Longest `org.sandboxd.service.cmd` label taken. */
const MAX_CMD_LABEL = 64 * 1024;
/** Longest `org.sandboxd.service.health` label taken. */
const MAX_HEALTH_LABEL = 2048;

/**
 * The service `labels` declare, null when they declare none (no `org.sandboxd.service.*`
 * label). Throws `validation` naming image `ref` and the label when one is malformed or
 * one of the three is missing: such an image starts no sandbox.
 */
export function declaredService(
  labels: Readonly<Record<string, string>> | undefined,
  ref: string,
): DeclaredService | null {
  const l = labels ?? {};
  const cmd = l[SERVICE_LABELS.cmd];
  const port = l[SERVICE_LABELS.port];
  const health = l[SERVICE_LABELS.health];
  if (cmd === undefined && port === undefined && health === undefined) return null;
  const bad = (label: string, why: string) =>
    new SandboxdError('validation', `Image ${ref} declares a malformed service: label ${label} ${why}`, {
      image: ref,
      label,
    });
  if (cmd === undefined) throw bad(SERVICE_LABELS.cmd, 'is missing');
  // Any image a tenant pulls may declare one; the declaration is kept in every record of
  // its sandboxes, so its size is bounded (an argv of 64 KiB, a path of 2 KiB).
  if (cmd.length > MAX_CMD_LABEL) throw bad(SERVICE_LABELS.cmd, `is over ${MAX_CMD_LABEL} bytes`);
  if (port === undefined) throw bad(SERVICE_LABELS.port, 'is missing');
  if (health === undefined) throw bad(SERVICE_LABELS.health, 'is missing');
  let argv: unknown;
  try {
    argv = JSON.parse(cmd);
  } catch {
    argv = null;
  }
  if (
    !Array.isArray(argv) ||
    argv.length === 0 ||
    !argv.every((a) => typeof a === 'string' && !a.includes('\0')) ||
    !(argv[0] as string).startsWith('/')
  )
    throw bad(SERVICE_LABELS.cmd, 'must be a JSON array of strings, the first an absolute path');
  if (!/^[0-9]{1,5}$/.test(port) || Number(port) < 1 || Number(port) > 65535)
    throw bad(SERVICE_LABELS.port, 'must be a TCP port (1..65535)');
  if (!/^\/[\x21-\x7e]*$/.test(health) || health.length > MAX_HEALTH_LABEL)
    throw bad(SERVICE_LABELS.health, `must be a path starting with / (at most ${MAX_HEALTH_LABEL} bytes)`);
  return { argv: argv as string[], port: Number(port), health };
}

/**
 * The start command and ready check `labels` declare (see the file's comment), null when
 * they declare neither. Throws `validation` naming image `ref` and the label when one is
 * malformed (empty, over 64 KiB, a NUL; a timeout that is no whole number of ms from 1 to an
 * hour, or one without a ready check): such an image starts no sandbox.
 */
export function declaredStart(labels: Readonly<Record<string, string>> | undefined, ref: string): DeclaredStart | null {
  const l = labels ?? {};
  const cmd = l[START_LABELS.cmd];
  const ready = l[START_LABELS.ready];
  const timeout = l[START_LABELS.readyTimeout];
  if (cmd === undefined && ready === undefined && timeout === undefined) return null;
  const bad = (label: string, why: string) =>
    new SandboxdError('validation', `Image ${ref} declares a malformed start: label ${label} ${why}`, {
      image: ref,
      label,
    });
  const shell = (label: string, v: string) => {
    if (v.trim() === '' || v.includes('\0') || v.length > MAX_SHELL_LABEL)
      throw bad(label, `must be a shell command (not empty, no NUL, at most ${MAX_SHELL_LABEL} bytes)`);
    return v;
  };
  const out: DeclaredStart = {};
  if (cmd !== undefined) out.cmd = shell(START_LABELS.cmd, cmd);
  if (ready !== undefined) out.ready = shell(START_LABELS.ready, ready);
  if (timeout !== undefined) {
    if (ready === undefined) throw bad(START_LABELS.readyTimeout, `is set without ${START_LABELS.ready}`);
    if (!/^[0-9]{1,10}$/.test(timeout) || Number(timeout) < 1 || Number(timeout) > MAX_READY_TIMEOUT_MS)
      throw bad(START_LABELS.readyTimeout, `must be a whole number of ms from 1 to ${MAX_READY_TIMEOUT_MS}`);
    out.readyTimeoutMs = Number(timeout);
  }
  return out;
}

/**
 * Starts the start command `cmd` detached in sandbox `rec` (`/bin/sh -c cmd`, as its user,
 * in its working dir, with its env); resolves with its pid in the sandbox. Throws
 * `validation` when it cannot start (no /bin/sh, a working dir the user cannot enter).
 */
export async function startCommand(commands: SandboxCommands, rec: SandboxRecord, cmd: string): Promise<number> {
  try {
    return await commands.startDetached(rec, ['/bin/sh', '-c', cmd], {
      user: rec.user,
      env: rec.env,
      cwd: rec.workingDir,
    });
  } catch (e) {
    if (e instanceof SandboxdError) throw e;
    throw new SandboxdError('validation', `The image's start command cannot start: ${(e as Error).message}`, {
      sandboxId: rec.spec.id,
    });
  }
}

/** The last `max` bytes of `text` (whole characters). */
function tail(text: string, max: number): string {
  const b = Buffer.from(text);
  return b.length <= max
    ? text
    : b
        .subarray(b.length - max)
        .toString('utf8')
        .replace(/^\uFFFD+/, '');
}

/**
 * Resolves once the ready check `ready` exits 0 in sandbox `rec` (`/bin/sh -c`, as its
 * user, in its working dir, with its env): run every ~200 ms, each run bounded (10 s, or
 * what is left), until `timeoutMs` passed (`once`: a single run), then throws
 * `upstream_timeout` with the last run's exit code and output (stdout then stderr, its
 * last 4 KiB) in `details`. `alive()` false (the sandbox died) ends the wait at once with
 * `internal`.
 */
export async function waitReady(
  commands: SandboxCommands,
  rec: SandboxRecord,
  ready: string,
  o: { timeoutMs: number; alive?: () => boolean; sandboxId: string; once?: boolean },
): Promise<void> {
  const deadline = Date.now() + o.timeoutMs;
  let last: Pick<ExecResult, 'exitCode' | 'stdout' | 'stderr'> = { exitCode: -1, stdout: '', stderr: 'no run made' };
  for (let attempt = 0; attempt < 1_000_000; attempt++) {
    if (o.alive && !o.alive())
      throw new SandboxdError('internal', `sandbox ${o.sandboxId} died while its ready command ran`);
    const started = Date.now();
    const runMs = Math.max(100, Math.min(READY_RUN_MS, deadline - started));
    try {
      last = await commands.exec(rec, ready, { timeoutMs: runMs, maxOutputBytes: 64 * 1024 });
    } catch (e) {
      last = { exitCode: -1, stdout: '', stderr: (e as Error).message };
    }
    if (last.exitCode === 0) return;
    if (o.once || Date.now() >= deadline) break;
    await sleep(Math.max(0, Math.min(READY_EVERY_MS - (Date.now() - started), deadline - Date.now())));
    if (Date.now() >= deadline) break;
  }
  const within = o.once ? 'when checked again' : `within ${Math.round(o.timeoutMs / 100) / 10} s`;
  throw new SandboxdError(
    'upstream_timeout',
    `The image's ready command did not succeed ${within} (last exit code ${last.exitCode})`,
    { sandboxId: o.sandboxId, exitCode: last.exitCode, output: tail(last.stdout + last.stderr, READY_OUTPUT_BYTES) },
  );
}

/**
 * Starts `svc` detached in the sandbox `t` (as root, cwd `/`, env `env`); resolves with its
 * pid in the sandbox. Throws `validation` when it cannot start (program missing, say).
 */
export async function startService(
  commands: SandboxCommands,
  t: CommandTarget,
  svc: DeclaredService,
  env: string[],
): Promise<number> {
  try {
    return await commands.startDetached(t, svc.argv, { user: '0:0', env, cwd: '/' });
  } catch (e) {
    if (e instanceof SandboxdError) throw e;
    throw new SandboxdError(
      'validation',
      `The image's service ${JSON.stringify(svc.argv)} cannot start: ${(e as Error).message}`,
      { argv0: svc.argv[0] },
    );
  }
}

/**
 * One readiness probe: resolves with the status, or rejects (refused, reset, no answer in
 * `timeoutMs`). The service is the image author's: the whole exchange is bounded by one
 * timer (not the socket's idle timeout, which headers dripped a byte at a time never trip),
 * and the connection is closed as soon as the status is known (a body is never read, so an
 * endless one costs nothing). Redirects are answers like any other (not 2xx), never followed.
 */
function probe(address: string, svc: DeclaredService, timeoutMs: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request({ host: address, port: svc.port, path: svc.health, method: 'GET', agent: false }, (res) => {
      clearTimeout(timer);
      resolve(res.statusCode ?? 0);
      res.destroy();
      req.destroy();
    });
    const timer = setTimeout(() => req.destroy(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs);
    req.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    req.end();
  });
}

/**
 * Resolves once `GET http://<address>:<port><health>` answers 2xx; probes at most every
 * 100 ms (each with at most 2 s to answer) until `timeoutMs` passed, then throws
 * `upstream_timeout` with the last answer or error. `alive()` false (the sandbox died)
 * ends the wait at once with `internal`.
 */
export async function waitHealthy(
  address: string,
  svc: DeclaredService,
  o: { timeoutMs: number; alive?: () => boolean; sandboxId: string },
): Promise<void> {
  const deadline = Date.now() + o.timeoutMs;
  let last = 'no probe made';
  for (let attempt = 0; attempt < 100_000; attempt++) {
    if (o.alive && !o.alive())
      throw new SandboxdError('internal', `sandbox ${o.sandboxId} died while its service started`);
    const left = deadline - Date.now();
    const started = Date.now();
    try {
      const status = await probe(address, svc, Math.max(50, Math.min(2000, left)));
      if (status >= 200 && status < 300) return;
      last = `answered ${status}`;
    } catch (e) {
      last = (e as NodeJS.ErrnoException).code ?? (e as Error).message;
    }
    if (Date.now() >= deadline) break;
    await sleep(Math.max(0, Math.min(100 - (Date.now() - started), deadline - Date.now())));
    if (Date.now() >= deadline) break;
  }
  throw new SandboxdError(
    'upstream_timeout',
    `The image's service ${JSON.stringify(svc.argv)} did not answer GET ${svc.health} on port ${svc.port} with 2xx within ${Math.round(o.timeoutMs / 1000)} s (last: ${last})`,
    { sandboxId: o.sandboxId, port: svc.port },
  );
}

/**
 * Writes `env` (the sandbox's create-time env vars) to {@link ENVS_FILE} in sandbox `t`
 * as root: mode 0644, its folder made 0755 when missing, replaced atomically (a reader
 * sees the old file or the new one). Needs nothing of the image (the agent's file tool).
 */
export async function writeEnvsFile(
  commands: SandboxCommands,
  t: CommandTarget,
  env: Readonly<Record<string, string>>,
): Promise<void> {
  const body = Buffer.from(`${JSON.stringify(env)}\n`);
  const files = new AgentFiles((_id, argv, o) => commands.spawn(t, argv, o));
  await files.write(t.cid, ENVS_FILE, Readable.from([body]), { user: 'root', mode: '0644', length: body.length });
}

/**
 * What every boot of a sandbox whose image declares a service or a start does before it is
 * ready: the sandbox's create-time env written to {@link ENVS_FILE}, the service started,
 * the start command started, then the service's health and the ready check awaited (both
 * must hold; the first to fail ends the other's wait). `timeoutMs` bounds the health check,
 * and the ready check unless its image gives its own. No-op for a sandbox with neither.
 */
export async function bootService(commands: SandboxCommands, rec: SandboxRecord, timeoutMs: number): Promise<void> {
  const svc = rec.service;
  const start = rec.start;
  if (!svc && !start) return;
  await writeEnvsFile(commands, rec, rec.spec.env);
  if (svc) await startService(commands, rec, svc, svc.env);
  if (start?.cmd) await startCommand(commands, rec, start.cmd);
  let failed = false;
  const alive = () => !failed && isAlive(rec);
  const waits: Promise<void>[] = [];
  if (svc) waits.push(waitHealthy(rec.address, svc, { timeoutMs, alive, sandboxId: rec.spec.id }));
  if (start?.ready)
    waits.push(
      waitReady(commands, rec, start.ready, {
        timeoutMs: start.readyTimeoutMs ?? timeoutMs,
        alive,
        sandboxId: rec.spec.id,
      }),
    );
  await Promise.all(
    waits.map((w) =>
      w.catch((e) => {
        failed = true;
        throw e;
      }),
    ),
  ).catch(async (e) => {
    await Promise.allSettled(waits); // the other wait ends at its next turn
    throw e;
  });
}
