/**
 * Black-box, real runtime: one runner and TWO api processes sharing one PostgreSQL database
 * (SANDBOXD_ROLE=runner / api), each with its own data dir. A port link is signed with a
 * secret kept in the database, so a link minted through api A opens the private port through
 * api B, and through an api started later with a fresh data dir (a restart that does not keep
 * its data dir, or a new replica). The proxy answers a valid link opened by a browser (GET)
 * with 302 and a cookie, an invalid one with 401, before reaching the sandbox.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { type Server, startServer } from './harness.js';
import { hget } from './proxy-support.js';
import { ReplicaPair, replicasSkip } from './replicas-support.js';

const IMAGE = 'local/busybox:latest';

describe('port links across api replicas on PostgreSQL (local runtime)', {
  skip: replicasSkip ?? false,
  timeout: 600_000,
}, () => {
  const pair = new ReplicaPair();
  let apiA: Server;
  let apiB: Server;
  let apiEnv: Record<string, string>;
  let key: string;
  let privId: string;

  before(async () => {
    ({ apiA, apiB, apiEnv, key } = await pair.start({ nodeName: 'links-node', image: IMAGE }));
    const c = await apiA.api('POST', '/api/v1/sandboxes', { key, body: { image: IMAGE, ports: { public: false } } });
    assert.equal(c.status, 201, c.text);
    privId = c.body.sandbox.id;
  });
  after(() => pair.stop());

  /** The proxy's answer to a browser opening `url` through server `s` (302: accepted; 401: refused). */
  const open = async (s: Server, url: string): Promise<number> => {
    const u = new URL(url);
    const host = `${u.hostname}:${s.port}`;
    return (await hget(s.port, host, { path: `${u.pathname}${u.search}` })).status;
  };
  const mint = async (s: Server): Promise<string> => {
    const l = await s.api('POST', `/api/v1/sandboxes/${privId}/ports/8000/link`, {
      key,
      body: { expiresInMs: 600_000 },
    });
    assert.equal(l.status, 200, l.text);
    return l.body.url as string;
  };

  it('a link signed by replica A opens the port through replica B, and the other way round', async () => {
    const fromA = await mint(apiA);
    const fromB = await mint(apiB);
    assert.equal(await open(apiA, fromA), 302);
    assert.equal(await open(apiB, fromA), 302, "B accepts A's link");
    assert.equal(await open(apiA, fromB), 302, "A accepts B's link");
    const tampered = fromA.replace(/sandboxd_token=(\d+)\./, (_m, exp) => `sandboxd_token=${Number(exp) + 1}.`);
    assert.equal(await open(apiB, tampered), 401, 'a changed link is refused');
  });

  it('links stay valid through a replica started later with a fresh data dir (a restart without its data dir)', async () => {
    const link = await mint(apiA);
    const apiC = await startServer({ env: apiEnv });
    try {
      assert.notEqual(apiC.dataDir, apiA.dataDir);
      assert.equal(await open(apiC, link), 302);
      assert.equal(await open(apiA, await mint(apiC)), 302, "A accepts the new replica's link");
    } finally {
      await apiC.stop();
    }
  });
});
