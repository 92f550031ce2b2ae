/**
 * Fault suite (issue 8), black-box against the real server on the real runtime:
 *  - kill -9 of the server in the middle of 50 parallel creates, 50 parallel execs and
 *    streaming terminals, then a restart on the same data dir, over a few rounds with the
 *    kill at a different moment each time;
 *  - the data dir running out of space, and coming back, without a restart.
 * `SANDBOXD_SOAK=1` runs more rounds with more parallelism.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { TermClient, terminalUrl } from '../../packages/server/test/terminals.js';
import { existsSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { IMAGE, newAccount, RUNTIME, startServer, type Server } from '../e2e/harness.js';
import {
  chargesById,
  destroyScope,
  eventually,
  freshDataDir,
  halfMadeVolumes,
  hostSnapshot,
  ledgerOf,
  sandboxesOf,
  sandboxTraces,
  scopeDiff,
  scopeOf,
  scopeProcesses,
  SmallFs,
  type Scope,
} from './faults-support.js';

const SOAK = process.env.SANDBOXD_SOAK === '1';
const local = RUNTIME === 'local';
/** Kill after this many answers (of creates + execs) in each round. */
const KILL_AFTER = SOAK ? [1, 12, 30, 55, 80, 95] : [8, 45];
/** Accounts doing the parallel creates per round, 50 creates each (the PRO concurrency). */
const CREATE_ACCOUNTS = SOAK ? 2 : 1;
const CREATES_PER_ACCOUNT = 50;
const EXECS = SOAK ? 100 : 50;
const TERMINALS = SOAK ? 6 : 3;
const TIMEOUT_MS = 600_000;
const MINUTES = TIMEOUT_MS / 60_000;
const TOKENS = 100_000;

type Api = Awaited<ReturnType<Server['api']>>;
/** The kill -9 rounds run with a warm pool: the kill lands amid claims too, and pooled sandboxes are alive. */
const WARM = { SANDBOXD_WARM_POOL: `${IMAGE}=4` };

/**
 * Starts the server again on the same data dir (on a fresh port: the old one may have been
 * taken by anything on this busy host since the kill); a failed start says why (its log's tail).
 */
async function restart(old: Server, env: Record<string, string> = WARM): Promise<Server> {
  try {
    return await startServer({ dataDir: old.dataDir, env });
  } catch (e) {
    const logs = readdirSync(old.dataDir)
      .filter((f) => f.endsWith('.stderr.log'))
      .map((f) => join(old.dataDir, f));
    const newest = logs.sort((a, b) => statSync(b).mtimeMs - statSync(a).mtimeMs)[0];
    throw new Error(
      `${(e as Error).message}; its log ends: ${newest ? readFileSync(newest, 'utf8').slice(-3000) : '(none)'}`,
    );
  }
}

/** What deleted sandboxes still have on the host, given 10 s to finish going (a leak stays). */
async function leftovers(scope: Scope, ids: Iterable<string>): Promise<Array<[string, string[]]>> {
  const all = [...ids];
  const left = () => [...sandboxTraces(scope, all)].filter(([, t]) => t.length);
  await eventually(() => left().length === 0, 50, 200);
  return left();
}

