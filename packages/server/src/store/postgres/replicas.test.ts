import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { makeTestApp, type TestApp } from '../../../test/app.js';
import { withTestPostgres } from '../../../test/postgres.js';
import { DEFAULT_RATE_LIMITS, type RateLimitConfig } from '../../config.js';
import type { AccountRecord } from '../store.js';
import { REAPER_LEASE } from '../../lifecycle/reaper.js';

/*
 * Two apps on one real PostgreSQL act as API replicas (each with a fake runtime of its
 * own): one reaps at a time, and the lease moves when its holder closes or stops renewing
 * it; rate limits and login throttles count on both. The reapers are driven by hand
 * (`tick`), with each app's own manual clock.
 */

withTestPostgres('replicas on PostgreSQL', (server) => {
  /** Two replicas on a fresh schema; `fn` runs, then both close (closing twice is harmless). */
  async function withReplicas(
    fn: (a: TestApp, b: TestApp, databaseUrl: string) => Promise<void>,
    overrides: Parameters<typeof makeTestApp>[0] = {},
    opts: Parameters<typeof makeTestApp>[1] = {},
  ) {
    const databaseUrl = await server().createSchema();
    const a = await makeTestApp({ databaseUrl, warmPool: [], ...overrides }, opts);
    const b = await makeTestApp({ databaseUrl, warmPool: [], ...overrides }, opts);
    try {
      await fn(a, b, databaseUrl);
    } finally {
      await a.close();
      await b.close();
    }
  }

  const account = async (t: TestApp): Promise<AccountRecord> => {
    const { id } = await t.newAccount({ tokens: 1000 });
    const a = await t.app.store.getAccount(id);
    assert.ok(a);
    return a;
  };
  /** A started sandbox whose stopAt is its creation time (the reaper's next pass stops it). */
  const expiring = async (t: TestApp, a: AccountRecord) =>
    (await t.app.services.sandboxes.create(a, { image: 'local/busybox:latest', timeoutMs: 0 })).id;
  const stops = (...ts: TestApp[]) => ts.flatMap((t) => t.driver.calls.filter((c) => c.startsWith('stop ')));
  const state = async (t: TestApp, id: string) => (await t.app.store.getSandbox(id))?.state;

  describe('the reaper lease: one replica reaps at a time', () => {
    it('the holder reaps an expired sandbox once; the other skips its passes, also run at the same time', () =>
      withReplicas(async (a, b) => {
        assert.deepEqual(await a.app.reaper.tick(), [], 'a takes the lease');
        const acct = await account(a);
        const id = await expiring(a, acct);
        const rounds = await Promise.all(
          Array.from({ length: 5 }, () => Promise.all([b.app.reaper.tick(), a.app.reaper.tick()])),
        );
        assert.deepEqual(
          rounds.flatMap(([fromB]) => fromB),
          [],
          'b never reaps while a holds the lease',
        );
        assert.deepEqual(
          rounds.flatMap(([, fromA]) => fromA),
          [id],
        );
        assert.deepEqual(stops(a, b), [`stop ${id}`], 'one stop, by the holder');
        assert.equal(await state(b, id), 'stopped');
        const lease = await b.app.store.acquireLease(REAPER_LEASE, 'someone-else', 3000, b.clock.now());
        assert.deepEqual([lease.held, lease.holder], [false, a.app.reaper.leaseHolder]);
      }));

    it('a replica that starts while another holds the lease repairs nothing at start-up', () =>
      withReplicas(async (a, _b, databaseUrl) => {
        await a.app.reaper.tick();
        const acct = await account(a);
        const live = await a.app.services.sandboxes.create(acct, { image: 'local/busybox:latest', timeoutMs: 600_000 });
        // A snapshot a is making: c's start-up must not take it for a crash's leftover.
        const snap = {
          accountId: acct.id,
          name: 'in-progress',
          state: 'creating' as const,
          sizeBytes: 0,
          baseImage: 'local/busybox:latest',
          sandboxId: live.id,
          createdAt: a.clock.now(),
        };
        await a.app.store.beginSnapshot(snap, 2 ** 40);
        // c's runtime has never heard of `live`: a reconcile of c's would mark it lost.
        const c = await makeTestApp({ databaseUrl, warmPool: [] });
        try {
          assert.equal(await state(c, live.id), 'started');
          assert.equal((await c.app.store.getSnapshot(acct.id, 'in-progress'))?.state, 'creating');
          assert.deepEqual(await c.app.reaper.reconcile(), {
            expired: [],
            aligned: [],
            lost: [],
            abandoned: [],
            orphans: [],
          });
          assert.equal(await state(c, live.id), 'started');
        } finally {
          await c.close();
        }
      }));

    it('a holder that closes releases the lease: the other takes it on its next pass and reaps', () =>
      withReplicas(async (a, b) => {
        await a.app.reaper.tick();
        const acct = await account(b);
        const id = await expiring(b, acct);
        assert.deepEqual(await b.app.reaper.tick(), [], 'a holds the lease');
        assert.equal(await state(b, id), 'started');
        await a.close();
        assert.deepEqual(await b.app.reaper.tick(), [id], 'taken at once, without waiting for the lease to run out');
        assert.deepEqual(stops(a, b), [`stop ${id}`]);
      }));

    it('a holder that stops renewing (dead) is replaced once its lease has run out, and then skips', () =>
      withReplicas(
        async (a, b) => {
          await a.app.reaper.tick(); // a holds the lease until a's now + 3000, then never renews it
          const acct = await account(b);
          const id = await expiring(b, acct);
          b.clock.advance(2999);
          assert.deepEqual(await b.app.reaper.tick(), [], 'not before the lease has run out');
          b.clock.advance(1);
          assert.deepEqual(await b.app.reaper.tick(), [id], 'b took over and reaped');
          const next = await expiring(b, acct);
          a.clock.advance(3000);
          assert.deepEqual(await a.app.reaper.tick(), [], 'a, back, finds b holding the lease and skips');
          assert.deepEqual(await b.app.reaper.tick(), [next]);
          assert.deepEqual(stops(a, b), [`stop ${id}`, `stop ${next}`]);
        },
        { reaperLeaseMs: 3000 },
      ));
  });

  describe("work in progress on one replica is another's to finish only once that replica is gone", () => {
    /** A promise the test resolves by hand, and a way to make a driver call wait for it. */
    const gate = () => {
      let open = () => {};
      const opened = new Promise<void>((r) => {
        open = r;
      });
      return { open, opened };
    };

    it("a create in progress on b is left alone by a's reconcile; once b's presence lapses it is abandoned and refunded", () =>
      withReplicas(async (a, b) => {
        await a.app.reaper.tick(); // a reaps
        const acct = await account(b);
        const g = gate();
        const create = b.driver.create.bind(b.driver);
        b.driver.create = async (spec) => {
          await g.opened;
          return create(spec);
        };
        const pending = b.app.services.sandboxes.create(acct, { image: 'local/busybox:latest' }).catch((e) => e);
        let rec = (await a.app.store.listSandboxesByState(['creating']))[0];
        for (let i = 0; i < 100 && !rec; i++) {
          await new Promise((r) => setTimeout(r, 10));
          rec = (await a.app.store.listSandboxesByState(['creating']))[0];
        }
        assert.equal(rec?.details?.owner, b.app.reaper.leaseHolder, 'the record names its owner');
        assert.deepEqual((await a.app.reaper.reconcile()).abandoned, [], "b runs: its create is b's");
        assert.equal(await state(a, rec.id), 'creating');
        // b stops renewing (a crash): once its presence lease has run out on a's clock, a finishes the job.
        a.clock.advance(3001); // past the default SANDBOXD_REAPER_LEASE_MS
        assert.deepEqual((await a.app.reaper.reconcile()).abandoned, [rec.id]);
        assert.equal(await state(a, rec.id), 'error');
        assert.equal(await a.app.store.balance(acct.id), 1000, 'refunded in full');
        g.open();
        await pending;
        assert.equal(await state(a, rec.id), 'error', "b's late answer changes nothing");
      }));

    it("a snapshot b is making survives a's start-up reconciliation; once b is gone it is dropped", () =>
      withReplicas(async (a, b) => {
        const acct = await account(b);
        const sb = await b.app.services.sandboxes.create(acct, { image: 'local/busybox:latest' });
        const g = gate();
        const snapshot = b.driver.snapshot.bind(b.driver);
        b.driver.snapshot = async (id, ref) => {
          await g.opened;
          return snapshot(id, ref);
        };
        const account_ = (await b.app.store.getAccount(acct.id))!;
        const making = b.app.services.snapshots.create(account_, sb.id, 'busy').catch((e) => e);
        for (let i = 0; i < 100 && !(await a.app.store.getSnapshot(acct.id, 'busy')); i++)
          await new Promise((r) => setTimeout(r, 10));
        assert.equal((await a.app.store.getSnapshot(acct.id, 'busy'))?.state, 'creating');
        assert.deepEqual((await a.app.services.snapshots.reconcile()).dropped, [], 'b is making it');
        await assert.rejects(
          a.app.services.snapshots.create((await a.app.store.getAccount(acct.id))!, sb.id, 'busy'),
          (e: { kind?: string }) => e.kind === 'conflict' || e.kind === 'not_found',
        );
        a.clock.advance(3001); // past the default SANDBOXD_REAPER_LEASE_MS
        assert.equal((await a.app.services.snapshots.reconcile()).dropped.length, 1, 'b is gone: a crash leftover');
        assert.equal(await a.app.store.getSnapshot(acct.id, 'busy'), null);
        g.open();
        await making;
      }));
  });

  describe('rate limits and login throttles are shared by replicas on PostgreSQL (the default store there)', () => {
    const { store: _default, ...limits } = DEFAULT_RATE_LIMITS;
    let t = 1_000_000;
    const now = () => t;
    it('an account limit and a failed-login lockout counted on one replica hold on the other', () =>
      withReplicas(
        async (a, b) => {
          const acct = await a.newAccount();
          t += 60_000; // past the sign-up's own requests
          const get = (x: TestApp) => x.req({ method: 'GET', url: '/api/v1/account', key: acct.key });
          for (let i = 0; i < 3; i++) assert.equal((await get(a)).statusCode, 200);
          for (let i = 0; i < 2; i++) assert.equal((await get(b)).statusCode, 200);
          const over = await get(a);
          assert.equal(over.statusCode, 429, 'the 6th request of a burst of 5, over two replicas');
          assert.equal(over.json().details.limit, 'account');
          assert.equal((await get(b)).statusCode, 429);

          const email = (await a.app.store.getAccount(acct.id))?.email;
          const login = (x: TestApp, password: string) =>
            x.req({ method: 'POST', url: '/api/v1/auth/login', key: null, payload: { email, password } });
          assert.equal((await login(a, 'wrong')).statusCode, 401);
          assert.equal((await login(b, 'wrong')).statusCode, 401);
          const blocked = await login(a, 'password123');
          assert.equal(blocked.statusCode, 429, 'two failures over two replicas lock the email, right password or not');
          assert.equal(blocked.json().details.limit, 'login');
          assert.equal((await login(b, 'password123')).statusCode, 429);
          t += 900_000; // the auth window ends
          assert.equal((await login(b, 'password123')).statusCode, 200);
        },
        {
          rateLimit: {
            ...limits,
            accountPerSec: 1,
            accountBurst: 5,
            loginFailuresPerEmail: 2,
          } as RateLimitConfig,
        },
        { rateLimitNow: now },
      ));
  });
});
