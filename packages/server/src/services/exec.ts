import { LIMITS, SandboxdError, type ExecRequest, type ExecResult } from '@sandboxd/protocol';
import type { ServiceDeps } from './context.js';
import { envProblems, type SandboxService } from './sandboxes.js';
import type { StorageGuard } from './storage.js';

/**
 * Runs `/bin/sh -c command` in a started sandbox. Foreground waits (default 60 s, exit
 * 124 on timeout; 1 MiB per stream, then `truncated: true`); background answers at once
 * with `pid`. Throws `not_found`, `conflict` (not started), `insufficient_storage` (the data
 * dir is nearly full).
 */
export class ExecService {
  constructor(
    private readonly d: Pick<ServiceDeps, 'driver' | 'clock'> & { storage: StorageGuard },
    private readonly sandboxes: Pick<SandboxService, 'get'>,
  ) {}

  async run(accountId: string, req: ExecRequest & { sandboxId: string }): Promise<ExecResult> {
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
    if (r.state !== 'started' || r.stopAt <= this.d.clock.now()) {
      throw new SandboxdError('conflict', `Sandbox is ${r.state === 'started' ? 'stopping' : r.state}`, {
        state: r.state,
      });
    }
    // Commands write to the sandbox's root layer, a sparse file on the data dir: refused when it is full.
    await this.d.storage.check();
    const o = req.options ?? {};
    try {
      if (o.background) {
        const { pid } = await this.d.driver.execBackground(r.id, req.command, { env: o.env, cwd: o.cwd });
        return { stdout: '', stderr: '', exitCode: 0, success: true, pid };
      }
      const res = await this.d.driver.exec(r.id, req.command, {
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
    } catch (e) {
      if (e instanceof SandboxdError && e.kind === 'not_found')
        throw new SandboxdError('conflict', 'Sandbox is not running', { state: 'lost' });
      throw e;
    }
  }
}
