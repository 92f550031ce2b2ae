import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createSocket, type Socket } from 'node:dgram';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import * as dnsPacket from 'dns-packet';
import { EgressGate, MAX_NAMES_PER_SANDBOX } from './egress.js';
import { blockedPrefixes, buildRuleset, nftTableName } from './rules.js';

// A table of this file's own (no sandbox, no veth: only its sets are used); the "sandbox"
// asks the gate's resolver from a loopback address of its own.
const NAME = 'sbxt-egr';
const TABLE = nftTableName(NAME);
const SANDBOX = '127.0.3.2';
const A = '198.51.100.1';
const B = '198.51.100.2';
const C = '198.51.100.7';

/** name -> [address, TTL] the fake upstream answers. */
function answerFor(name: string): [string, number] | undefined {
  if (name === 'old.test') return [A, 600];
  const m = /^n(\d+)\.fill\.test$/.exec(name);
  if (m) return [m[1] === '0' ? A : B, 600];
  if (name === 'long.test') return [C, 3600];
  if (name === 'short.test') return [C, 20];
  return undefined;
}

/** This sandbox's elements of egress_resolved, read back from the kernel: destination -> timeout (s). */
function resolvedSet(): Map<string, number> {
  const out = JSON.parse(
    execFileSync('nft', ['-j', 'list', 'set', 'inet', TABLE, 'egress_resolved'], { encoding: 'utf8' }),
  );
  const elems: unknown[] = out.nftables.find((x: { set?: unknown }) => x.set)?.set?.elem ?? [];
  const got = new Map<string, number>();
  for (const e of elems) {
    const m = JSON.stringify(e).match(/"concat":\["([\d.]+)","([\d.]+)"\]/);
    const timeout = (e as { elem?: { timeout?: number } }).elem?.timeout ?? 0;
    if (m && m[1] === SANDBOX) got.set(m[2], timeout);
  }
  return got;
}

/** The elements of an address set of the table. */
function addrSet(set: string): string[] {
  const out = JSON.parse(execFileSync('nft', ['-j', 'list', 'set', 'inet', TABLE, set], { encoding: 'utf8' }));
  return (out.nftables.find((x: { set?: unknown }) => x.set)?.set?.elem ?? []) as string[];
}

