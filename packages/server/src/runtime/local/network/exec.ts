import { SandboxdError } from '@sandboxd/protocol';
import { HostSpawner, type SpawnResult } from '../commands/spawner.js';

/** Options of {@link runTool}. */
export interface RunToolOptions {
  /** Written to the tool's stdin (e.g. an `ip -batch -` script); stdin is /dev/null without it. */
  input?: string;
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
 * Runs a host tool (`ip`, `bridge`, `nft`, `nsenter`) without a shell, through the host
 * spawner, and collects its output (up to 4 MiB per stream).
 * Throws `SandboxdError('internal')` naming the tool and its stderr when it cannot be
 * started, times out, or (unless `allowFailure`) exits non-zero.
 */
export async function runTool(cmd: string, args: string[], options: RunToolOptions = {}): Promise<ToolResult> {
  const { input, timeoutMs = 10_000, allowFailure = false } = options;
  let r: SpawnResult;
  try {
    r = await HostSpawner.shared().run(cmd, args, { input, timeoutMs, maxOutputBytes: 4 << 20 });
  } catch (e) {
    throw new SandboxdError('internal', `network: cannot run ${cmd}: ${(e as Error).message}`);
  }
  const result = { stdout: r.stdout.toString(), stderr: r.stderr.toString(), code: r.code };
  if (r.timedOut)
    throw new SandboxdError('internal', `network: ${cmd} ${args.join(' ')} timed out after ${timeoutMs} ms`);
  if (r.truncated) throw new SandboxdError('internal', `network: ${cmd} ${args.join(' ')} printed more than 4 MiB`);
  if (result.code !== 0 && !allowFailure) {
    const why = result.stderr.trim().split('\n').slice(-3).join('; ');
    throw new SandboxdError('internal', `network: ${cmd} ${args.join(' ')} failed (${result.code}): ${why}`);
  }
  return result;
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
