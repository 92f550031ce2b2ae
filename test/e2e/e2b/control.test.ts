/**
 * E2B's control API with the unchanged npm `e2b` SDK against the real server (any runtime;
 * SANDBOXD_E2E_RUNTIME=local for real containers under crun): create from a template or a
 * raw image, connect, list with a metadata filter and pages, info, timeouts, kill, another
 * account's sandbox, sandboxd's plan limits and tokens, what sandboxd does not support, and
 * bad input sent by hand. Commands in the sandbox go through sandboxd's own exec API here:
 * the SDK's `commands` are the envd suites' business.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Sandbox, SandboxError, SandboxNotFoundError } from 'e2b';
import { newAccount } from '../harness.js';
import { type E2bEnv, startE2b } from './support.js';

/** The envd access token a handle got from create or connect (protected in the SDK's types). */
const tokenOf = (sbx: Sandbox): string | undefined => (sbx as unknown as { envdAccessToken?: string }).envdAccessToken;

/** A label of this run, so lists see only this run's sandboxes. */
const RUN = `run-${process.pid}-${Date.now()}`;

describe("E2B's control API through the e2b SDK", { timeout: 600_000 }, () => {
  let e: E2bEnv;
  let configDir: string;
  /** sandboxd's own exec, with the account's key. */
  let exec: (id: string, command: string) => Promise<{ stdout: string; exitCode: number }>;

  before(async () => {
    configDir = mkdtempSync(join(tmpdir(), 'sandboxd-e2b-config-'));
    const config = join(configDir, 'config.json');
    // ONE: a plan of one sandbox at a time, for the concurrency refusal.
    writeFileSync(config, JSON.stringify({ plans: { ONE: { concurrency: 1 } } }));
    e = await startE2b({ env: { SANDBOXD_CONFIG: config } });
    exec = async (id, command) => {
      const r = await e.s.api('POST', `/api/v1/sandboxes/${id}/exec`, { key: e.key, body: { command } });
      assert.equal(r.status, 200, r.text);
      return r.body;
    };
  });
  after(async () => {
    await e?.s.stop();
    rmSync(configDir, { recursive: true, force: true });
  });

  /** This account's sandboxes as sandboxd's own API lists them. */
  const ownIds = async (key = e.key) =>
    (
      (await e.s.api('GET', '/api/v1/sandboxes?state=started&limit=1000', { key })).body.sandboxes as { id: string }[]
    ).map((x) => x.id);

  it('a sandboxd key (sk_...) is E2B_API_KEY: 2.51.0 checks no key format', () => {
    assert.match(process.env.E2B_API_KEY ?? '', /^sk_/);
  });

  it('create from a template with envs, metadata and a timeout; the answer reaches envd; getInfo', async () => {
    const t0 = Date.now();
    const sbx = await Sandbox.create({
      template: 'base',
      envs: { FOO: 'bar baz', OTHER: 'x=y' },
      metadata: { suite: RUN, role: 'first' },
      timeoutMs: 120_000,
    });
    try {
      assert.match(sbx.sandboxId, /^sbx_[a-z2-7]{20}$/);
      assert.equal(sbx.sandboxDomain, new URL(e.s.baseUrl).host.replace('127.0.0.1', 'sandbox.localhost'));
      assert.ok(tokenOf(sbx), 'an access token for envd');
      assert.equal(await sbx.isRunning(), true, "envd's /health through the door");
      const env = await exec(sbx.sandboxId, 'echo -n "$FOO|$OTHER"');
      assert.equal(env.stdout, 'bar baz|x=y');

      const info = await sbx.getInfo();
      assert.equal(info.sandboxId, sbx.sandboxId);
      assert.equal(info.templateId, 'base');
      assert.equal(info.name, 'base');
      assert.deepEqual(info.metadata, { suite: RUN, role: 'first' });
      assert.equal(info.state, 'running');
      assert.equal(info.cpuCount, 1);
      assert.equal(info.memoryMB, 2048);
      assert.equal(info.envdVersion, '0.6.3');
      assert.deepEqual(info.volumeMounts, []);
      assert.ok(info.startedAt.getTime() >= t0 - 1000 && info.startedAt.getTime() <= Date.now());
      assert.equal(info.endAt.getTime() - info.startedAt.getTime(), 120_000);
      assert.deepEqual(info.lifecycle, { onTimeout: 'kill', autoResume: false });
    } finally {
      await sbx.kill();
    }
  });

  it('create from a raw image; connect gives a working handle and only extends the lifetime', async () => {
    const sbx = await Sandbox.create('local/busybox:latest', { timeoutMs: 60_000 });
    try {
      assert.equal((await exec(sbx.sandboxId, 'echo hi')).stdout, 'hi\n');
      const info = await sbx.getInfo();
      assert.equal(info.templateId, 'local/busybox:latest');
      const again = await Sandbox.connect(sbx.sandboxId);
      assert.equal(again.sandboxId, sbx.sandboxId);
      assert.equal(tokenOf(again), tokenOf(sbx));
      assert.equal(await again.isRunning(), true);
      const same = await again.getInfo();
      assert.ok(same.endAt.getTime() >= info.endAt.getTime(), 'never shortened');
      const longer = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 600_000 });
      const after = await longer.getInfo();
      assert.ok(after.endAt.getTime() >= Date.now() + 590_000, `${after.endAt.toISOString()}`);
      await Sandbox.connect(sbx.sandboxId, { timeoutMs: 1000 });
      assert.equal((await sbx.getInfo()).endAt.getTime(), after.endAt.getTime(), 'a shorter connect changes nothing');
    } finally {
      await sbx.kill();
    }
  });

  it('list filters by metadata and pages (limit 2 over 3)', async () => {
    const label = `${RUN}-list`;
    const made = await Promise.all(
      [0, 1, 2].map((i) =>
        Sandbox.create('local/busybox:latest', { metadata: { suite: label, i: String(i) }, timeoutMs: 120_000 }),
      ),
    );
    const other = await Sandbox.create('local/busybox:latest', {
      metadata: { suite: `${label}-other` },
      timeoutMs: 60_000,
    });
    try {
      const paginator = Sandbox.list({ query: { metadata: { suite: label } }, limit: 2 });
      assert.equal(paginator.hasNext, true);
      const first = await paginator.nextItems();
      assert.equal(first.length, 2);
      assert.equal(paginator.hasNext, true, 'x-next-token said more remain');
      const second = await paginator.nextItems();
      assert.equal(second.length, 1);
      assert.equal(paginator.hasNext, false);
      const seen = [...first, ...second];
      assert.deepEqual(seen.map((x) => x.sandboxId).sort(), made.map((x) => x.sandboxId).sort());
      for (const x of seen) {
        assert.equal(x.state, 'running');
        assert.equal(x.templateId, 'local/busybox:latest');
        assert.equal(x.metadata.suite, label);
        assert.ok(x.endAt > x.startedAt);
      }
      const one = await Sandbox.list({ query: { metadata: { suite: label, i: '1' } } }).nextItems();
      assert.deepEqual(
        one.map((x) => x.sandboxId),
        [made[1].sandboxId],
      );
      const paused = await Sandbox.list({ query: { metadata: { suite: label }, state: ['paused'] } }).nextItems();
      assert.deepEqual(paused, [], 'none paused (pause.test.ts pauses some)');
    } finally {
      await Promise.all([...made, other].map((x) => x.kill()));
    }
  });

  it("setTimeout moves endAt; past the plan's lifetime it is refused with the plan's message", async () => {
    const sbx = await Sandbox.create('local/busybox:latest', { timeoutMs: 60_000 });
    try {
      const before = await sbx.getInfo();
      await sbx.setTimeout(300_000);
      const later = await sbx.getInfo();
      assert.ok(later.endAt.getTime() > before.endAt.getTime() + 200_000);
      await sbx.setTimeout(30_000);
      assert.ok((await sbx.getInfo()).endAt.getTime() < later.endAt.getTime(), 'set, not only extended');
      await assert.rejects(sbx.setTimeout(2 * 3_600_000), (err: Error) => {
        assert.ok(err instanceof SandboxError, String(err));
        assert.match(err.message, /^400: timeoutMs must be at most \d+ now: plan FREE allows 3600000 ms from creation/);
        return true;
      });
    } finally {
      await sbx.kill();
    }
  });

  it('kill: isRunning turns false; Sandbox.kill(id) is false the second time; info is not found', async () => {
    const sbx = await Sandbox.create('local/busybox:latest', { timeoutMs: 60_000 });
    assert.equal(await sbx.isRunning(), true);
    await sbx.kill();
    assert.equal(await sbx.isRunning(), false);
    assert.equal(await Sandbox.kill(sbx.sandboxId), false);
    await assert.rejects(sbx.getInfo(), SandboxNotFoundError);
    await assert.rejects(Sandbox.connect(sbx.sandboxId), SandboxNotFoundError);
    assert.ok(!(await ownIds()).includes(sbx.sandboxId));

    const other = await Sandbox.create('local/busybox:latest', { timeoutMs: 60_000 });
    assert.equal(await Sandbox.kill(other.sandboxId), true);
    assert.equal(await Sandbox.kill(other.sandboxId), false);
  });

  it("another account's sandbox does not exist for this key", async () => {
    const stranger = await newAccount(e.s, { tokens: 10_000 });
    const sbx = await Sandbox.create('local/busybox:latest', { timeoutMs: 60_000 });
    try {
      const as = { apiKey: stranger.key };
      await assert.rejects(Sandbox.connect(sbx.sandboxId, as), SandboxNotFoundError);
      await assert.rejects(Sandbox.getInfo(sbx.sandboxId, as), SandboxNotFoundError);
      await assert.rejects(Sandbox.setTimeout(sbx.sandboxId, 10_000, as), SandboxNotFoundError);
      assert.equal(await Sandbox.kill(sbx.sandboxId, as), false);
      assert.deepEqual(await Sandbox.list(as).nextItems(), []);
      assert.equal(await sbx.isRunning(), true, 'untouched');
    } finally {
      await sbx.kill();
    }
  });

  it("sandboxd's concurrency limit and tokens, with sandboxd's messages", async () => {
    const one = await newAccount(e.s, { tokens: 10_000, plan: 'ONE' });
    const first = await Sandbox.create('local/busybox:latest', { apiKey: one.key, timeoutMs: 60_000 });
    try {
      await assert.rejects(
        Sandbox.create('local/busybox:latest', { apiKey: one.key, timeoutMs: 60_000 }),
        (err: Error) => {
          assert.ok(err instanceof SandboxError);
          assert.equal(err.message, '403: Concurrency limit reached: 1 sandboxes running');
          return true;
        },
      );
    } finally {
      await first.kill();
    }
    const poor = await newAccount(e.s, { tokens: 5 });
    await assert.rejects(
      Sandbox.create('local/busybox:latest', { apiKey: poor.key, timeoutMs: 600_000 }),
      (err: Error) => {
        assert.equal(err.message, '402: Insufficient tokens: 10 needed, 5 available');
        return true;
      },
    );
    assert.deepEqual(await ownIds(poor.key), []);
  });

  it('an unknown template or image is a clear 404', async () => {
    await assert.rejects(Sandbox.create('local/no-such-image:1'), (err: Error) => {
      assert.match(err.message, /^404: Template local\/no-such-image:1 not found/);
      return true;
    });
  });

  it('what sandboxd does not support is refused saying so', async () => {
    const sbx = await Sandbox.create('local/busybox:latest', { timeoutMs: 60_000 });
    try {
      await assert.rejects(sbx.pause({ keepMemory: false }), /not support filesystem-only pauses/);
      await assert.rejects(sbx.createSnapshot(), /not support snapshots/);
      await assert.rejects(Sandbox.listSnapshots().nextItems(), /not support snapshots/);
      await assert.rejects(sbx.getMetrics(), /not support sandbox metrics/);
      assert.equal(await sbx.isRunning(), true, 'still running');
    } finally {
      await sbx.kill();
    }
    const before = await ownIds();
    await assert.rejects(
      Sandbox.create('local/busybox:latest', { lifecycle: { onTimeout: { action: 'pause', keepMemory: false } } }),
      /501: sandboxd does not support filesystem-only pauses/,
    );
    await assert.rejects(
      Sandbox.create('local/busybox:latest', { volumeMounts: { '/data': 'vol' } }),
      /not support E2B volumes/,
    );
    await assert.rejects(
      Sandbox.create('local/busybox:latest', { network: { allowOut: ['1.1.1.1'] } }),
      /not support egress rules/,
    );
    assert.deepEqual(await ownIds(), before, 'nothing created');
  });

  it('bad input sent by hand: 400 naming the field, nothing created', async () => {
    const before = await ownIds();
    const post = (body: unknown) =>
      fetch(`${e.s.baseUrl}/e2b/v2/sandboxes`, {
        method: 'POST',
        headers: { 'x-api-key': e.key, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    for (const [body, field] of [
      [{ templateID: 'base', timeout: -1 }, '/timeout'],
      [{ templateID: 'base', timeout: 2.5 }, '/timeout'],
      [{ templateID: 'base', metadata: { a: 1 } }, '/metadata'],
      [{ templateID: 'base', envVars: { A: true } }, '/envVars'],
      [{ templateID: '' }, '/templateID'],
      [{ timeout: 60 }, '/templateID'],
    ] as const) {
      const r = await post(body);
      assert.equal(r.status, 400);
      const b = (await r.json()) as { code: number; message: string };
      assert.equal(b.code, 400);
      assert.ok(b.message.includes(field), `${b.message} names ${field}`);
    }
    const list = await fetch(`${e.s.baseUrl}/e2b/v2/sandboxes?limit=0`, { headers: { 'x-api-key': e.key } });
    assert.equal(list.status, 400);
    assert.match(((await list.json()) as { message: string }).message, /^limit /);
    assert.deepEqual(await ownIds(), before);
  });
});
