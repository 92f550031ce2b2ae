import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';

/** How long one batch may take before the session is given up (and the caller falls back). */
const BATCH_TIMEOUT_MS = 5000;

/**
 * One long-lived `nft -i` (interactive) for a table's element updates: a batch is written as
 * one line (its commands joined by `;`, one transaction), followed by a `list set` of an
 * empty marker set whose listing says the line before it was done; whatever nft printed in
 * between is that batch's error. This saves a process per batch (~3-25 ms here) on the path
 * of a DNS answer. Any trouble (no nft, a timeout, an exit) closes the session and rejects:
 * the caller runs the batch with `nft -f -` instead and a later batch starts a new session.
 * It is started with node's own `spawn` (not the host spawner, which runs programs to their
 * end): once per process, not per batch. It ends with the server (its stdin closes).
 */
export class NftSession {
  #child: ChildProcessWithoutNullStreams | undefined;
  #out = '';
  #wait: { resolve: (text: string) => void; reject: (e: Error) => void; timer: NodeJS.Timeout } | undefined;

  /** `table`: `inet <name>`; `marker`: an empty set of it, listed after each batch. */
  constructor(
    private readonly table: string,
    private readonly marker: string,
  ) {}

  /** Applies the commands as one transaction; rejects with nft's message, or when the session failed. */
  async run(lines: string[]): Promise<void> {
    if (this.#wait) throw new Error('nft session: one batch at a time');
    const child = this.#start();
    const done = new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.close();
        reject(new Error('nft session: no answer in time'));
      }, BATCH_TIMEOUT_MS);
      this.#wait = { resolve, reject, timer };
    });
    const line = lines.map((l) => l.replace(/[\n;]/g, ' ').trim()).join('; ');
    child.stdin.write(`${line}\nlist set ${this.table} ${this.marker}\n`);
    const printed = await done;
    if (/error/i.test(printed)) throw new Error(`nft: ${printed.trim().split('\n').slice(0, 3).join(' | ')}`);
  }

  close(): void {
    const w = this.#wait;
    this.#wait = undefined;
    if (w) {
      clearTimeout(w.timer);
      w.reject(new Error('nft session closed'));
    }
    this.#child?.kill('SIGKILL');
    this.#child = undefined;
    this.#out = '';
  }

  #start(): ChildProcessWithoutNullStreams {
    if (this.#child) return this.#child;
    // stderr into stdout, so an error comes before the marker's listing it belongs to.
    const child = spawn('sh', ['-c', 'exec nft -i 2>&1'], { stdio: ['pipe', 'pipe', 'pipe'] });
    child.unref();
    for (const s of [child.stdin, child.stdout, child.stderr]) (s as unknown as { unref?: () => void }).unref?.();
    child.on('error', () => this.close());
    child.on('exit', () => {
      if (this.#child === child) this.close();
    });
    child.stdin.on('error', () => this.close());
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (d: string) => this.#onOutput(d));
    this.#child = child;
    return child;
  }

  /** Output up to the end of the marker's listing answers the batch in flight. */
  #onOutput(d: string): void {
    this.#out += d;
    if (this.#out.length > 1 << 20) {
      this.close();
      return;
    }
    const at = this.#out.indexOf(`set ${this.marker} {`);
    if (at < 0) return;
    const end = this.#out.indexOf('\n}\n', at);
    if (end < 0) return;
    const before = this.#out.slice(0, this.#out.lastIndexOf('table ', at));
    this.#out = this.#out.slice(end + 3);
    const w = this.#wait;
    this.#wait = undefined;
    if (w) {
      clearTimeout(w.timer);
      w.resolve(before);
    }
  }
}
