/**
 * The E2B door is bounded by the same per-sandbox shares as the native API (both go through
 * one service layer): E2B's unchanged SDK in a noisy sandbox meets the readers' share
 * (background commands), the terminals' share (PTYs) and the watches' share (shared with
 * native watches), each refused with sandboxd's message; a neighbour sandbox of the same
 * account runs a command, opens a PTY and watches; released, the noisy one works again.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { type CommandHandle, Sandbox } from 'e2b';
import WebSocket from 'ws';
import { type E2bEnv, startE2b } from '../e2e/e2b/support.js';
import { RUNTIME, until } from '../e2e/harness.js';

const IMAGE = 'local/debian:bookworm';
const SHARE = { FOLLOWERS_PER_SANDBOX: 3, TERMINALS_PER_SANDBOX: 2, WATCHES_PER_SANDBOX: 2 };

describe('fair shares through the E2B door', {
  skip: RUNTIME !== 'local' && 'needs SANDBOXD_E2E_RUNTIME=local',
  timeout: 600_000,
}, () => {
  let env: E2bEnv;
  let noisy: Sandbox;
  let neighbour: Sandbox;
  const closers: Array<() => unknown> = [];

  before(async () => {
    const e: Record<string, string> = {};
    for (const [k, v] of Object.entries(SHARE)) e[`SANDBOXD_FAIR_SHARE_${k}`] = String(v);
    env = await startE2b({ env: e });
    const ids = await Promise.all(
      [0, 1].map(async () => {
        const c = await env.s.api('POST', '/api/v1/sandboxes', {
          key: env.key,
          body: { image: IMAGE, timeoutMs: 600_000 },
        });
        assert.equal(c.status, 201, c.text);
        return c.body.sandbox.id as string;
      }),
    );
    noisy = await Sandbox.connect(ids[0]);
    neighbour = await Sandbox.connect(ids[1]);
  });
  after(async () => {
    for (const c of closers.splice(0)) await Promise.resolve(c()).catch(() => undefined);
    await env?.s.stop();
  });

  it('background commands hold readers: past the sandbox share the next command is refused; the neighbour runs one; a kill frees a slot', async () => {
    const held: CommandHandle[] = [];
    for (let i = 0; i < SHARE.FOLLOWERS_PER_SANDBOX; i++) {
      const h = await noisy.commands.run('sleep 600', { background: true, timeoutMs: 0 });
      closers.push(() => h.kill());
      held.push(h);
    }
    await assert.rejects(noisy.commands.run('echo never'), (e: Error) => {
      assert.match(e.message, new RegExp(`already have ${SHARE.FOLLOWERS_PER_SANDBOX} readers`));
      return true;
    });
    assert.equal((await neighbour.commands.run('echo neighbour')).stdout, 'neighbour\n');
    assert.equal(await held[0].kill(), true);
    const again = await until('a reader slot of the noisy sandbox', async () => {
      try {
        return await noisy.commands.run('echo again');
      } catch {
        return undefined;
      }
    });
    assert.equal(again.stdout, 'again\n');
    for (const h of held.slice(1)) await h.kill();
  });

  it('PTYs are terminals: past the share the next is refused; the neighbour opens one; a kill frees a slot', async () => {
    const pty = () => noisy.pty.create({ cols: 80, rows: 24, timeoutMs: 0, onData: () => undefined });
    const mine: CommandHandle[] = [];
    for (let i = 0; i < SHARE.TERMINALS_PER_SANDBOX; i++) {
      const p = await pty();
      closers.push(() => p.kill());
      mine.push(p);
    }
    await assert.rejects(pty(), (e: Error) => {
      assert.match(e.message, new RegExp(`at most ${SHARE.TERMINALS_PER_SANDBOX} terminals`));
      return true;
    });
    const n = await neighbour.pty.create({ cols: 80, rows: 24, timeoutMs: 0, onData: () => undefined });
    assert.ok(n.pid > 0);
    await neighbour.pty.kill(n.pid);
    await noisy.pty.kill(mine[0].pid);
    // The killed one is an exited terminal without a client: evicted by the next create.
    const next = await until('a terminal slot of the noisy sandbox', async () => {
      try {
        return await pty();
      } catch {
        return undefined;
      }
    });
    for (const p of [...mine.slice(1), next]) await noisy.pty.kill(p.pid);
  });

  it('watches: E2B watchDir and native watches share the sandbox share; the neighbour watches', async () => {
    await noisy.files.makeDir('/tmp/w');
    const native = await new Promise<WebSocket>((resolve, reject) => {
      const ws = new WebSocket(
        `${env.s.baseUrl.replace(/^http/, 'ws')}/api/v1/sandboxes/${noisy.sandboxId}/files/watch?path=/tmp/w`,
        { headers: { authorization: `Bearer ${env.key}` } },
      );
      ws.once('open', () => resolve(ws));
      ws.once('error', reject);
    });
    closers.push(() => native.close());
    const w1 = await noisy.files.watchDir('/tmp/w', () => undefined);
    closers.push(() => w1.stop());
    await assert.rejects(
      noisy.files.watchDir('/tmp/w', () => undefined),
      (e: Error) => {
        assert.match(e.message, new RegExp(`${SHARE.WATCHES_PER_SANDBOX} watches`));
        return true;
      },
    );
    await neighbour.files.makeDir('/tmp/w');
    const n = await neighbour.files.watchDir('/tmp/w', () => undefined);
    await n.stop();
    native.close();
    const w2 = await until('a watch slot of the noisy sandbox', async () => {
      try {
        return await noisy.files.watchDir('/tmp/w', () => undefined);
      } catch {
        return undefined;
      }
    });
    await w2.stop();
    await w1.stop();
  });
});
