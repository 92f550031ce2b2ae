import { runTool } from './exec.js';
import type { NftSession } from './nft-session.js';

interface Waiter {
  lines: string[];
  resolve: () => void;
  reject: (e: unknown) => void;
}

/**
 * Runs nft commands in batches: commands asked for while one batch runs go into the next
 * one. A batch is one transaction, written to a long-lived `nft -i` when a session is given
 * (see nft-session.ts), else (or when the session fails) to one `nft -f -`; when it fails,
 * each caller's commands are run again on their own, so one bad command fails only its caller.
 */
export class NftBatcher {
  #queue: Waiter[] = [];
  #running = false;

  constructor(private readonly session?: NftSession) {}

  /** Ends the session's process, if any. */
  close(): void {
    this.session?.close();
  }

  /** Resolves once `lines` (nft commands, one per line) are applied; rejects with nft's error. */
  run(lines: string[]): Promise<void> {
    if (lines.length === 0) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      this.#queue.push({ lines, resolve, reject });
      if (!this.#running) void this.#drain();
    });
  }

  async #drain(): Promise<void> {
    this.#running = true;
    try {
      while (this.#queue.length > 0) {
        const batch = this.#queue.splice(0, 256);
        try {
          await this.#apply(batch.flatMap((w) => w.lines));
          for (const w of batch) w.resolve();
        } catch (e) {
          if (batch.length === 1) batch[0].reject(e);
          else
            for (const w of batch) {
              await this.#apply(w.lines).then(w.resolve, w.reject);
            }
        }
      }
    } finally {
      this.#running = false;
    }
  }

  /**
   * Through the session, else (the session failed, or nft refused the batch there: a
   * long-lived nft can refuse a transaction with "Device or resource busy" while other
   * processes change the ruleset; seen with other nft users on the host) once through a
   * fresh `nft -f -`, whose refusal is the answer.
   */
  async #apply(lines: string[]): Promise<void> {
    if (this.session) {
      try {
        return await this.session.run(lines);
      } catch {
        // below
      }
    }
    await runTool('nft', ['-f', '-'], { input: `${lines.join('\n')}\n` });
  }
}
