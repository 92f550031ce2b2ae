/** ExecService's per-sandbox share of foreground execs in flight, over a scripted driver: the counting, not the commands. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { SandboxdError } from '@sandboxd/protocol';
import { ExecService } from './exec.js';

/** An ExecService whose foreground execs run until the test ends them (or fails them). */
function scripted(shares?: { execsPerSandbox: number }) {
  const running: Array<{ end: () => void; fail: () => void }> = [];
  let background = 0;
  const driver = {
    exec: () =>
      new Promise((resolve, reject) => {
        running.push({
          end: () => resolve({ stdout: 'ok\n', stderr: '', exitCode: 0, truncated: false }),
          fail: () => reject(new Error('agent gone')),
        });
      }),
  };
  const service = new ExecService(
    {
      driver: driver as never,
      clock: { now: () => 0 } as never,
      storage: { check: async () => undefined } as never,
      shares,
    },
    { get: async (_a: string, id: string) => ({ id, state: 'started', stopAt: Number.MAX_SAFE_INTEGER }) as never },
    {
      start: async () => {
        background++;
        return { pid: 100 + background } as never;
      },
    },
  );
  const run = (sandboxId: string, background = false) =>
    service.run('acc', { sandboxId, command: 'x', options: background ? { background: true } : {} });
  return { run, running };
}

const tick = () => new Promise((r) => setImmediate(r));

describe('ExecService shares', () => {
  it('foreground execs in flight: at most the share per sandbox (429 naming it); background execs and other sandboxes apart; an ended or failed exec frees its slot', async () => {
    const { run, running } = scripted({ execsPerSandbox: 2 });
    const first = run('sbx_a');
    const second = run('sbx_a');
    await tick();
    await assert.rejects(run('sbx_a'), (e: SandboxdError) => {
      assert.equal(e.kind, 'rate_limited');
      assert.match(e.message, /already has 2 foreground execs running/);
      assert.deepEqual(e.details, { limit: 'execsPerSandbox', max: 2 });
      return true;
    });
    assert.equal((await run('sbx_a', true)).pid, 101, 'a background exec is a tracked process, not counted here');
    const other = run('sbx_b');
    await tick();
    running[0].end();
    assert.equal((await first).stdout, 'ok\n');
    const third = run('sbx_a');
    await tick();
    running[1].fail();
    await assert.rejects(second, /agent gone/);
    const fourth = run('sbx_a');
    await tick();
    await assert.rejects(run('sbx_a'), { kind: 'rate_limited' });
    for (const r of running.slice(2)) r.end();
    await Promise.all([other, third, fourth]);
  });

  it('without shares the default (128) applies', async () => {
    const { run, running } = scripted();
    const all = Array.from({ length: 128 }, () => run('sbx_a'));
    await tick();
    await assert.rejects(run('sbx_a'), { kind: 'rate_limited', details: { limit: 'execsPerSandbox', max: 128 } });
    for (const r of running) r.end();
    await Promise.all(all);
  });
});