describe('the egress gate: the nft set follows the recorded answers', () => {
  const caDir = mkdtempSync(join(tmpdir(), 'egress-gate-ca-'));
  let up: Socket;
  let gate: EgressGate;
  let dnsPort = 0;
  let client: Socket;
  const replies = new Map<number, (b: Buffer) => void>();
  let nextId = 1;

  /** Asks the gate's resolver for `name` from the sandbox's address; resolves the rcode. */
  const ask = (name: string): Promise<number> => {
    const id = nextId++ & 0xffff;
    const q = dnsPacket.encode({
      type: 'query',
      id,
      flags: dnsPacket.RECURSION_DESIRED,
      questions: [{ type: 'A', name, class: 'IN' }],
    });
    return new Promise((res, rej) => {
      const t = setTimeout(() => rej(new Error(`no answer for ${name}`)), 30_000);
      replies.set(id, (b) => {
        clearTimeout(t);
        res(b.readUInt16BE(2) & 15);
      });
      client.send(q, dnsPort, '127.0.0.1');
    });
  };
  const askAll = async (names: string[]) => {
    for (let i = 0; i < names.length; i += 64) {
      const rcodes = await Promise.all(names.slice(i, i + 64).map(ask));
      assert.ok(
        rcodes.every((r) => r === 0),
        `rcodes ${[...new Set(rcodes)]}`,
      );
    }
  };

  before(async () => {
    execFileSync('nft', ['-f', '-'], {
      input: buildRuleset({
        name: NAME,
        group: 1 << 28,
        subnet: '10.89.249.0/24',
        gateway: '10.89.249.1',
        hostNetworks: [],
      }),
    });
    up = createSocket('udp4');
    up.on('message', (msg, r) => {
      const q = dnsPacket.decode(msg);
      const name = q.questions![0].name.toLowerCase();
      const a = answerFor(name);
      up.send(
        dnsPacket.encode({
          type: 'response',
          id: q.id,
          flags: dnsPacket.RECURSION_DESIRED | dnsPacket.RECURSION_AVAILABLE | (a ? 0 : 3),
          questions: q.questions,
          answers: a ? [{ type: 'A', name, ttl: a[1], class: 'IN', data: a[0] }] : [],
        }),
        r.port,
        r.address,
      );
    });
    await new Promise<void>((r) => up.bind(0, '127.0.0.1', () => r()));
    gate = new EgressGate({
      table: TABLE,
      gateway: '127.0.0.1',
      blocked: blockedPrefixes([]),
      upstream: [{ host: '127.0.0.1', port: up.address().port }],
      caDir,
    });
    dnsPort = (await gate.start()).dnsUdp;
    client = createSocket('udp4');
    client.on('message', (m) => replies.get(m.readUInt16BE(0))?.(m));
    await new Promise<void>((r) => client.bind(0, SANDBOX, () => r()));
  });
  after(() => {
    client?.close();
    up?.close();
    gate?.close();
    execFileSync('nft', ['delete', 'table', 'inet', TABLE], { stdio: 'ignore' });
    rmSync(caDir, { recursive: true, force: true });
  });

  it('a sandbox with injection rules is proxied also with internet (joins the ruled set); without them it leaves', async () => {
    const rule = { secret: 'S', domains: ['api.test'], format: '{value}', placeholder: 'sbx-secret-1', value: 'v' };
    await gate.apply('s2', SANDBOX, 'internet', [rule]);
    assert.deepEqual([addrSet('egress_internet'), addrSet('egress_ruled')], [[SANDBOX], [SANDBOX]]);
    assert.ok(gate.allowsName(SANDBOX, 'anything.test'), 'internet keeps every name');
    await gate.apply('s2', SANDBOX, 'internet', []);
    assert.deepEqual([addrSet('egress_internet'), addrSet('egress_ruled')], [[SANDBOX], []]);
    await gate.apply('s2', SANDBOX, { allow: ['api.test'] }, [rule]);
    assert.deepEqual([addrSet('egress_internet'), addrSet('egress_ruled')], [[], [SANDBOX]]);
    await gate.apply('s2', SANDBOX, 'internet', [rule]);
    await gate.release(SANDBOX);
    assert.deepEqual([addrSet('egress_internet'), addrSet('egress_ruled')], [[], []]);
    assert.ok(gate.caCertPem?.includes('BEGIN CERTIFICATE'));
  });

  it(`past ${MAX_NAMES_PER_SANDBOX} names the oldest goes with its addresses (unless another name holds one); a narrowing leaves nothing`, async () => {
    await gate.apply('s1', SANDBOX, { allow: ['old.test', '*.fill.test'] });
    await askAll(['old.test']);
    assert.deepEqual([...resolvedSet().keys()], [A]);
    // n0 holds A too; n1..n1023 hold B: 1,025 names, old.test is evicted, A stays (n0 holds it).
    await askAll(Array.from({ length: MAX_NAMES_PER_SANDBOX }, (_, i) => `n${i}.fill.test`));
    assert.deepEqual([...resolvedSet().keys()].sort(), [A, B], 'A is still held by n0');
    // One more name: n0 goes, and A with it.
    await askAll([`n${MAX_NAMES_PER_SANDBOX}.fill.test`]);
    assert.deepEqual([...resolvedSet().keys()], [B], 'the evicted name left its address in the set');
    // old.test is allowed again by name, but its address stays out until it is asked again.
    assert.ok(gate.allowsName(SANDBOX, 'old.test'));
    await gate.apply('s1', SANDBOX, { allow: ['n5.fill.test'] });
    assert.deepEqual([...resolvedSet().keys()], [B]);
    await gate.apply('s1', SANDBOX, { allow: ['other.test'] });
    assert.deepEqual([...resolvedSet().keys()], [], 'a narrowing left an address no rule allows');
  });

  it('an address two names hold keeps the later of their timeouts, and loses it with the name that gave it', async () => {
    await gate.apply('s1', SANDBOX, { allow: ['long.test', 'short.test'] });
    await askAll(['long.test', 'short.test']);
    const t = resolvedSet().get(C);
    assert.ok(t !== undefined && t > 3000, `timeout ${t}: the short answer cut the long one's`);
    await gate.apply('s1', SANDBOX, { allow: ['short.test'] });
    const t2 = resolvedSet().get(C);
    assert.ok(t2 !== undefined && t2 <= 20, `timeout ${t2}: the dropped name's time outlived it`);
    await gate.release(SANDBOX);
    assert.deepEqual([...resolvedSet().keys()], []);
  });
});