describe('faults: kill -9 and disk full', {
  skip: !local && 'needs SANDBOXD_E2E_RUNTIME=local',
  timeout: SOAK ? 3_600_000 : 900_000,
}, () => {
  it('kill -9 amid parallel creates, execs and terminals: every sandbox adopted or fully cleaned, ledger exact, fsynced volume data intact, nothing leaked', async () => {
    const snapshotBefore = hostSnapshot();
    let s = await startServer({ dataDir: freshDataDir(), env: WARM });
    const scope = scopeOf(s.dataDir);
    const allIds = new Set<string>();
    const keys: string[] = [];
    try {
      // Account B holds the sandboxes execs and terminals run in; two share a volume.
      const b = await newAccount(s, { tokens: TOKENS, plan: 'PRO' });
      keys.push(b.key);
      const targets: string[] = [];
      for (let i = 0; i < 4; i++) {
        const c = await s.api('POST', '/api/v1/sandboxes', {
          key: b.key,
          body: { image: IMAGE, timeoutMs: 3_600_000, volumes: i < 2 ? { '/data': 'durable' } : undefined },
        });
        assert.equal(c.status, 201, c.text);
        targets.push(c.body.sandbox.id);
      }
      /** Files fsynced to the volume whose answer arrived: name -> sha256. */
      const durable = new Map<string, string>();

      for (const [round, killAfter] of KILL_AFTER.entries()) {
        const R = round + 1;
        const creators = [];
        for (let a = 0; a < CREATE_ACCOUNTS; a++) creators.push(await newAccount(s, { tokens: TOKENS, plan: 'PRO' }));
        keys.push(...creators.map((c) => c.key));

        // Terminals streaming output to connected clients.
        const clients: TermClient[] = [];
        for (let t = 0; t < TERMINALS; t++) {
          const sb = targets[1 + (t % 3)];
          const term = await s.api('POST', `/api/v1/sandboxes/${sb}/terminals`, { key: b.key, body: {} });
          assert.equal(term.status, 201, term.text);
          const c = await TermClient.connect(terminalUrl(s.baseUrl, sb, term.body.terminal.id), {
            authorization: `Bearer ${b.key}`,
          });
          await c.control('ready');
          c.type(`exec sh -c 'while true; do echo tick-r${R}-$$; sleep 0.1; done'\r`);
          clients.push(c);
        }
        await Promise.all(clients.map((c) => c.waitForOutput(new RegExp(`tick-r${R}-\\d+`), 30_000)));
        // Positive controls for the checks after the restart: the shells and relays are seen now.
        const ps = await s.api('POST', `/api/v1/sandboxes/${targets[1]}/exec`, {
          key: b.key,
          body: { command: 'ps -o args' },
        });
        assert.match(ps.body?.stdout ?? '', new RegExp(`tick-r${R}`), "a terminal's shell is visible in its sandbox");
        // Terminals run through host-side tty-relay processes (runtime/local/pty.ts): one each,
        // and none keeps its console-socket folder in the temp dir once running.
        const relays = scopeProcesses(scope).filter((p) => p.includes('tty-relay'));
        if (relays.length) {
          assert.equal(relays.length, TERMINALS, 'one tty-relay per terminal');
          const ttyDirs = relays.map((p) => /(\S+)\/s \S+\/p /.exec(p)?.[1]).filter((d): d is string => !!d);
          assert.equal(ttyDirs.length, TERMINALS, 'relay socket folders named on their command lines');
          assert.deepEqual(
            ttyDirs.filter((d) => existsSync(d)),
            [],
            'a running terminal keeps no socket folder',
          );
        }

        // 50 creates per account (some with volumes) and EXECS execs, all at once; kill -9 after `killAfter` answers.
        const created = new Map<string, string[]>(); // key -> ids answered 201
        const answeredExecs = { fg: 0, bg: 0 };
        let answers = 0;
        const problems: string[] = [];
        let killed: Promise<unknown> | null = null;
        const killAt = Date.now();
        const kill = () => {
          killed ??= s.kill('SIGKILL');
        };
        const safety = setTimeout(kill, 180_000);
        const answered = (r: Api | null) => {
          if (r && r.status > 0 && ++answers >= killAfter) kill();
        };
        const tryApi = (p: Promise<Api>) => p.catch(() => null);
        const creates = creators.flatMap((acc) =>
          Array.from({ length: CREATES_PER_ACCOUNT }, async (_, i) => {
            const volumes = i % 5 === 0 ? { '/v': `vol_${i % 3}` } : undefined;
            const r = await tryApi(
              s.api('POST', '/api/v1/sandboxes', {
                key: acc.key,
                body: { image: IMAGE, timeoutMs: TIMEOUT_MS, volumes },
              }),
            );
            if (r?.status === 201) created.set(acc.key, [...(created.get(acc.key) ?? []), r.body.sandbox.id]);
            else if (r) problems.push(`create answered ${r.status} ${r.text}`);
            answered(r);
          }),
        );
        const execs = Array.from({ length: EXECS }, async (_, j) => {
          const kind = j % 10;
          const sb = kind === 2 || kind === 3 ? targets[j % 2] : targets[j % 4];
          const file = `r${R}-${j}`;
          const body =
            kind === 0
              ? { command: 'sleep 600', options: { background: true } }
              : kind === 1
                ? { command: `sleep 20; echo long-${j}` }
                : kind === 2 || kind === 3
                  ? {
                      command: `dd if=/dev/urandom of=/data/${file} bs=4096 count=16 conv=fsync 2>/dev/null && sha256sum /data/${file}`,
                    }
                  : { command: `echo exec-${j}; sleep 0.${j % 5}` };
          const r = await tryApi(s.api('POST', `/api/v1/sandboxes/${sb}/exec`, { key: b.key, body }));
          if (r?.status === 200) {
            if (r.body.exitCode !== 0) problems.push(`${body.command}: ${r.text}`);
            if (kind === 0) answeredExecs.bg++;
            else answeredExecs.fg++;
            if (kind === 2 || kind === 3) durable.set(file, r.body.stdout.split(' ')[0]);
          } else if (r) problems.push(`exec answered ${r.status} ${r.text}`);
          answered(r);
        });
        await Promise.all([...creates, ...execs]);
        kill();
        await killed;
        clearTimeout(safety);
        assert.deepEqual(problems, [], 'every answer before the kill was a success');
        const closes = await Promise.all(
          clients.map((c) => Promise.race([c.closed, new Promise((r) => setTimeout(() => r(null), 20_000))])),
        );
        assert.ok(
          closes.every((c) => c !== null),
          'every terminal client saw its socket close',
        );

        // Restart on the same data dir. It serves once the live sandboxes are adopted; the
        // leftovers go in the background (sandboxd_recovery_pending): wait, bounded, for that.
        const t0 = Date.now();
        s = await restart(s);
        const recoveryMs = Date.now() - t0;
        const pending = async () =>
          Number(/^sandboxd_recovery_pending (\d+)$/m.exec((await s.api('GET', '/metrics', { key: null })).text)?.[1]);
        assert.ok(await eventually(async () => (await pending()) === 0, 600, 100), 'the leftovers were removed');
        const cleanupMs = Date.now() - t0;

        // Every sandbox a create reserved is either started, listed and working, or fully cleaned.
        let running = 0;
        let cleaned = 0;
        for (const acc of creators) {
          const { balance, entries } = await ledgerOf(s, acc.key);
          const charges = chargesById(entries);
          const listed = new Map((await sandboxesOf(s, acc.key)).map((x) => [x.id, x.state]));
          const answeredIds = created.get(acc.key) ?? [];
          for (const id of charges.keys()) allIds.add(id);
          for (const id of answeredIds)
            assert.equal(
              listed.get(id),
              'started',
              `sandbox ${id} was answered 201 but is ${listed.get(id)} after the restart`,
            );
          const started = [...charges.keys()].filter((id) => listed.get(id) === 'started');
          const gone = [...charges.keys()].filter((id) => listed.get(id) !== 'started');
          running += started.length;
          cleaned += gone.length;
          const usage = (await s.api('GET', '/api/v1/account', { key: acc.key })).body.usage;
          assert.equal(
            usage.startedSandboxes,
            started.length,
            'no sandbox is left half-made ("creating") after the restart',
          );
          const execOk = await Promise.all(
            started.map((id) =>
              s.api('POST', `/api/v1/sandboxes/${id}/exec`, { key: acc.key, body: { command: 'echo alive' } }),
            ),
          );
          for (const [i, r] of execOk.entries())
            assert.equal(r.body?.stdout, 'alive\n', `exec in adopted ${started[i]}: ${r.status} ${r.text}`);
          const traces = sandboxTraces(scope, gone);
          for (const id of gone) {
            assert.notEqual(listed.get(id), 'creating');
            assert.deepEqual(
              traces.get(id),
              [],
              `sandbox ${id} (${listed.get(id) ?? 'not listed'}) is not fully cleaned`,
            );
          }
          // Tokens: one debit per sandbox, full refund of the ones that never started, none lost.
          for (const [id, c] of charges) {
            assert.deepEqual(c.debits, [-MINUTES], `debits of ${id}`);
            const refunded = c.refunds.reduce((x, y) => x + y, 0);
            assert.equal(
              refunded,
              listed.get(id) === 'started' ? 0 : MINUTES,
              `refunds of ${id} (${listed.get(id) ?? 'not listed'})`,
            );
          }
          assert.equal(
            balance,
            entries.reduce((x, e) => x + e.delta, 0),
            'the ledger rows add up to the balance',
          );
          assert.equal(
            balance,
            TOKENS - MINUTES * started.length,
            'balance = initial - charges of the sandboxes that exist',
          );
          assert.deepEqual(await halfMadeVolumes(s, acc.key, acc.id, s.dataDir), [], 'no volume half-made');
        }

        // The exec targets survived with their data; terminals ended with the server.
        for (const [i, id] of targets.entries()) {
          const r = await s.api('POST', `/api/v1/sandboxes/${id}/exec`, {
            key: b.key,
            body: { command: 'echo alive' },
          });
          assert.equal(r.body?.stdout, 'alive\n', `exec target ${i}: ${r.status} ${r.text}`);
          assert.deepEqual(
            (await s.api('GET', `/api/v1/sandboxes/${id}/terminals`, { key: b.key })).body.terminals,
            [],
          );
        }
        const sums = await s.api('POST', `/api/v1/sandboxes/${targets[0]}/exec`, {
          key: b.key,
          body: { command: 'cd /data && sha256sum r*-* 2>/dev/null; true' },
        });
        const onDisk = new Map(
          sums.body.stdout
            .trim()
            .split('\n')
            .filter(Boolean)
            .map((l: string) => l.split(/\s+/).reverse() as [string, string]),
        );
        for (const [file, sum] of durable)
          assert.equal(onDisk.get(file), sum, `fsynced ${file} changed or vanished across the kill`);
        const termGone = await eventually(
          async () => {
            const ps = await Promise.all(
              targets.map((id) =>
                s.api('POST', `/api/v1/sandboxes/${id}/exec`, { key: b.key, body: { command: 'ps -o args' } }),
              ),
            );
            return ps.every((p) => /COMMAND/.test(p.body?.stdout ?? '') && !/tick-r\d/.test(p.body.stdout));
          },
          50,
          200,
        );
        assert.ok(termGone, 'the shells of terminals ended with the killed server');
        assert.ok(
          await eventually(() => scopeProcesses(scope).every((p) => !p.includes('tty-relay')), 50, 200),
          `no tty-relay survived the killed server: ${scopeProcesses(scope).join('\n')}`,
        );

        const { balance: bBalance, entries: bEntries } = await ledgerOf(s, b.key);
        assert.equal(
          bBalance,
          bEntries.reduce((x, e) => x + e.delta, 0),
        );
        for (const [id, c] of chargesById(bEntries)) assert.equal(c.debits.length, 1, `debits of ${id}`);
        console.log(
          `# round ${R}: kill after ${killAfter} answers (${[...created.values()].flat().length} creates, ${answeredExecs.fg} foreground + ${answeredExecs.bg} background execs answered, ${Date.now() - killAt} ms in); ` +
            `after restart ${running} running, ${cleaned} cleaned; serving after ${recoveryMs} ms, leftovers removed after ${cleanupMs} ms; ${durable.size} fsynced files intact`,
        );

        // Delete the round's sandboxes: nothing of them may stay.
        for (const acc of creators) {
          for (const x of await sandboxesOf(s, acc.key)) {
            const d = await s.api('DELETE', `/api/v1/sandboxes/${x.id}`, { key: acc.key });
            assert.equal(d.status, 204, d.text);
          }
        }
        assert.deepEqual(
          await leftovers(
            scope,
            [...allIds].filter((id) => !targets.includes(id)),
          ),
          [],
          'deleted sandboxes left something on the host',
        );
      }

      // The last phase runs without a warm pool (a graceful restart): every process then left in
      // the scope is a leak, not a pooled sandbox.
      await s.kill('SIGTERM');
      s = await restart(s, {});

      // The volume's data is on its disk: a fresh sandbox mounting it reads every file.
      for (const id of targets)
        assert.equal((await s.api('DELETE', `/api/v1/sandboxes/${id}`, { key: b.key })).status, 204);
      const fresh = await s.api('POST', '/api/v1/sandboxes', {
        key: b.key,
        body: { image: IMAGE, volumes: { '/data': 'durable' } },
      });
      assert.equal(fresh.status, 201, fresh.text);
      const sums = await s.api('POST', `/api/v1/sandboxes/${fresh.body.sandbox.id}/exec`, {
        key: b.key,
        body: { command: 'cd /data && sha256sum r*-* 2>/dev/null; true' },
      });
      const onDisk = new Map(
        sums.body.stdout
          .trim()
          .split('\n')
          .filter(Boolean)
          .map((l: string) => l.split(/\s+/).reverse() as [string, string]),
      );
      for (const [file, sum] of durable) assert.equal(onDisk.get(file), sum, `fsynced ${file} lost after remount`);
      assert.equal((await s.api('DELETE', `/api/v1/sandboxes/${fresh.body.sandbox.id}`, { key: b.key })).status, 204);
      for (const key of keys) {
        for (const v of (await s.api('GET', '/api/v1/volumes', { key })).body.volumes) {
          assert.equal((await s.api('DELETE', `/api/v1/volumes/${v.name}`, { key })).status, 204);
        }
      }
      for (const key of keys) for (const [id] of chargesById((await ledgerOf(s, key)).entries)) allIds.add(id);
      assert.deepEqual(await leftovers(scope, allIds), [], 'sandboxes left something on the host once deleted');
      const procs = await eventually(() => scopeProcesses(scope, { exceptPids: [s.proc.pid!] }).length === 0, 150, 200);
      assert.ok(
        procs,
        `processes of deleted sandboxes survive: ${scopeProcesses(scope, { exceptPids: [s.proc.pid!] }).join('\n')}`,
      );
    } finally {
      await s.stop();
    }
    assert.deepEqual(scopeProcesses(scope), [], 'processes left after the server stopped');
    assert.deepEqual(
      scopeDiff(snapshotBefore, hostSnapshot(), scope, allIds),
      [],
      'host objects left (host-snapshot.sh diff)',
    );
  });
  it('disk full on the data dir: 507 saying so, nothing half-made, the server stays up, and everything works again once space returns', async () => {
    const snapshotBefore = hostSnapshot();
    const small = new SmallFs(160);
    const ids = new Set<string>();
    let s: Server | undefined;
    let harnessDir = '';
    let scope: ReturnType<typeof scopeOf> | undefined;
    try {
      // A floor of 1 MiB, for the 507 guard and the capacity check alike (the capacity floor
      // defaults to twice the other, so with 1.06 MiB free it answered 503 whenever its cached
      // figure was fresh): "full" is refused by the guard; "nearly full" lets the work itself hit ENOSPC.
      s = await startServer({
        dataDir: freshDataDir(),
        env: {
          SANDBOXD_DATA_DIR: small.dir,
          SANDBOXD_MIN_FREE_MB: '1',
          SANDBOXD_CREATE_MIN_FREE_MB: '1',
          SANDBOXD_RECONCILE_INTERVAL_MS: '500',
        },
      });
      harnessDir = s.dataDir;
      const srv = s;
      const scope = scopeOf(harnessDir, small.dir);
      const pid = srv.proc.pid;
      const { id: accountId, key } = await newAccount(srv, { tokens: 1000, plan: 'PRO' });
      const api = (method: string, path: string, body?: unknown) => srv.api(method, path, { key, body });
      const x = await api('POST', '/api/v1/sandboxes', { image: IMAGE, volumes: { '/data': 'keep' } });
      assert.equal(x.status, 201, x.text);
      const xid = x.body.sandbox.id as string;
      assert.equal(
        (await api('POST', `/api/v1/sandboxes/${xid}/exec`, { command: 'echo kept > /data/f && sync' })).status,
        200,
      );
      const z = await api('POST', '/api/v1/sandboxes', { image: IMAGE });
      assert.equal(z.status, 201, z.text);
      const zid = z.body.sandbox.id as string;
      const is507 = (r: Api, what: string) => {
        assert.equal(r.status, 507, `${what}: ${r.status} ${r.text}`);
        assert.equal(r.body.code, 507);
        assert.match(r.body.message, /out of storage/);
        assert.ok(!r.text.includes(small.dir), `${what}: the answer leaks a host path`);
      };
      const never500 = (r: Api, what: string, ok: number[]) =>
        assert.ok([...ok, 507].includes(r.status), `${what}: ${r.status} ${r.text}`);
      const figures: string[] = [];

      // Full: every operation that needs space says so.
      small.fill(0);
      figures.push(`full: ${small.freeBytes()} bytes free`);
      is507(await api('POST', '/api/v1/sandboxes', { image: IMAGE }), 'create');
      is507(
        await api('POST', '/api/v1/sandboxes', { image: IMAGE, volumes: { '/new': 'fresh' } }),
        'create with a new volume',
      );
      is507(
        await api('POST', `/api/v1/sandboxes/${xid}/exec`, { command: 'dd if=/dev/zero of=/big bs=1M count=8' }),
        'exec writing the root layer',
      );
      is507(
        await api('POST', `/api/v1/sandboxes/${xid}/exec`, { command: 'sleep 5', options: { background: true } }),
        'background exec',
      );
      is507(await api('POST', `/api/v1/sandboxes/${xid}/terminals`, {}), 'terminal');
      let refusedWrites = 0;
      for (let i = 0; i < 300 && refusedWrites === 0; i++) {
        const r = await api('POST', '/api/v1/events/track', {
          event: 'onboarding.started',
          metadata: { pad: 'x'.repeat(7000), i },
        });
        never500(r, 'account write (event)', [200]);
        if (r.status === 507) {
          is507(r, 'account write');
          refusedWrites++;
        }
      }
      assert.ok(refusedWrites > 0, 'an account write that needs space is refused with 507');
      never500(await api('POST', '/api/v1/keys', { name: 'while-full' }), 'create key', [201]);
      // Deleting frees space, so it must work (or say 507 and work once space is back).
      const dz = await api('DELETE', `/api/v1/sandboxes/${zid}`);
      never500(dz, 'delete while full', [204]);
      figures.push(`delete while full: ${dz.status}`);
      assert.equal((await fetch(`${srv.baseUrl}/healthz`)).status, 200, 'the server stays up');
      assert.deepEqual(
        (await sandboxesOf(srv, key)).map((z) => z.id).filter((id) => id !== zid),
        [xid],
        'no sandbox half-made',
      );
      assert.deepEqual(
        (await api('GET', '/api/v1/volumes')).body.volumes.map((v: { name: string }) => v.name),
        ['keep'],
        'no volume half-made',
      );

      // Nearly full: the floor passes, the work itself runs out of space on the way (a new
      // 100 GB volume alone takes ~1.2 MiB of ext4 metadata).
      small.drain();
      small.fill((1 << 20) + (64 << 10));
      figures.push(`nearly full: ${small.freeBytes()} bytes free`);
      const tries: number[] = [];
      for (let i = 0; i < 6; i++) {
        const r = await api('POST', '/api/v1/sandboxes', {
          image: IMAGE,
          volumes: i % 2 ? undefined : { '/new': { name: `fresh_${i}`, sizeGb: 100 } },
        });
        never500(r, `create ${i} on a nearly full disk`, [201]);
        tries.push(r.status);
      }
      const e = await api('POST', `/api/v1/sandboxes/${xid}/exec`, { command: 'echo hi' });
      never500(e, 'exec on a nearly full disk', [200]);
      figures.push(`nearly full: creates answered ${tries.join(',')}, exec ${e.status}`);
      assert.ok(tries.includes(507), 'the disk ran out during the creates');
      // Whatever failed left nothing: no record but started ones, no creating, no new volume without a sandbox, no runtime traces.
      const charges = chargesById((await ledgerOf(srv, key)).entries);
      for (const [id] of charges) ids.add(id);
      const refunded = [...charges].filter(([id, ch]) => id !== zid && ch.refunds.length > 0).length;
      figures.push(`${refunded} creates ran out of space after their reservation (debited, then refunded)`);
      assert.ok(refunded > 0, 'a create ran out of space in the runtime, not only at the guard');
      assert.ok(
        await eventually(
          async () =>
            (await api('GET', '/api/v1/account')).body.usage.startedSandboxes ===
            (await sandboxesOf(srv, key)).filter((z) => z.state === 'started').length,
          40,
          250,
        ),
        'no record left creating',
      );
      const listed = await sandboxesOf(srv, key);
      // z's delete while full may have been refused after its sandbox was killed (then the
      // reconciler records the loss): z is checked once space is back, below.
      assert.deepEqual(
        listed.filter((z) => z.state !== 'started' && z.id !== zid),
        [],
        'a refused create leaves no record',
      );
      const startedIds = new Set(listed.map((z) => z.id));
      const traces = [
        ...sandboxTraces(
          scope,
          [...ids].filter((id) => !startedIds.has(id)),
        ),
      ].filter(([, t]) => t.length);
      assert.deepEqual(traces, [], 'a refused create leaves nothing on the host');
      assert.deepEqual(
        await halfMadeVolumes(srv, key, accountId, small.dir),
        [],
        'no volume half-made (a record without its disk, or the reverse)',
      );
      const stateDirs = readdirSync(join(small.dir, 'sandboxes'));
      assert.deepEqual(
        stateDirs.filter((d) => !startedIds.has(d)),
        [],
        'no state dir of a refused create',
      );

      // Space returns: everything works again, without a restart.
      small.drain();
      if (dz.status !== 204)
        assert.equal(
          (await api('DELETE', `/api/v1/sandboxes/${zid}`)).status,
          204,
          'a delete refused while full works once space is back',
        );
      assert.equal((await api('GET', `/api/v1/sandboxes/${zid}`)).status, 404);
      assert.equal(srv.proc.pid, pid);
      assert.equal(srv.proc.exitCode, null);
      const y = await api('POST', '/api/v1/sandboxes', { image: IMAGE, volumes: { '/new': 'fresh' } });
      assert.equal(y.status, 201, y.text);
      const yid = y.body.sandbox.id as string;
      ids.add(yid);
      const w = await api('POST', `/api/v1/sandboxes/${yid}/exec`, {
        command:
          'dd if=/dev/zero of=/big bs=1M count=8 conv=fsync 2>/dev/null && dd if=/dev/zero of=/new/big bs=1M count=8 conv=fsync 2>/dev/null && echo wrote',
      });
      assert.equal(w.body?.stdout, 'wrote\n', w.text);
      assert.equal(
        (await api('POST', `/api/v1/sandboxes/${xid}/exec`, { command: 'cat /data/f' })).body.stdout,
        'kept\n',
        'volume data intact',
      );
      const term = await api('POST', `/api/v1/sandboxes/${xid}/terminals`, {});
      assert.equal(term.status, 201, term.text);
      const c = await TermClient.connect(terminalUrl(srv.baseUrl, xid, term.body.terminal.id), {
        authorization: `Bearer ${key}`,
      });
      await c.control('ready');
      c.type('echo back-$((6*7))\r');
      await c.waitForOutput(/back-42/);
      c.close();
      assert.equal((await api('POST', '/api/v1/keys', { name: 'after' })).status, 201);
      assert.equal(
        (await api('POST', '/api/v1/events/track', { event: 'onboarding.started', metadata: {} })).status,
        200,
      );
      // Tokens: every refused create was refunded in full; the ledger adds up.
      const { balance, entries } = await ledgerOf(srv, key);
      const live = new Set((await sandboxesOf(srv, key)).filter((z) => z.state === 'started').map((z) => z.id));
      let zCost = 0;
      for (const [id, ch] of chargesById(entries)) {
        assert.equal(ch.debits.length, 1, `debits of ${id}`);
        const net = ch.debits[0] + ch.refunds.reduce((a, b) => a + b, 0);
        if (id === zid) {
          // Deleted while full: it paid the whole minutes it ran (at least 1), once.
          assert.ok(
            ch.refunds.length === 1 && net < 0 && net > ch.debits[0],
            `charges of ${id}: ${JSON.stringify(ch)}`,
          );
          zCost = -net;
        } else
          assert.equal(net, live.has(id) ? ch.debits[0] : 0, `charges of ${id}: a refused create is refunded in full`);
      }
      assert.equal(
        balance,
        entries.reduce((a, b) => a + b.delta, 0),
      );
      assert.equal(
        balance,
        1000 - zCost + entries.filter((x) => live.has(x.sandboxId ?? '')).reduce((a, b) => a + b.delta, 0),
        'balance = initial - what the sandboxes that exist or ran cost',
      );
      console.log(`# disk full: ${figures.join('; ')}; ${refusedWrites} account write refused; server pid unchanged`);

      for (const z of await sandboxesOf(srv, key))
        assert.equal((await api('DELETE', `/api/v1/sandboxes/${z.id}`)).status, 204);
      for (const v of (await api('GET', '/api/v1/volumes')).body.volumes)
        assert.equal((await api('DELETE', `/api/v1/volumes/${v.name}`)).status, 204);
      for (const [id] of chargesById((await ledgerOf(srv, key)).entries)) ids.add(id);
      assert.deepEqual(await leftovers(scope, ids), [], 'deleted sandboxes left something on the host');
      assert.ok(
        await eventually(() => scopeProcesses(scope, { exceptPids: [pid!] }).length === 0, 150, 200),
        scopeProcesses(scope, { exceptPids: [pid!] }).join('\n'),
      );
    } finally {
      if (s) {
        await s.cleanup().catch(() => {});
        await s.kill('SIGTERM');
      }
      if (harnessDir) await destroyScope(harnessDir, small.dir).catch((e) => console.log(`# teardown: ${e}`));
      // Its key names the instance's run dir: read while the data dir is there (reading it
      // later would make the data dir again, and leave it behind in /tmp).
      if (harnessDir) scope = scopeOf(harnessDir, small.dir);
      small.remove();
      if (harnessDir && !process.env.SANDBOXD_E2E_KEEP) rmSync(harnessDir, { recursive: true, force: true });
    }
    assert.ok(scope, 'the server started');
    assert.deepEqual(scopeProcesses(scope), [], 'processes left after the server stopped');
    assert.deepEqual(
      scopeDiff(snapshotBefore, hostSnapshot(), scope, ids),
      [],
      'host objects left (host-snapshot.sh diff)',
    );
  });
});
