/**
 * Black-box, real runtime: sandboxd as teams that outgrow one box run it. One PostgreSQL,
 * three `api` replicas on loopback, and two `runner`s on two fake hosts (test/e2e/fake-host.ts:
 * each its own network namespace, bridge and subnet, reached over a veth, so a sandbox's
 * address routes only on its runner's host, as on two machines). Everything goes through the
 * replicas' public API; each runner is asked what it holds (its own `list`):
 * - sandboxes spread over both runners, and every replica serves every sandbox;
 * - a terminal opened through replica A is joined through replica B;
 * - 50 parallel creates spread over the three replicas, against a limit of 5, start exactly 5;
 * - the replica that reaps, killed with -9 amid creates, execs and terminals: clients that
 *   retry on another replica lose nothing, no sandbox is debited twice, none is orphaned,
 *   and reaping continues (an expiring sandbox is stopped);
 * - a runner killed with -9: its sandboxes turn `error` with their unused minutes refunded,
 *   new creates go to the other runner, and after its restart the records and the runners agree.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { startPostgres, type TestPostgres } from '../../packages/server/test/postgres.js';
import { TermClient, terminalUrl } from '../../packages/server/test/terminals.js';
import { chargesById, ledgerOf, sandboxesOf } from '../security/faults-support.js';
import { type FakeHost, makeFakeHost } from './fake-host.js';
import { IMAGE, newAccount, type Server, startServer, until } from './harness.js';
import { replicasSkip, runnerReady as readyWith } from './replicas-support.js';

const TOKEN = `e2e-scale-token-${randomBytes(8).toString('hex')}`;
const runnerAuth = { authorization: `Bearer ${TOKEN}` };
const runnerReady = readyWith(TOKEN);
/** A silent runner's sandboxes turn `error` after this long. */
const DOWN_MS = 3000;
/** The replicas' reaper lease (a dead reaper is replaced within it) and reconcile period. */
const LEASE_MS = 3000;
const RECONCILE_MS = 1500;

