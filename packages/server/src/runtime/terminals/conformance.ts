import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { ServerControlMessage } from '@sandboxd/protocol';
import { CONFORMANCE_LIMITS, testId } from '../conformance.js';
import type { RuntimeDriver } from '../driver.js';
import { CLIENT_MAX_BUFFER_BYTES } from './session.js';
import type { DriverTerminals, TerminalAttachment, TerminalClient, TerminalSpec } from './types.js';
import { eventually, rejectsWith, Waiters } from '../waiting.js';

/**
 * The behaviour every holder of terminals ({@link DriverTerminals}) shows, in this process
 * (`TerminalHost`) or on a runner (`RemoteTerminals`, through any number of replicas). The
 * shell is driven with the conformance vocabulary (`echo`, `stty size`, `exit N`, `kill -9 $$`,
 * `head -c N /dev/zero`).
 */
export interface TerminalConformanceTarget {
  name: string;
  /**
   * A driver to make sandboxes with, and views of its terminals: one per API replica (the
   * suite attaches through the first and the last, which may be the same).
   */
  make: () => Promise<{ driver: RuntimeDriver; views: DriverTerminals[] }>;
  destroy: () => Promise<void>;
  image: string;
  /** The PTYs are real (their input queue fills when the program does not read). */
  realPty: boolean;
}

/** A terminal client for tests: keeps output and controls; one that does not read lets its backlog grow. */
export class TestTerminalClient implements TerminalClient {
  text = '';
  received = 0;
  controls: ServerControlMessage[] = [];
  closed: { code: number; reason: string } | null = null;
  inputPauses: string[] = [];
  attachment: TerminalAttachment | null = null;
  private backlog = 0;
  private readonly waiters = new Waiters(() => `output ends ${JSON.stringify(this.text.slice(-300))}`);

  constructor(private reads = true) {}

  sendOutput(chunk: Buffer): void {
    this.received += chunk.length;
    this.text += chunk.toString('latin1');
    if (this.text.length > 1 << 20) this.text = this.text.slice(-(1 << 19));
    if (!this.reads) this.backlog += chunk.length;
    else setImmediate(() => this.attachment?.written());
    this.waiters.wake();
  }
  sendControl(msg: ServerControlMessage): void {
    this.controls.push(msg);
    this.waiters.wake();
  }
  get bufferedBytes(): number {
    return this.backlog;
  }
  close(code: number, reason: string): void {
    this.closed ??= { code, reason };
    this.waiters.wake();
  }
  pauseInput(): void {
    this.inputPauses.push('pause');
  }
  resumeInput(): void {
    this.inputPauses.push('resume');
  }

  /** Starts reading: the backlog is handed on. */
  read(): void {
    this.reads = true;
    this.backlog = 0;
    this.attachment?.written();
  }

  /** Resolves once `test()` holds (checked at each event), or rejects after `timeoutMs`. */
  until(what: string, test: () => boolean, timeoutMs = 20_000): Promise<void> {
    return this.waiters.until(what, test, timeoutMs);
  }
  output(re: RegExp): Promise<void> {
    return this.until(String(re), () => re.test(this.text));
  }
  async control(type: string): Promise<ServerControlMessage> {
    await this.until(`control ${type}`, () => this.controls.some((c) => c.type === type));
    return this.controls.find((c) => c.type === type)!;
  }
  async closing(): Promise<{ code: number; reason: string }> {
    await this.until('close', () => this.closed !== null);
    return this.closed!;
  }
}

/** A terminal running a plain `/bin/sh` at 80x24 in `/`, kept 60 s without a client (`over` replaces fields). */
export function shTerminalSpec(over: Partial<TerminalSpec> = {}): TerminalSpec {
  return {
    tty: { argv: ['/bin/sh'], cols: 80, rows: 24 },
    shell: 'sh',
    env: {},
    cwd: '/',
    tag: null,
    createdAt: 0,
    idleMs: 60_000,
    keepWhileIdle: false,
    timeoutMs: 0,
    ...over,
  };
}

