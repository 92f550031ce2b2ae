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
 * See docs/runtime.md ("Image-declared services").
 */
import { request } from 'node:http';
import { Readable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { SandboxdError } from '@sandboxd/protocol';
import type { CommandTarget, SandboxCommands } from './commands/exec.js';
import { AgentFiles } from './files.js';
import { type DeclaredService, isAlive, type SandboxRecord } from './records.js';

export const SERVICE_LABELS = {
  cmd: 'org.sandboxd.service.cmd',
  port: 'org.sandboxd.service.port',
  health: 'org.sandboxd.service.health',
} as const;

/** Where the sandbox's create-time env vars are written, as a JSON object name -> value (0644, root's). */
export const ENVS_FILE = '/run/sandboxd/envs.json';

export type { DeclaredService } from './records.js';

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
 * What every boot of a sandbox whose image declares a service does before it is ready:
 * the sandbox's create-time env written to {@link ENVS_FILE}, the service started, its
 * health check awaited (`timeoutMs`). No-op for a sandbox without a service.
 */
export async function bootService(commands: SandboxCommands, rec: SandboxRecord, timeoutMs: number): Promise<void> {
  const svc = rec.service;
  if (!svc) return;
  await writeEnvsFile(commands, rec, rec.spec.env);
  await startService(commands, rec, svc, svc.env);
  await waitHealthy(rec.address, svc, { timeoutMs, alive: () => isAlive(rec), sandboxId: rec.spec.id });
}
