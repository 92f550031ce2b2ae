/**
 * Waiting helpers shared by the conformance suites of `runtime/` and the tests that reuse
 * their clients (test code, kept in `src/` beside the suites that export it).
 */
import assert from 'node:assert/strict';
import { type ErrorKind, isSandboxdError } from '@sandboxd/protocol';

/**
 * Conditions waited on by a client that receives events: {@link until} resolves once its
 * test holds, checked again at each {@link wake} (call it on every event).
 */
export class Waiters {
  private readonly waiting = new Set<() => void>();

  /** `describe()` says what the client saw, in the message of a timeout. */
  constructor(private readonly describe: () => string) {}

  /** Resolves once `test()` holds, or rejects after `timeoutMs`. */
  until(what: string, test: () => boolean, timeoutMs: number): Promise<void> {
    if (test()) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const check = () => {
        if (!test()) return;
        clearTimeout(timer);
        this.waiting.delete(check);
        resolve();
      };
      const timer = setTimeout(() => {
        this.waiting.delete(check);
        reject(new Error(`timed out waiting for ${what}; ${this.describe()}`));
      }, timeoutMs);
      this.waiting.add(check);
    });
  }

  /** Checks every waiting condition again. */
  wake(): void {
    for (const w of [...this.waiting]) w();
  }
}

/** Asserts that `p` rejects with a {@link SandboxdError} of `kind`. */
export async function rejectsWith(p: Promise<unknown>, kind: ErrorKind): Promise<void> {
  await assert.rejects(p, (e: unknown) => {
    assert.ok(isSandboxdError(e), `expected SandboxdError(${kind}), got ${String(e)}`);
    assert.equal(e.kind, kind);
    return true;
  });
}

/** Polls `fn` every 25 ms until it answers true (at most `tries` times). */
export async function eventually(what: string, fn: () => Promise<boolean>, tries = 400): Promise<void> {
  for (let i = 0; i < tries; i++) {
    if (await fn()) return;
    await new Promise((r) => setTimeout(r, 25));
  }
  assert.fail(`never: ${what}`);
}
