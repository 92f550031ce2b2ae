import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { FrontDoor, KEEP_ALIVE_TIMEOUT_MS } from './front-door.js';
import { makeTestApp } from '../../test/app.js';

describe('FrontDoor server', () => {
  it("keeps idle connections fastify's 72 s, not node's 5 s (the load suite saw ECONNRESET on reused connections)", async () => {
    const t = await makeTestApp();
    try {
      assert.equal(t.app.http.server.keepAliveTimeout, 72_000);
    } finally {
      await t.close();
    }
    const fd = new FrontDoor();
    assert.equal(fd.serverFactory(() => {}).keepAliveTimeout, KEEP_ALIVE_TIMEOUT_MS);
    assert.equal(fd.serverFactory(() => {}, { keepAliveTimeout: 1234 }).keepAliveTimeout, 1234);
  });
});
