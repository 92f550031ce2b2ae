import { LIMITS, SandboxdError, type ExecRequest, type ExecResult } from '@sandboxd/protocol';
import { DEFAULT_FAIR_SHARE } from '../config-fair-share.js';
import type { StreamedProcess } from '../runtime/driver.js';
import type { ServiceDeps } from './context.js';
import type { LiveProcess, ProcessService } from './processes.js';
import { resolveLogin } from './login.js';
import { assertStarted, whileRunning } from './started.js';
import { envProblems, type SandboxService } from './sandboxes.js';
import { Slots } from './slots.js';
import type { StorageGuard } from './storage.js';

/**
 * Runs `/bin/sh -c command` in a started sandbox. Foreground waits (default 60 s, exit
 * 124 on timeout; 1 MiB per stream, then `truncated: true`); background answers at once
 * with `pid`, and streamed (`stream: true`) gives the process to read as it runs; both are
 * tracked by the ProcessService. Foreground execs in flight are counted per sandbox in
 * this process (`execsPerSandbox`, default 128: each may hold 1 MiB per stream here until it
 * ends). Throws `not_found`, `conflict` (not started), `validation`, `insufficient_storage`
 * (the data dir is nearly full), `rate_limited` (the sandbox has its share in flight).
 */
export class ExecService {
  private readonly inFlight = new Slots();
  private readonly maxInFlight: number;

  constructor(
    private readonly d: Pick<ServiceDeps, 'driver' | 'clock'> & {
      storage: StorageGuard;
      shares?: { execsPerSandbox: number };
    },
    private readonly sandboxes: Pick<SandboxService, 'get'>,
    private readonly processes: Pick<ProcessService, 'start'>,
  ) {
    this.maxInFlight = d.shares?.execsPerSandbox ?? DEFAULT_FAIR_SHARE.execsPerSandbox;
  }

  /** Starts the command as a tracked process whose output is read as it comes (`options.stream`). */
  async stream(accountId: string, req: ExecRequest & { sandboxId: string }): Promise<LiveProcess> {
    const id = await this.check(accountId, req);
    return whileRunning(() => this.startTracked(id, req, true));
  }

  /**
   * Starts `argv` (argv[0] an absolute path, or a name looked up in the sandbox's PATH by
   * the runtime) as a tracked process, held until its first reader attaches. With `login`,
   * it starts as a login of `user` would (see {@link resolveLogin}: HOME, USER, LOGNAME,
   * the working directory under the home by default); `env` goes on top. Throws like
   * {@link run}, and `validation` for an unknown user or an empty argv.
   */
  async spawn(accountId: string, sandboxId: string, req: SpawnRequest): Promise<LiveProcess> {
    const command = req.argv.join(' ');
    if (!req.argv.length || !req.argv[0])
      throw new SandboxdError('validation', 'The command is empty', [
        { in: 'body', path: '/argv/0', message: 'must be a non-empty string' },
      ]);
    const nul = req.argv.findIndex((a) => a.includes('\0'));
    if (nul >= 0)
      throw new SandboxdError('validation', `Argument ${nul} of the command contains a NUL byte`, [
        { in: 'body', path: `/argv/${nul}`, message: 'contains a NUL byte' },
      ]);
    const env = Object.keys(req.env ?? {}).find((k) => !validEnvEntry(k, req.env?.[k] ?? ''));
    if (env !== undefined)
      throw new SandboxdError('validation', `Invalid environment variable ${JSON.stringify(env)}`, [
        { in: 'body', path: `/env/${env}`, message: 'names are non-empty, without "=" or NUL; values without NUL' },
      ]);
    const id = await this.check(accountId, { sandboxId, command, options: { env: req.env } });
    return whileRunning(async () => {
      const login = req.login ? await resolveLogin(this.d.driver, id, { user: req.user, cwd: req.cwd }) : null;
      return this.processes.start(id, req.argv, {
        env: req.env,
        baseEnv: login?.env,
        cwd: login ? login.cwd : req.cwd,
        user: login ? login.user : req.user,
        timeoutMs: req.timeoutMs,
        stdin: req.stdin,
        tag: req.tag,
        held: true,
      });
    });
  }

  private startTracked(id: string, req: ExecRequest, held = false): Promise<LiveProcess> {
    const o = req.options ?? {};
    return this.processes.start(id, ['/bin/sh', '-c', req.command], {
      env: o.env,
      cwd: o.cwd,
      user: o.user,
      timeoutMs: o.timeoutMs,
      stdin: o.stdin,
      tag: o.tag,
      held,
    });
  }

