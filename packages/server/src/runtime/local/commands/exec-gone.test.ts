import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { SandboxdError } from '@sandboxd/protocol';
import { SandboxCommands } from './exec.js';
import type { OciRuntime } from './oci-runtime.js';

/*
 * Found by the chaos soak (test/soak/chaos.ts, runner kill -9): a sandbox whose container was
 * not running answered an exec with 200, exit 1 and crun's own "error opening file
 * .../crun/<id>/status" as the command's stderr, and a file upload with a 500. The agent
 * cannot start there (here: its runtime binary does not exist), and the container's state says
 * why: 409 conflict, and the runtime's exec is never run.
 */
describe('commands of a sandbox whose container is not running', () => {
  const target = { cid: 'sbx_gone', user: '0:0', env: [], workingDir: '/' };
  const make = (status: string | null) => {
    let execs = 0;
    const runtime = {
      argv: ['/nonexistent/crun-for-test'],
      state: async (id: string) => (status === null ? null : { id, pid: 1, status, bundle: '/x' }),
      exec: async () => {
        execs++;
        return { stdout: '', stderr: 'error opening file', exitCode: 1, truncated: false, timedOut: false };
      },
      execDetached: async () => {
        execs++;
        return 1;
      },
    } as unknown as OciRuntime;
    const c = new SandboxCommands({
      runtime: () => runtime,
      runDir: '/nonexistent',
      useAgent: true,
      cgroupProcs: () => [],
    });
    return { c, execs: () => execs };
  };
  const conflict = (runtime: string) => (e: unknown) =>
    e instanceof SandboxdError && e.kind === 'conflict' && (e.details as { runtime: string }).runtime === runtime;

  it('exec, background exec, streamed spawn and detached start answer 409 when the container is gone or stopped', async () => {
    for (const status of [null, 'stopped']) {
      const { c, execs } = make(status);
      const want = conflict(status ?? 'gone');
      await assert.rejects(c.exec(target, 'echo hi'), want);
      await assert.rejects(c.execBackground(target, 'sleep 1'), want);
      await assert.rejects(c.spawn(target, ['/bin/true']), want);
      await assert.rejects(c.startDetached(target, ['/bin/true'], { user: '0:0', env: [], cwd: '/' }), want);
      assert.equal(execs(), 0, "the runtime's exec was not run");
    }
  });

  it('a running container still gets the fallback (the runtime exec) when only its agent fails', async () => {
    const { c, execs } = make('running');
    assert.equal((await c.exec(target, 'echo hi')).exitCode, 1);
    assert.equal(execs(), 1);
    await assert.rejects(
      c.spawn(target, ['/bin/true']),
      (e: unknown) => e instanceof SandboxdError && e.kind === 'internal',
    );
  });
});
