/**
 * A small terminal WebSocket client for tests and benchmarks (real `ws` client). Keeps
 * control messages, counts output bytes and keeps the last 1 MiB of output as text.
 */
import { StringDecoder } from 'node:string_decoder';
import WebSocket from 'ws';
import { Waiters } from '../src/runtime/waiting.js';

const TEXT_KEEP = 1024 * 1024;

/** An upgrade refused with plain HTTP. */
export class UpgradeRefused extends Error {
  constructor(
    readonly status: number,
    readonly body: unknown,
  ) {
    super(`upgrade refused: ${status} ${JSON.stringify(body)}`);
  }
}

/** One connected terminal client. */
export class TermClient {
  controls: Array<{ type: string; [k: string]: unknown }> = [];
  /** Text frames that were not JSON (must stay empty: output is binary). */
  textFrames: string[] = [];
  receivedBytes = 0;
  /** Output as text, cut to its last 1 MiB. */
  text = '';
  closeInfo: { code: number; reason: string } | null = null;
  /** The last 32-64 KiB of output: searched per frame (slicing the big `text` would flatten it). */
  private recent = '';
  readonly closed: Promise<{ code: number; reason: string }>;
  private readonly decoder = new StringDecoder('utf8');
  private readonly waiters = new Waiters(
    () => `output tail: ${JSON.stringify(this.text.slice(-300))}; close: ${JSON.stringify(this.closeInfo)}`,
  );

  private constructor(readonly ws: WebSocket) {
    ws.on('message', (data: Buffer, isBinary: boolean) => {
      if (isBinary) {
        this.receivedBytes += data.length;
        const chars = this.decoder.write(data);
        this.recent += chars;
        if (this.recent.length > 65536) this.recent = this.recent.slice(-32768);
        this.text += chars;
        if (this.text.length > 2 * TEXT_KEEP) this.text = this.text.slice(-TEXT_KEEP);
      } else {
        const s = data.toString();
        try {
          this.controls.push(JSON.parse(s));
        } catch {
          this.textFrames.push(s);
        }
      }
      this.waiters.wake();
    });
    this.closed = new Promise((resolve) => {
      ws.on('close', (code, reason) => {
        this.closeInfo = { code, reason: reason.toString() };
        this.waiters.wake();
        resolve(this.closeInfo);
      });
    });
    ws.on('error', () => {});
  }

  /** Opens `url`; rejects with {@link UpgradeRefused} when the server answers plain HTTP. */
  static connect(url: string, headers: Record<string, string> = {}, timeoutMs = 20_000): Promise<TermClient> {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(url, { headers, handshakeTimeout: timeoutMs, maxPayload: 256 * 1024 * 1024 });
      const client = new TermClient(ws);
      ws.once('open', () => resolve(client));
      ws.once('unexpected-response', (_req, res) => {
        let body = '';
        res.on('data', (b: Buffer) => (body += b));
        res.on('end', () => {
          let parsed: unknown = body;
          try {
            parsed = JSON.parse(body);
          } catch {
            /* keep text */
          }
          reject(new UpgradeRefused(res.statusCode ?? 0, parsed));
          ws.terminate();
        });
      });
      ws.once('error', reject);
    });
  }

  /** Sends keyboard input: a binary frame, or a text frame with `{ text: true }`. */
  type(data: string, opts: { text?: boolean } = {}): void {
    this.ws.send(opts.text ? data : Buffer.from(data), { binary: !opts.text });
  }

  resize(cols: unknown, rows: unknown): void {
    this.ws.send(JSON.stringify({ type: 'resize', cols, rows }));
  }

  /** Resolves once `pred()` holds; re-checked on every frame and close. Rejects after `timeoutMs`. */
  waitFor(pred: () => boolean, what: string, timeoutMs = 20_000): Promise<void> {
    return this.waiters.until(what, pred, timeoutMs);
  }

  /**
   * Waits until the output matches `re`: first against the kept text, then against the
   * last 32 KiB or more, so streaming megabytes stays linear.
   */
  waitForOutput(re: RegExp, timeoutMs?: number): Promise<void> {
    let first = true;
    return this.waitFor(
      () => {
        const hay = first ? this.text : this.recent;
        first = false;
        return re.test(hay);
      },
      `output ${re}`,
      timeoutMs,
    );
  }

  /** The control message of `type`, once it arrives. */
  async control(type: string, timeoutMs?: number): Promise<{ type: string; [k: string]: unknown }> {
    await this.waitFor(() => this.controls.some((c) => c.type === type), `a "${type}" message`, timeoutMs);
    return this.controls.find((c) => c.type === type)!;
  }

  /** Stops reading from the socket (TCP backpressure builds up on the server). */
  pause(): void {
    this.ws.pause();
  }

  resume(): void {
    this.ws.resume();
  }

  close(): void {
    this.ws.close();
  }
}

/** The WebSocket URL of a terminal at an HTTP base URL. */
export function terminalUrl(baseUrl: string, sandboxId: string, terminalId: string, query = ''): string {
  return `${baseUrl.replace(/^http/, 'ws')}/api/v1/sandboxes/${sandboxId}/terminals/${terminalId}/ws${query}`;
}

/** Connects expecting a refusal; returns its status and body. */
export async function refusedUpgrade(
  url: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: unknown }> {
  try {
    const c = await TermClient.connect(url, headers);
    c.close();
  } catch (e) {
    if (e instanceof UpgradeRefused) return { status: e.status, body: e.body };
    throw e;
  }
  throw new Error(`upgrade of ${url} was accepted`);
}