describe('three api replicas on PostgreSQL over two runners on two hosts (real runtime)', {
  skip: replicasSkip,
  timeout: 900_000,
}, () => {
  let pg: TestPostgres;
  const hosts: Record<'a' | 'b', FakeHost> = {} as never;
  const runners: Record<'a' | 'b', Server> = {} as never;
  const runnerDirs = {
    a: mkdtempSync(join(tmpdir(), 'sandboxd-e2e-scale-a-')),
    b: mkdtempSync(join(tmpdir(), 'sandboxd-e2e-scale-b-')),
  };
  const runnerEnv = (node: string) => ({
    SANDBOXD_ROLE: 'runner',
    SANDBOXD_RUNNER_TOKEN: TOKEN,
    SANDBOXD_NODE_NAME: node,
  });
  const startRunner = (r: 'a' | 'b', port?: number) =>
    startServer({ dataDir: runnerDirs[r], port, env: runnerEnv(`scale-${r}`), ready: runnerReady, on: hosts[r] });
  let replicas: Server[] = [];
  /** Every replica started, the killed one too: stop() gives its host slot and data dir back. */
  const allReplicas: Server[] = [];
  let key: string;

  /** Ids of the sandboxes runner `r` holds, as it says itself. */
  const held = async (r: 'a' | 'b'): Promise<string[]> => {
    const res = await fetch(`${runners[r].baseUrl}/runner/v1/list`, {
      method: 'POST',
      headers: { ...runnerAuth, 'content-type': 'application/json' },
      body: '{"args":[]}',
    });
    assert.equal(res.status, 200);
    return ((await res.json()) as { result: Array<{ id: string }> }).result.map((s) => s.id).sort();
  };
  /** Every sandbox the runners hold, and every record a runner must hold (started, paused, stopped with its layer). */
  const inStep = async (via: Server) => {
    const listed = await sandboxesOf(via, key);
    const kept = listed.filter((z) => ['started', 'paused', 'stopped'].includes(z.state)).map((z) => z.id);
    const onRunners = [...(await held('a')), ...(await held('b'))].sort();
    return { listed, agree: JSON.stringify(onRunners) === JSON.stringify(kept.sort()), onRunners, kept };
  };
  const create = async (via: Server, k = key, body: Record<string, unknown> = {}) =>
    via.api('POST', '/api/v1/sandboxes', { key: k, body: { image: IMAGE, timeoutMs: 1_800_000, ...body } });
  const exec = async (via: Server, id: string, command: string) => {
    const e = await via.api('POST', `/api/v1/sandboxes/${id}/exec`, { key, body: { command } });
    assert.equal(e.status, 200, e.text);
    return e.body as { stdout: string; exitCode: number };
  };

  before(async () => {
    pg = await startPostgres();
    hosts.a = await makeFakeHost();
    hosts.b = await makeFakeHost();
    runners.a = await startRunner('a');
    runners.b = await startRunner('b');
    const env = {
      SANDBOXD_ROLE: 'api',
      SANDBOXD_RUNNERS: `${runners.a.baseUrl},${runners.b.baseUrl}`,
      SANDBOXD_RUNNER_TOKEN: TOKEN,
      SANDBOXD_DATABASE_URL: await pg.createDatabase(),
      SANDBOXD_RUNNER_DOWN_MS: String(DOWN_MS),
      SANDBOXD_REAPER_LEASE_MS: String(LEASE_MS),
      SANDBOXD_RECONCILE_INTERVAL_MS: String(RECONCILE_MS),
    };
    // One after the other: the first one up migrates the database and takes the reaper lease.
    for (let i = 0; i < 3; i++) replicas.push(await startServer({ env }));
    allReplicas.push(...replicas);
    key = (await newAccount(replicas[0], { tokens: 1_000_000, plan: 'PRO' })).key;
  });
  after(async () => {
    for (const s of allReplicas) await s.stop().catch(() => {});
    for (const r of ['a', 'b'] as const) await runners[r]?.stop().catch(() => {});
    for (const r of ['a', 'b'] as const) await hosts[r]?.remove();
    await pg?.stop();
  });

  it('every replica reports both runners up', async () => {
    for (const s of replicas) {
      const h = await s.api('GET', '/healthz');
      assert.equal(h.status, 200, h.text);
      assert.deepEqual(
        h.body.runners.map((r: { node: string; state: string }) => [r.node, r.state]),
        [
          ['scale-a', 'up'],
          ['scale-b', 'up'],
        ],
      );
    }
  });

  const spread: string[] = [];
  it('spreads sandboxes over both runners; every replica serves every sandbox', async () => {
    for (let i = 0; i < 6; i++) {
      const c = await create(replicas[i % 3]);
      assert.equal(c.status, 201, c.text);
      spread.push(c.body.sandbox.id);
    }
    const [onA, onB] = [await held('a'), await held('b')];
    assert.deepEqual([...onA, ...onB].sort(), [...spread].sort(), 'each on exactly one runner');
    assert.ok(onA.length >= 2 && onB.length >= 2, `a holds ${onA.length}, b ${onB.length}`);
    for (const [i, id] of spread.entries()) {
      const via = replicas[(i + 1) % 3]; // not the replica that created it
      assert.equal((await exec(via, id, `echo from-${i}`)).stdout, `from-${i}\n`);
      const up = await via.api('PUT', `/api/v1/sandboxes/${id}/files/content?path=/tmp/f`, {
        key,
        raw: `file-${i}`,
        headers: { 'content-type': 'application/octet-stream' },
      });
      assert.equal(up.status, 200, up.text);
      const down = await replicas[(i + 2) % 3].api('GET', `/api/v1/sandboxes/${id}/files/content?path=/tmp/f`, {
        key,
      });
      assert.equal(down.text, `file-${i}`);
    }
  });

  it('a terminal opened through replica A is joined through replica B', async () => {
    const id = spread[0];
    const t = await replicas[0].api('POST', `/api/v1/sandboxes/${id}/terminals`, { key, body: {} });
    assert.equal(t.status, 201, t.text);
    const auth = { authorization: `Bearer ${key}` };
    const a = await TermClient.connect(terminalUrl(replicas[0].baseUrl, id, t.body.terminal.id), auth);
    const b = await TermClient.connect(terminalUrl(replicas[1].baseUrl, id, t.body.terminal.id), auth);
    try {
      await a.control('ready');
      await b.control('ready');
      b.type('echo "typed-on-b-$((6*7))"\r');
      await a.waitForOutput(/typed-on-b-42/);
      await b.waitForOutput(/typed-on-b-42/);
      const seen = await replicas[2].api('GET', `/api/v1/sandboxes/${id}/terminals/${t.body.terminal.id}`, { key });
      assert.equal(seen.body.clientCount, 2);
    } finally {
      a.close();
      b.close();
    }
  });

  it('50 parallel creates over three replicas against a limit of 5 start exactly 5', async () => {
    const { key: k } = await newAccount(replicas[1], { tokens: 1000, plan: 'FREE' });
    const results = await Promise.all(
      Array.from({ length: 50 }, (_, i) => create(replicas[i % 3], k, { timeoutMs: 120_000 })),
    );
    const statuses = results.map((r) => r.status);
    assert.equal(statuses.filter((s) => s === 201).length, 5, `statuses: ${statuses.join(',')}`);
    assert.ok(
      results.every((r) => r.status === 201 || (r.status === 403 && r.body.kind === 'concurrency')),
      `only 201 and 403 concurrency: ${statuses.join(',')}`,
    );
    const { balance, entries } = await ledgerOf(replicas[2], k);
    assert.equal(balance, 1000 - 5 * 2, 'exactly five creates debited (2 minutes each)');
    assert.equal([...chargesById(entries).keys()].length, 5);
    for (const r of results.filter((x) => x.status === 201))
      assert.equal((await replicas[0].api('DELETE', `/api/v1/sandboxes/${r.body.sandbox.id}`, { key: k })).status, 204);
  });

  it('the reaping replica killed with -9 amid creates, execs and terminals: retries on another lose nothing, nothing is debited twice or orphaned, reaping goes on', async (ctx) => {
    const victim = replicas[0]; // the first up: it took the reaper lease
    const [spare, third] = [replicas[1], replicas[2]];
    const auth = { authorization: `Bearer ${key}` };
    // A terminal attached through the victim, and a sandbox due to stop after the kill.
    const t = await victim.api('POST', `/api/v1/sandboxes/${spread[1]}/terminals`, { key, body: {} });
    assert.equal(t.status, 201, t.text);
    const viewer = await TermClient.connect(terminalUrl(victim.baseUrl, spread[1], t.body.terminal.id), auth);
    await viewer.control('ready');
    viewer.type('echo "shell-$$-end"\r');
    await viewer.waitForOutput(/shell-(\d+)-end/);
    const shell = /shell-(\d+)-end/.exec(viewer.text)![1];
    const expiring = await create(spare, key, { timeoutMs: 8000 });
    assert.equal(expiring.status, 201, expiring.text);

    /** `fn` on the victim; on a connection that fails (it died), the same again on the spare. */
    let retried = 0;
    const failover = async <T>(fn: (s: Server) => Promise<T>): Promise<T> => {
      try {
        return await fn(victim);
      } catch {
        retried++;
        return fn(spare);
      }
    };
    const created: string[] = [];
    const creates = (async () => {
      for (let i = 0; i < 12; i++) {
        const c = await failover((s) => create(s));
        assert.equal(c.status, 201, c.text);
        created.push(c.body.sandbox.id);
      }
    })();
    let execs = 0;
    const execLoop = (async () => {
      for (let i = 0; i < 40; i++) {
        const e = await failover((s) => exec(s, spread[2], `echo exec-${i}`));
        assert.equal(e.stdout, `exec-${i}\n`);
        execs++;
      }
    })();
    await until('some work done through the victim', async () => (execs >= 5 ? true : undefined));
    await victim.kill('SIGKILL');
    await Promise.all([creates, execLoop]);
    assert.equal(execs, 40, 'every exec answered, on one replica or the other');
    ctx.diagnostic(`${retried} calls retried on another replica; ${created.length} creates answered 201`);

    // The terminal's client reconnects through another replica: the same shell, its output kept.
    const closed = await viewer.closed;
    assert.notEqual(closed.code, 1000, 'the client saw its replica go, not the shell end');
    const again = await TermClient.connect(
      terminalUrl(spare.baseUrl, spread[1], t.body.terminal.id, '?replay=1'),
      auth,
    );
    try {
      await again.waitForOutput(/shell-\d+-end/); // replayed
      again.type('echo "back-$$-end"\r');
      await again.waitForOutput(new RegExp(`back-${shell}-end`));
    } finally {
      again.close();
    }

    // Reaping goes on: another replica took the lease and stops the expiring sandbox.
    await until(
      'the expiring sandbox stopped by another replica',
      async () =>
        (await third.api('GET', `/api/v1/sandboxes/${expiring.body.sandbox.id}`, { key })).body.sandbox.state ===
        'stopped'
          ? true
          : undefined,
      60_000,
    );

    // Creates the victim left half-done are finished by the reaper (error, fully refunded):
    // no record stays creating, each sandbox was debited once, what failed was refunded in full,
    // and the runners hold exactly the live records.
    const settled = await until(
      'no create left in progress and the runners in step with the records',
      async () => {
        const account = await spare.api('GET', '/api/v1/account', { key });
        const step = await inStep(spare);
        const started = step.listed.filter((z) => z.state === 'started').length;
        return account.body.usage.startedSandboxes === started && step.agree ? step.listed : undefined;
      },
      90_000,
    );
    for (const id of created)
      assert.ok(
        settled.some((z) => z.id === id && z.state === 'started'),
        `${id} kept`,
      );
    const { entries } = await ledgerOf(spare, key);
    const unanswered = settled.filter((z) => !created.includes(z.id) && !spread.includes(z.id));
    ctx.diagnostic(`records the clients never heard of: ${unanswered.map((z) => z.state).join(', ') || 'none'}`);
    for (const [id, ch] of chargesById(entries)) {
      assert.ok(ch.debits.length <= 1, `${id} debited ${ch.debits.length} times`);
      const z = settled.find((x) => x.id === id);
      if (z?.state === 'error' || !z)
        assert.ok(ch.refunds.length >= 1 || ch.debits.length === 0, `${id} (${z?.state ?? 'gone'}) refunded`);
    }
    replicas = [spare, third];
  });

  it('a runner killed with -9: its sandboxes error with refunds, creates go to the other, after its restart both sides agree', async () => {
    const [r1, r2] = replicas;
    const started = new Set((await sandboxesOf(r1, key)).filter((z) => z.state === 'started').map((z) => z.id));
    const onA = (await held('a')).filter((id) => started.has(id));
    assert.ok(onA.length > 0, 'runner a runs sandboxes');
    const port = runners.a.port;
    await runners.a.kill('SIGKILL');
    const states = await until(
      "runner a's sandboxes in error",
      async () => {
        const listed = await sandboxesOf(r1, key);
        const mine = listed.filter((z) => onA.includes(z.id));
        return mine.length === onA.length && mine.every((z) => z.state === 'error') ? mine : undefined;
      },
      60_000,
    );
    assert.equal(states.length, onA.length);
    const { entries } = await ledgerOf(r2, key);
    const charges = chargesById(entries);
    for (const id of onA) assert.equal(charges.get(id)?.refunds.length, 1, `${id} refunded once`);
    const h = await r2.api('GET', '/healthz');
    assert.deepEqual(
      h.body.runners.map((r: { node: string; state: string }) => [r.node, r.state]),
      [
        ['scale-a', 'down'],
        ['scale-b', 'up'],
      ],
    );
    const fresh: string[] = [];
    for (let i = 0; i < 3; i++) {
      const c = await create(replicas[i % 2]);
      assert.equal(c.status, 201, c.text);
      fresh.push(c.body.sandbox.id);
    }
    const onB = await held('b');
    for (const id of fresh) assert.ok(onB.includes(id), `${id} went to runner b`);

    runners.a = await startRunner('a', port);
    // What runner a adopted on its restart is deleted (their records are error); stopped ones keep their layer.
    await until('runner a back, in step with the records', async () => ((await inStep(r1)).agree ? true : undefined));
    for (const id of onA) assert.ok(!(await held('a')).includes(id), `${id} is gone from runner a`);
    const back = await until('runner a up again', async () => {
      const hh = await r1.api('GET', '/healthz');
      return hh.body.runners.every((r: { state: string }) => r.state === 'up') ? true : undefined;
    });
    assert.equal(back, true);
    const c = await create(r2);
    assert.equal(c.status, 201, c.text);
    assert.equal((await exec(r1, c.body.sandbox.id, 'echo after')).stdout, 'after\n');
  });
});
