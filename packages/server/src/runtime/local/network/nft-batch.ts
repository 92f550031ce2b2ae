import { runTool } from './exec.js';

interface Waiter {
  lines: string[];
  resolve: () => void;
  reject: (e: unknown) => void;
}

/**
 * Runs nft commands in batches: commands asked for while one `nft -f -` runs go into the
 * next one, so a burst of DNS answers costs one process, not one each. A batch is one
 * transaction; when it fails, each caller's commands are run again on their own, so one bad
 * command fails only its caller.
 */
export class NftBatcher {
  #queue: Waiter[] = [];
  #running = false;

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
          await apply(batch.flatMap((w) => w.lines));
          for (const w of batch) w.resolve();
        } catch (e) {
          if (batch.length === 1) batch[0].reject(e);
          else
            for (const w of batch) {
              await apply(w.lines).then(w.resolve, w.reject);
            }
        }
      }
    } finally {
      this.#running = false;
    }
  }
}

async function apply(lines: string[]): Promise<void> {
  await runTool('nft', ['-f', '-'], { input: `${lines.join('\n')}\n` });
}