  /** Validates, checks the sandbox is started and the data dir has room; the sandbox's id. */
  private async check(accountId: string, req: ExecRequest & { sandboxId: string }): Promise<string> {
    const r = await this.sandboxes.get(accountId, req.sandboxId);
    const problems = envProblems(req.options?.env, '/options/env');
    const commandBytes = Buffer.byteLength(req.command);
    if (commandBytes > LIMITS.maxArgBytes)
      problems.unshift({
        in: 'body',
        path: '/command',
        message: `is ${commandBytes} bytes; at most ${LIMITS.maxArgBytes}`,
      });
    if (problems.length)
      throw new SandboxdError('validation', problems.map((p) => `${p.path}: ${p.message}`).join('; '), problems);
    assertStarted(r, this.d.clock.now());
    // Commands write to the sandbox's root layer, a sparse file on the data dir: refused when it is full.
    await this.d.storage.check();
    return r.id;
  }

  async run(accountId: string, req: ExecRequest & { sandboxId: string }): Promise<ExecResult> {
    const id = await this.check(accountId, req);
    const o = req.options ?? {};
    if (o.stdin && !o.background)
      throw new SandboxdError('validation', 'options.stdin needs options.stream or options.background', [
        { in: 'body', path: '/options/stdin', message: 'needs stream or background' },
      ]);
    if (o.background)
      return whileRunning(async () => {
        const p = await this.startTracked(id, req);
        return { stdout: '', stderr: '', exitCode: 0, success: true, pid: p.pid };
      });
    const max = this.maxInFlight;
    const release = this.inFlight.take(
      id,
      max,
      () =>
        new SandboxdError(
          'rate_limited',
          `The sandbox already has ${max} foreground execs running; wait for one to end`,
          { limit: 'execsPerSandbox', max },
        ),
    );
    return whileRunning(async () => {
      if (o.user) {
        // One-shot as another user: a streamed process (not listed), collected.
        const p = await this.d.driver.spawn(id, ['/bin/sh', '-c', req.command], {
          env: o.env,
          cwd: o.cwd,
          user: o.user,
          timeoutMs: o.timeoutMs ?? LIMITS.defaultExecTimeoutMs,
        });
        return collect(p, LIMITS.maxExecOutputBytes);
      }
      const res = await this.d.driver.exec(id, req.command, {
        env: o.env,
        cwd: o.cwd,
        timeoutMs: o.timeoutMs ?? LIMITS.defaultExecTimeoutMs,
        maxOutputBytes: LIMITS.maxExecOutputBytes,
      });
      const out: ExecResult = {
        stdout: res.stdout,
        stderr: res.stderr,
        exitCode: res.exitCode,
        success: res.exitCode === 0,
      };
      if (res.truncated) out.truncated = true;
      return out;
    }).finally(release);
  }
}

/** An environment variable a process can be given: a name without `=` or NUL, a value without NUL. */
export function validEnvEntry(name: string, value: string): boolean {
  return name !== '' && !/[=\0]/.test(name) && !value.includes('\0');
}

/** What {@link ExecService.spawn} starts. */
export interface SpawnRequest {
  argv: string[];
  env?: Record<string, string>;
  cwd?: string;
  /** `root`, a name, a numeric `uid[:gid]`; default the image's user. */
  user?: string;
  /** Start as a login of the user: HOME, USER, LOGNAME set, `cwd` relative to the home (default it). */
  login?: boolean;
  /** Killed (exit 124, `timedOut`) after this long; 0 or none: never. */
  timeoutMs?: number;
  stdin?: boolean;
  tag?: string;
}

/** The one-shot result of a streamed process: each stream kept up to `max` bytes. */
function collect(p: StreamedProcess, max: number): Promise<ExecResult> {
  return new Promise((resolve) => {
    const out = { stdout: [] as Buffer[], stderr: [] as Buffer[] };
    const len = { stdout: 0, stderr: 0 };
    let truncated = false;
    p.onData((stream, chunk) => {
      const take = chunk.subarray(0, Math.max(0, max - len[stream]));
      if (take.length < chunk.length) truncated = true;
      out[stream].push(take);
      len[stream] += take.length;
    });
    p.onExit((e) => {
      const r: ExecResult = {
        stdout: Buffer.concat(out.stdout).toString('utf8'),
        stderr: Buffer.concat(out.stderr).toString('utf8'),
        exitCode: e.exitCode,
        success: e.exitCode === 0,
      };
      if (truncated) r.truncated = true;
      resolve(r);
    });
  });
}
