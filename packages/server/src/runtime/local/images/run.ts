/**
 * Runs the external image tools (skopeo, umoci, mmdebstrap, tar) as child processes:
 * argv arrays only (never a shell string), a hard time limit, stderr kept for errors, and
 * `setpriv --pdeathsig SIGKILL` so a tool dies with sandboxd instead of writing on into a
 * temp dir after sandboxd was killed.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';

/** Thrown when a tool exits non-zero, is killed, or runs past its time limit. */
export class ToolError extends Error {
  constructor(
    readonly tool: string,
    readonly exitCode: number | null,
    readonly stderr: string,
    readonly timedOut: boolean,
  ) {
    super(timedOut ? `${tool} timed out` : `${tool} failed (exit ${exitCode ?? 'signal'}): ${lastLines(stderr, 6)}`);
    this.name = 'ToolError';
  }
}

export interface RunOptions {
  /** Kill the tool (SIGKILL) after this many ms. Required: every wait is bounded. */
  timeoutMs: number;
  cwd?: string;
  env?: NodeJS.ProcessEnv;
  /** Called with each chunk of stderr (tools print progress there). */
  onStderr?: (chunk: string) => void;
  /** Aborting kills the tool. */
  signal?: AbortSignal;
  /** Pid of the spawned process, for tests that kill things. */
  onSpawn?: (pid: number) => void;
}

const MAX_KEEP = 64 * 1024;
const SETPRIV = '/usr/bin/setpriv';
const hasSetpriv = existsSync(SETPRIV);

/**
 * Runs `cmd args...` and resolves with its stdout (utf8) when it exits 0.
 * Rejects with {@link ToolError} otherwise. stdin is /dev/null.
 */
export function runTool(cmd: string, args: string[], opts: RunOptions): Promise<string> {
  return new Promise((resolve, reject) => {
    const [file, argv] = hasSetpriv ? [SETPRIV, ['--pdeathsig', 'SIGKILL', '--', cmd, ...args]] : [cmd, args];
    const child = spawn(file, argv, {
      cwd: opts.cwd,
      env: opts.env ?? toolEnv(),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    let timedOut = false;
    let settled = false;
    const kill = () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    };
    const timer = setTimeout(() => {
      timedOut = true;
      kill();
    }, opts.timeoutMs);
    const onAbort = () => kill();
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    if (child.pid !== undefined) opts.onSpawn?.(child.pid);
    child.stdout.setEncoding('utf8').on('data', (d: string) => {
      if (stdout.length < MAX_KEEP * 16) stdout += d;
    });
    child.stderr.setEncoding('utf8').on('data', (d: string) => {
      stderr = (stderr + d).slice(-MAX_KEEP);
      opts.onStderr?.(d);
    });
    const finish = (err: Error | null) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      opts.signal?.removeEventListener('abort', onAbort);
      if (err) reject(err);
      else resolve(stdout);
    };
    child.on('error', (e) => finish(new ToolError(cmd, null, String(e.message), false)));
    child.on('close', (code) => {
      if (code === 0 && !timedOut) finish(null);
      else finish(new ToolError(cmd, code, stderr, timedOut || opts.signal?.aborted === true));
    });
  });
}

const PASS_THROUGH = [
  'HOME',
  'TMPDIR',
  'http_proxy',
  'https_proxy',
  'no_proxy',
  'HTTP_PROXY',
  'HTTPS_PROXY',
  'NO_PROXY',
];

/**
 * A minimal, predictable environment for tools: fixed PATH and locale, the host's proxy
 * settings if any, nothing else (no REGISTRY_AUTH_FILE, no DOCKER_CONFIG).
 */
export function toolEnv(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {
    PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
    LANG: 'C.UTF-8',
  };
  for (const k of PASS_THROUGH) if (process.env[k] !== undefined) env[k] = process.env[k];
  return { ...env, ...extra };
}

function lastLines(s: string, n: number): string {
  return s.trim().split('\n').slice(-n).join(' | ').slice(0, 2000);
}
