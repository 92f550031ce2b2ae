/**
 * E2B's secrets and network transform rules with the unchanged npm `e2b` SDK against the real
 * server (any runtime; SANDBOXD_E2E_RUNTIME=local for real containers): `Secret.create`,
 * `list`, `getInfo`, `exists`, `update`, `destroy` over the account's secrets (names
 * lower-cased, name-derived ids, metadata kept), and `Sandbox.create` / `updateNetwork` with
 * `network.rules` whose headers hold `Secret.fill(NAME)` mapped onto injection rules, shown
 * back by `getInfo`. The value never shows in an answer, the sandbox's environment or the
 * server's log. The proxy's injection itself: the proxy's suites.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { ALL_TRAFFIC, Sandbox, Secret, SecretError } from 'e2b';
import { RUNTIME } from '../harness.js';
import { type E2bEnv, startE2b } from './support.js';

const VALUE = `sk-e2b-sdk-${process.pid}-VALUE-0123456789`;

describe("E2B's secrets and network.rules through the e2b SDK", { timeout: 600_000 }, () => {
  let e: E2bEnv;
  const made: Sandbox[] = [];
  before(async () => {
    e = await startE2b();
  });
  after(async () => {
    for (const s of made) await s.kill().catch(() => {});
    await e?.s.stop();
  });

  it('Secret.create, list, getInfo, exists, update and destroy map onto the account secrets', async () => {
    const s = await Secret.create('OpenAI-Key', VALUE, { metadata: { team: 'ml' } });
    assert.equal(s.name, 'openai-key');
    assert.equal(s.version, 1);
    assert.deepEqual(s.metadata, { team: 'ml' });
    assert.match(s.secretId, /^sec_[0-9a-f]+$/);
    // The same secret through sandboxd's own API.
    const own = await e.s.api('GET', '/api/v1/secrets/openai-key', { key: e.key });
    assert.equal(own.status, 200, own.text);
    assert.ok(!own.text.includes(VALUE));
    await assert.rejects(Secret.create('openai-key', VALUE), (err: unknown) => {
      assert.ok(err instanceof SecretError, String(err));
      assert.ok(!String((err as Error).message).includes(VALUE));
      return true;
    });
    await Secret.create('gh-token', 'ghp_example');

    const names: string[] = [];
    const pages = Secret.list({ limit: 1 });
    for (let i = 0; pages.hasNext && i < 10; i++) names.push(...(await pages.nextItems()).map((x) => x.name));
    assert.deepEqual(names, ['gh-token', 'openai-key']);
    assert.equal((await Secret.getInfo(s.secretId)).name, 'openai-key');
    assert.equal((await Secret.getInfo('OPENAI-KEY')).secretId, s.secretId);
    assert.equal(await Secret.exists('openai-key'), true);
    assert.equal(await Secret.exists('nope'), false);

    const u = await Secret.update('openai-key', `${VALUE}-2`, { metadata: { team: 'infra' } });
    assert.equal(u.version, 2);
    assert.deepEqual(u.metadata, { team: 'infra' });
    assert.equal(await Secret.destroy('gh-token'), true);
    assert.equal(await Secret.destroy('gh-token'), false);
  });

  it('Sandbox.create with allowOut and rules holding Secret.fill(NAME): injection rules, a placeholder env, getInfo shows them; updateNetwork replaces them', async () => {
    const rules = {
      'api.example.com': [{ transform: { headers: { Authorization: `Bearer ${Secret.fill('openai-key')}` } } }],
    };
    const sbx = await Sandbox.create('base', {
      timeoutMs: 120_000,
      network: { allowOut: ['api.example.com'], denyOut: [ALL_TRAFFIC], rules },
    });
    made.push(sbx);
    const own = await e.s.api('GET', `/api/v1/sandboxes/${sbx.sandboxId}`, { key: e.key });
    const secrets = own.body.sandbox.network.secrets;
    assert.deepEqual(
      secrets.map(({ placeholder, ...r }: { placeholder: string }) => r),
      [{ secret: 'openai-key', domains: ['api.example.com'], header: 'Authorization', format: 'Bearer {value}' }],
    );
    assert.match(secrets[0].placeholder, /^sbx-secret-[0-9a-f]{24}$/);
    const info = await Sandbox.getInfo(sbx.sandboxId);
    assert.deepEqual(info.network?.rules, rules);
    assert.deepEqual(info.network?.allowOut, ['api.example.com']);
    assert.deepEqual(info.network?.denyOut, [ALL_TRAFFIC]);

    if (RUNTIME === 'local') {
      const r = await e.s.api('POST', `/api/v1/sandboxes/${sbx.sandboxId}/exec`, {
        key: e.key,
        body: { command: 'echo "$openai_key"; env' },
      });
      assert.equal(r.status, 200, r.text);
      assert.equal(r.body.stdout.split('\n')[0], secrets[0].placeholder);
      assert.ok(!r.body.stdout.includes(VALUE), 'the value is not in the sandbox environment');
    }

    const next = { 'api.example.com': [{ transform: { headers: { 'X-Api-Key': Secret.fill('openai-key') } } }] };
    await sbx.updateNetwork({ allowOut: ['api.example.com'], denyOut: [ALL_TRAFFIC], rules: next });
    assert.deepEqual((await Sandbox.getInfo(sbx.sandboxId)).network?.rules, next);
    const again = await e.s.api('GET', `/api/v1/sandboxes/${sbx.sandboxId}`, { key: e.key });
    assert.equal(again.body.sandbox.network.secrets[0].placeholder, secrets[0].placeholder, 'placeholder kept');
    await sbx.updateNetwork({ denyOut: [ALL_TRAFFIC] });
    assert.equal((await Sandbox.getInfo(sbx.sandboxId)).network?.rules, undefined, 'omitted rules are cleared');
  });

  it('a fixed header, two references or an unknown secret is refused naming it; the value is never logged', async () => {
    const at = (headers: Record<string, string>) => ({
      timeoutMs: 60_000,
      network: {
        allowOut: ['api.example.com'],
        denyOut: [ALL_TRAFFIC],
        rules: { 'api.example.com': [{ transform: { headers } }] },
      },
    });
    for (const [headers, text] of [
      [{ 'X-Fixed': 'plain' }, /sandboxd injects secrets only/],
      [{ H: `${Secret.fill('openai-key')}${Secret.fill('openai-key')}` }, /more than one/],
      [{ H: Secret.fill('missing') }, /missing/],
    ] as const) {
      await assert.rejects(Sandbox.create('base', at(headers)), (err: unknown) => {
        assert.match(String((err as Error).message), text);
        return true;
      });
    }
    const own = await e.s.api('GET', '/api/v1/sandboxes?state=started&limit=1000', { key: e.key });
    assert.equal(own.body.sandboxes.length, made.length, 'refused creates make nothing');
    assert.ok(!e.s.stdout().includes(VALUE), 'the value is not in the server log');
  });
});
