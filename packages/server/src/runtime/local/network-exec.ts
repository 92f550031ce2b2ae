import { spawn } from 'node:child_process';
import { SandboxdError } from '@sandboxd/protocol';

/** Options of {@link runTool}. */
export interface RunToolOptions {
  /** Written to the tool's stdin (e.g. an `ip -batch -` script); stdin is /dev/null without it. */
  input?: string;
  /** Written to the tool's fd 3 (a socket: read it with `<&3`, not via /dev/fd/3). */
  fd3?: string;
  /** The tool is killed with SIGKILL after this long. Default 10000. */
  timeoutMs?: number;
  /** Resolve with the output instead of throwing when the tool exits non-zero. Default false. */
  allowFailure?: boolean;
}

/** What a tool printed and how it ended. */
export interface ToolResult {
  stdout: string;
  stderr: string;
  /** Exit code, or -1 when killed by a signal. */
  code: number;
}

/**
 * Runs a host tool (`ip`, `bridge`, `nft`, `nsenter`) without a shell and collects its output.
 * Throws `SandboxdError('internal')` naming the tool and its stderr when it cannot be
 * started, times out, or (unless `allowFailure`) exits non-zero.
 */
export function runTool(cmd: string, args: string[], options: RunToolOptions = {}): Promise<ToolResult> {
  const { input, fd3, timeoutMs = 10_000, allowFailure = false } = options;
  return new Promise((resolve, reject) => {
    const stdio: ('pipe' | 'ignore')[] = [input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'];
    if (fd3 !== undefined) stdio.push('pipe');
    const child = spawn(cmd, args, { stdio });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, timeoutMs);
    child.stdout!.on('data', (d: Buffer) => out.push(d));
    child.stderr!.on('data', (d: Buffer) => err.push(d));
    // A tool that exits early closes its input; its exit code tells what went wrong.
    for (const [fd, text] of [[0, input], [3, fd3]] as const) {
      if (text === undefined) continue;
      const stream = child.stdio[fd] as NodeJS.WritableStream & NodeJS.EventEmitter;
      stream.on('error', () => {});
      stream.end(text);
    }
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(new SandboxdError('internal', `network: cannot run ${cmd}: ${e.message}`));
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      const result = { stdout: Buffer.concat(out).toString(), stderr: Buffer.concat(err).toString(), code: code ?? -1 };
      if (timedOut) {
        reject(new SandboxdError('internal', `network: ${cmd} ${args.join(' ')} timed out after ${timeoutMs} ms`));
      } else if (result.code !== 0 && !allowFailure) {
        const why = result.stderr.trim().split('\n').slice(-3).join('; ');
        reject(new SandboxdError('internal', `network: ${cmd} ${args.join(' ')} failed (${result.code}): ${why}`));
      } else {
        resolve(result);
      }
    });
  });
}

/** Runs `cmd args` and parses its stdout as JSON (`ip -j ...`); empty output is `[]`. */
export async function runJson<T>(cmd: string, args: string[], options: RunToolOptions = {}): Promise<T[]> {
  const { stdout, code } = await runTool(cmd, args, options);
  if (code !== 0 || stdout.trim() === '') return [];
  return JSON.parse(stdout) as T[];
}

/**
 * Runs `fn` over `items` with at most `limit` calls in flight; results keep the input order.
 */
export async function mapLimit<T, R>(items: T[], limit: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const i = next++;
      results[i] = await fn(items[i]);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return results;
}