/** Registers the terminal conformance suite for `target` with node's test runner. */
export function runTerminalConformance(target: TerminalConformanceTarget): void {
  describe(`DriverTerminals conformance: ${target.name}`, () => {
    let driver: RuntimeDriver;
    let a: DriverTerminals;
    let b: DriverTerminals;
    let sandboxId: string;
    const spec = (over: Partial<TerminalSpec> = {}): TerminalSpec =>
      shTerminalSpec({
        tty: { argv: ['/bin/sh'], env: { TERM: 'xterm-256color' }, cols: 80, rows: 24 },
        env: { TERM: 'xterm-256color' },
        createdAt: 1_700_000_000_000,
        ...over,
      });
    const attach = async (view: DriverTerminals, id: string, c: TestTerminalClient, replay = false) => {
      c.attachment = await view.attach(sandboxId, id, c, { replay });
      return c.attachment;
    };
    before(async () => {
      const made = await target.make();
      driver = made.driver;
      a = made.views[0];
      b = made.views.at(-1)!;
      sandboxId = testId('term');
      await driver.create({ id: sandboxId, image: target.image, env: {}, volumes: [], limits: CONFORMANCE_LIMITS });
    });
    after(async () => {
      await a.closeSandbox(sandboxId, 'test over').catch(() => undefined);
      await driver.delete(sandboxId).catch(() => undefined);
      await target.destroy();
    });

    it('create: listed with its spec, pid and no client; get and list through every view; unknown ids', async () => {
      const t = await a.create(sandboxId, spec({ tag: 'x', env: { A: 'b' }, cwd: '/tmp' }));
      assert.match(t.id, /^term_[a-z2-7]{16}$/);
      assert.equal(t.sandboxId, sandboxId);
      assert.equal(t.status, 'active');
      assert.ok(Number.isInteger(t.pid) && t.pid > 0);
      assert.deepEqual(
        [t.shell, t.tag, t.env, t.cwd, t.argv, t.clientCount, t.createdAt, t.exit, t.keepWhileIdle],
        ['sh', 'x', { A: 'b' }, '/tmp', ['/bin/sh'], 0, 1_700_000_000_000, null, false],
      );
      assert.deepEqual(await b.get(sandboxId, t.id), t);
      assert.ok((await b.list(sandboxId)).some((x) => x.id === t.id));
      assert.equal(await b.get('other_sandbox', t.id), null, 'a terminal of another sandbox is not found');
      assert.equal(await b.get(sandboxId, 'term_aaaaaaaaaaaaaaaa'), null);
      assert.deepEqual(await b.list('other_sandbox'), []);
      await rejectsWith(b.attach('other_sandbox', t.id, new TestTerminalClient()), 'not_found');
      await rejectsWith(b.input(sandboxId, 'term_aaaaaaaaaaaaaaaa', Buffer.from('x')), 'not_found');
      await rejectsWith(b.resize(sandboxId, 'term_aaaaaaaaaaaaaaaa', 10, 10), 'not_found');
      await rejectsWith(b.signal(sandboxId, 'term_aaaaaaaaaaaaaaaa', 'SIGTERM'), 'not_found');
      await rejectsWith(b.delete(sandboxId, 'term_aaaaaaaaaaaaaaaa'), 'not_found');
      await a.delete(sandboxId, t.id);
    });

    it('clients through two views: ready, the first gets the prompt, same output, either types, resize, clientCount counts both', async () => {
      const t = await a.create(sandboxId, spec());
      const one = new TestTerminalClient();
      const two = new TestTerminalClient();
      const h1 = await attach(a, t.id, one);
      assert.deepEqual(await one.control('ready'), { type: 'ready', pid: t.pid, shell: 'sh' });
      await one.output(/[$#] /);
      const h2 = await attach(b, t.id, two);
      await two.control('ready');
      await eventually('clientCount 2', async () => (await a.get(sandboxId, t.id))?.clientCount === 2);
      h2.input('echo one-$TERM\r');
      await one.output(/one-xterm-256color/);
      await two.output(/one-xterm-256color/);
      h1.resize(132, 43);
      h1.resize(0, 5); // ignored
      h1.input('stty size\r');
      await two.output(/43 132/);
      await b.resize(sandboxId, t.id, 90, 20);
      await b.input(sandboxId, t.id, Buffer.from('stty size\r'));
      await one.output(/20 90/);
      const late = new TestTerminalClient();
      await attach(b, t.id, late, true);
      await late.output(/20 90/); // replayed
      late.attachment?.detach();
      h2.detach();
      await eventually('clientCount 1', async () => (await b.get(sandboxId, t.id))?.clientCount === 1);
      h1.input('exit 3\r');
      assert.deepEqual(await one.control('exit'), { type: 'exit', exitCode: 3, signal: null });
      assert.deepEqual(await one.closing(), { code: 1000, reason: 'shell exited' });
      assert.equal(two.closed, null, 'a detached client is not told');
      const gone = await b.get(sandboxId, t.id);
      assert.deepEqual([gone?.status, gone?.exit, gone?.clientCount], ['exited', { exitCode: 3, signal: null }, 0]);
      const toExited = new TestTerminalClient();
      await attach(b, t.id, toExited);
      assert.deepEqual(await toExited.closing(), { code: 1000, reason: 'shell exited' });
      assert.deepEqual(toExited.controls, [{ type: 'exit', exitCode: 3, signal: null }]);
      await a.delete(sandboxId, t.id);
    });

    it('signal and delete: a killed program reports its signal; delete hangs up (129 SIGHUP) and forgets', async () => {
      const t = await a.create(sandboxId, spec());
      const c = new TestTerminalClient();
      await attach(b, t.id, c);
      await c.control('ready');
      await a.signal(sandboxId, t.id, 'SIGKILL');
      assert.deepEqual(await c.control('exit'), { type: 'exit', exitCode: 137, signal: 'SIGKILL' });
      assert.equal((await c.closing()).code, 1000);
      const u = await a.create(sandboxId, spec());
      const d = new TestTerminalClient();
      await attach(b, u.id, d);
      await d.control('ready');
      await a.delete(sandboxId, u.id);
      assert.deepEqual(await d.control('exit'), { type: 'exit', exitCode: 129, signal: 'SIGHUP' });
      assert.deepEqual(await d.closing(), { code: 1000, reason: 'terminal deleted' });
      assert.equal(await b.get(sandboxId, u.id), null);
      await rejectsWith(b.delete(sandboxId, u.id), 'not_found');
      await a.delete(sandboxId, t.id);
    });

    it('a client that does not read is dropped (1013) past 4 MiB behind while another keeps up and gets everything', async () => {
      const t = await a.create(sandboxId, spec());
      const fast = new TestTerminalClient();
      const slow = new TestTerminalClient(false);
      const hf = await attach(a, t.id, fast);
      await attach(b, t.id, slow);
      await slow.control('ready');
      const lines = 12;
      hf.input(`${'head -c 1000000 /dev/zero\r'.repeat(lines)}echo done-$TERM\r`);
      const closed = await slow.closing();
      assert.equal(closed.code, 1013);
      assert.match(closed.reason, /too slow/);
      assert.ok(slow.received <= CLIENT_MAX_BUFFER_BYTES + (2 << 20), `the slow one got ${slow.received} bytes`);
      await fast.output(/done-xterm-256color/);
      assert.ok(fast.received >= lines * 1_000_000, `the fast one got ${fast.received} bytes`);
      await eventually('clientCount 1', async () => (await a.get(sandboxId, t.id))?.clientCount === 1);
      await a.delete(sandboxId, t.id);
    });

    it('idle cleanup after idleMs without a client, never while one is attached; keepWhileIdle keeps a running one', async () => {
      const idle = await a.create(sandboxId, spec({ idleMs: 200 }));
      const kept = await a.create(sandboxId, spec({ idleMs: 200, keepWhileIdle: true }));
      const watched = await a.create(sandboxId, spec({ idleMs: 200 }));
      const c = new TestTerminalClient();
      await attach(b, watched.id, c);
      await eventually('the idle one is gone', async () => (await a.get(sandboxId, idle.id)) === null);
      await new Promise((r) => setTimeout(r, 500));
      assert.notEqual(await a.get(sandboxId, watched.id), null, 'kept while a client is attached');
      assert.notEqual(await a.get(sandboxId, kept.id), null, 'kept while it runs');
      c.attachment?.detach();
      await eventually('cleaned up once the client left', async () => (await a.get(sandboxId, watched.id)) === null);
      await b.input(sandboxId, kept.id, Buffer.from('exit 0\r'));
      await eventually('cleaned up once it exited', async () => (await a.get(sandboxId, kept.id)) === null);
    });

    it('closeSandbox ends every terminal of the sandbox (exit, close 1000) and forgets them', async () => {
      const t1 = await a.create(sandboxId, spec());
      const t2 = await a.create(sandboxId, spec());
      const c1 = new TestTerminalClient();
      const c2 = new TestTerminalClient();
      await attach(a, t1.id, c1);
      await attach(b, t2.id, c2);
      await c2.control('ready');
      await b.closeSandbox(sandboxId, 'sandbox stopped');
      for (const c of [c1, c2]) {
        assert.equal((await c.control('exit')).type, 'exit');
        assert.deepEqual(await c.closing(), { code: 1000, reason: 'sandbox stopped' });
      }
      assert.deepEqual(await a.list(sandboxId), []);
    });

    it('input the program does not read pauses every client until it is read', { skip: !target.realPty }, async () => {
      const t = await a.create(sandboxId, spec());
      const c1 = new TestTerminalClient();
      const c2 = new TestTerminalClient();
      const h1 = await attach(a, t.id, c1);
      await attach(b, t.id, c2);
      await c2.control('ready');
      h1.input('sleep 30\r');
      await new Promise((r) => setTimeout(r, 200));
      const chunk = Buffer.alloc(64 * 1024, 0x61);
      for (let i = 0; i < 16; i++) h1.input(chunk);
      await c1.until('input paused', () => c1.inputPauses.includes('pause'));
      await c2.until('input paused', () => c2.inputPauses.includes('pause'));
      await a.signal(sandboxId, t.id, 'SIGKILL');
      await c1.until('input resumed', () => c1.inputPauses.includes('resume'));
      await c2.until('input resumed', () => c2.inputPauses.includes('resume'));
      await c2.control('exit');
      await a.delete(sandboxId, t.id);
    });
  });
}
