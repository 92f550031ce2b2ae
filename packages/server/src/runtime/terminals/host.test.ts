import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { SandboxdError } from '@sandboxd/protocol';
import pino from 'pino';
import { FakeDriver } from '../fake/driver.js';
import { CONFORMANCE_LIMITS } from '../conformance.js';
import type { PtyProcess, TtyOptions } from '../pty.js';
import { runTerminalConformance, shTerminalSpec, TestTerminalClient } from './conformance.js';
import { TerminalHost } from './host.js';
import { MAX_CLIENTS_PER_TERMINAL, MAX_TERMINALS_PER_SANDBOX } from './types.js';

const log = pino({ level: 'silent' });

let fake: FakeDriver | null = null;
runTerminalConformance({
  name: 'TerminalHost over the fake driver',
  image: 'local/busybox:latest',
  realPty: false,
  make: async () => {
    fake = new FakeDriver();
    await fake.init();
    const host = new TerminalHost({ execTty: (id, o) => fake!.execTty(id, o), log });
    return { driver: fake, views: [host] };
  },
  destroy: async () => {
    await fake?.close();
  },
});

async function withSandbox(
  fn: (host: TerminalHost, id: string, driver: FakeDriver) => Promise<void>,
  shares?: { terminalsPerSandbox: number; clientsPerTerminal: number },
): Promise<void> {
  const driver = new FakeDriver();
  await driver.init();
  const id = `sbx_host_${process.pid}_${Math.random().toString(36).slice(2, 8)}`;
  await driver.create({ id, image: 'local/busybox:latest', env: {}, volumes: [], limits: CONFORMANCE_LIMITS });
  const host = new TerminalHost({ execTty: (sid, o) => driver.execTty(sid, o), log, shares });
  try {
    await fn(host, id, driver);
  } finally {
    host.closeAll('test over');
    await driver.close();
  }
}

describe('TerminalHost', () => {
  it(`holds at most ${MAX_TERMINALS_PER_SANDBOX} terminals per sandbox (creates in flight count); the oldest exited one without a client is evicted then`, async () => {
    await withSandbox(async (host, id) => {
      const made = await Promise.all(
        Array.from({ length: MAX_TERMINALS_PER_SANDBOX }, () => host.create(id, shTerminalSpec())),
      );
      await assert.rejects(host.create(id, shTerminalSpec()), {
        kind: 'conflict',
        details: { limit: MAX_TERMINALS_PER_SANDBOX },
      });
      await host.signal(id, made[5].id, 'SIGKILL');
      for (let i = 0; i < 200 && (await host.get(id, made[5].id))?.status !== 'exited'; i++)
        await new Promise((r) => setTimeout(r, 5));
      const next = await host.create(id, shTerminalSpec());
      assert.equal(await host.get(id, made[5].id), null, 'the oldest exited one without a client was evicted');
      assert.equal((await host.list(id)).length, MAX_TERMINALS_PER_SANDBOX);
      assert.ok((await host.list(id)).some((t) => t.id === next.id));
      assert.equal(host.size, MAX_TERMINALS_PER_SANDBOX);
    });
  });

  it(`at most ${MAX_CLIENTS_PER_TERMINAL} clients per terminal (429 naming it); other terminals are apart; a client that leaves frees its slot; an exited terminal's clients are not counted`, async () => {
    await withSandbox(async (host, id) => {
      const [a, b] = [await host.create(id, shTerminalSpec()), await host.create(id, shTerminalSpec())];
      const attached = [];
      for (let i = 0; i < MAX_CLIENTS_PER_TERMINAL; i++)
        attached.push(await host.attach(id, a.id, new TestTerminalClient()));
      await assert.rejects(host.attach(id, a.id, new TestTerminalClient()), (e: SandboxdError) => {
        assert.equal(e.kind, 'rate_limited');
        assert.match(e.message, new RegExp(`already has ${MAX_CLIENTS_PER_TERMINAL} clients`));
        assert.deepEqual(e.details, { limit: 'clientsPerTerminal', max: MAX_CLIENTS_PER_TERMINAL });
        return true;
      });
      assert.equal((await host.get(id, a.id))?.clientCount, MAX_CLIENTS_PER_TERMINAL);
      await host.attach(id, b.id, new TestTerminalClient());
      attached[0].detach();
      await host.attach(id, a.id, new TestTerminalClient());
      await host.signal(id, a.id, 'SIGKILL');
      for (let i = 0; i < 200 && (await host.get(id, a.id))?.status !== 'exited'; i++)
        await new Promise((r) => setTimeout(r, 5));
      const late = new TestTerminalClient();
      await host.attach(id, a.id, late);
      assert.equal(late.controls.at(-1)?.type, 'exit', 'an exited terminal answers exit, whatever its clients');
    });
  });

  it('the shares are configurable: terminals per sandbox (409 naming it) and clients per terminal', async () => {
    await withSandbox(
      async (host, id) => {
        const t = await host.create(id, shTerminalSpec());
        await host.create(id, shTerminalSpec());
        await assert.rejects(host.create(id, shTerminalSpec()), (e: SandboxdError) => {
          assert.equal(e.kind, 'conflict');
          assert.match(e.message, /at most 2 terminals/);
          return true;
        });
        await host.attach(id, t.id, new TestTerminalClient());
        await assert.rejects(host.attach(id, t.id, new TestTerminalClient()), {
          kind: 'rate_limited',
          details: { limit: 'clientsPerTerminal', max: 1 },
        });
      },
      { terminalsPerSandbox: 2, clientsPerTerminal: 1 },
    );
  });

  it('a create still starting when its sandbox is closed ends at once (conflict) instead of being held', async () => {
    let release: (() => void) | null = null;
    const driver = new FakeDriver();
    await driver.init();
    const id = `sbx_slow_${process.pid}`;
    await driver.create({ id, image: 'local/busybox:latest', env: {}, volumes: [], limits: CONFORMANCE_LIMITS });
    const host = new TerminalHost({
      execTty: async (sid: string, o: TtyOptions): Promise<PtyProcess> => {
        await new Promise<void>((r) => (release = r));
        return driver.execTty(sid, o);
      },
      log,
    });
    const creating = host.create(id, shTerminalSpec());
    await new Promise((r) => setImmediate(r));
    await host.closeSandbox(id, 'sandbox stopped');
    release!();
    await assert.rejects(creating, { kind: 'conflict' });
    assert.deepEqual(await host.list(id), []);
    await driver.close();
  });

  it('closeAll (shutdown) sends exit and closes every client with 1001', async () => {
    await withSandbox(async (host, id) => {
      const t = await host.create(id, shTerminalSpec());
      const c = new TestTerminalClient();
      await host.attach(id, t.id, c);
      host.closeAll();
      assert.deepEqual(c.controls.at(-1), { type: 'exit', exitCode: 129, signal: 'SIGHUP' });
      assert.deepEqual(c.closed, { code: 1001, reason: 'server shutting down' });
      assert.equal(host.size, 0);
    });
  });
});
