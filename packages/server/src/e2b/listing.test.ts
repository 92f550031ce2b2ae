import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { SandboxdError } from '@sandboxd/protocol';
import {
  decodeNextToken,
  encodeNextToken,
  matchesMetadata,
  pageOf,
  parseLimit,
  parseMetadataFilter,
  parseOrder,
  parseStartedAfter,
  parseStates,
} from './listing.js';

/** The `metadata` query value as E2B's SDK builds it (before the HTTP client encodes it as a parameter). */
function sdkMetadata(m: Record<string, string>): string {
  return new URLSearchParams(
    Object.fromEntries(Object.entries(m).map(([k, v]) => [encodeURIComponent(k), encodeURIComponent(v)])),
  ).toString();
}

const names = (field: string) => (e: SandboxdError) =>
  e.kind === 'validation' &&
  e.message.startsWith(`${field} `) &&
  (e.details as Array<{ in: string; path: string }>)[0].path === `/${field}` &&
  (e.details as Array<{ in: string }>)[0].in === 'query';

describe('E2B list: metadata filter', () => {
  it('reads what the SDK sends, odd characters included', () => {
    const m = { user: 'abc', app: 'prod', 'a b&c=d': 'x/y?z%25&=', ü: 'ö 1+2' };
    assert.deepEqual(parseMetadataFilter(sdkMetadata(m)), m);
    assert.deepEqual(parseMetadataFilter('user=abc&app=prod'), { user: 'abc', app: 'prod' }, 'a plain query string');
    assert.deepEqual(parseMetadataFilter('k='), { k: '' }, 'an empty value');
    assert.deepEqual(parseMetadataFilter(undefined), {});
    assert.deepEqual(parseMetadataFilter(''), {});
    const proto = parseMetadataFilter(`${encodeURIComponent('__proto__')}=x`);
    assert.deepEqual(Object.keys(proto), ['__proto__'], 'an own key like any other');
    assert.equal(matchesMetadata({}, proto), false, 'so it filters');
    assert.equal(matchesMetadata(JSON.parse('{"__proto__":"x"}'), proto), true);
  });

  it('refuses a malformed filter, naming metadata', () => {
    assert.throws(() => parseMetadataFilter('k=%E0%A4%A'), names('metadata'));
    assert.throws(() => parseMetadataFilter('=v'), names('metadata'));
    assert.throws(() => parseMetadataFilter('k=1&k=2'), names('metadata'));
  });

  it('matches when every pair is there; the empty filter matches all', () => {
    assert.equal(matchesMetadata({ a: '1', b: '2' }, { a: '1' }), true);
    assert.equal(matchesMetadata({ a: '1', b: '2' }, { a: '1', b: '3' }), false);
    assert.equal(matchesMetadata(undefined, { a: '1' }), false);
    assert.equal(matchesMetadata(undefined, {}), true);
    assert.equal(matchesMetadata({}, { toString: '' }), false, 'inherited names are not keys');
  });
});

describe('E2B list: other parameters', () => {
  it('state: comma-separated or repeated; both by default', () => {
    assert.deepEqual([...parseStates(undefined)], ['running', 'paused']);
    assert.deepEqual([...parseStates('running,paused')], ['running', 'paused']);
    assert.deepEqual([...parseStates(['paused'])], ['paused']);
    assert.throws(() => parseStates('running,stopped'), names('state'));
  });

  it('limit, order, startedAfter', () => {
    assert.equal(parseLimit(undefined), 100);
    assert.equal(parseLimit('2'), 2);
    for (const bad of ['0', '-1', '1.5', 'x', '1001', '']) assert.throws(() => parseLimit(bad), names('limit'), bad);
    assert.equal(parseOrder(undefined), 'desc');
    assert.equal(parseOrder('asc'), 'asc');
    assert.throws(() => parseOrder('up'), names('order'));
    assert.equal(parseStartedAfter('2030-01-01T00:00:00Z'), Date.UTC(2030, 0, 1));
    assert.equal(parseStartedAfter(undefined), undefined);
    assert.throws(() => parseStartedAfter('yesterday'), names('startedAfter'));
    assert.throws(() => parseStartedAfter('1'), names('startedAfter'));
  });
});

describe('E2B list: paging', () => {
  const items = [
    { createdAt: 10, id: 'b' },
    { createdAt: 30, id: 'a' },
    { createdAt: 20, id: 'c' },
    { createdAt: 20, id: 'd' },
  ];

  it('the token round-trips; anything else is refused naming nextToken', () => {
    const k = { createdAt: 1_900_000_000_000, id: 'sbx_abc' };
    const t = encodeNextToken(k);
    assert.match(t, /^[A-Za-z0-9_-]+$/);
    assert.deepEqual(decodeNextToken(t), k);
    for (const bad of ['', 'garbage!', Buffer.from('[1]').toString('base64url'), 'x'.repeat(300)])
      assert.throws(() => decodeNextToken(bad), names('nextToken'), bad);
  });

  it('pages newest first (then by id), each after the last key of the previous page', () => {
    const p1 = pageOf(items, { order: 'desc', limit: 2 });
    assert.deepEqual(
      p1.items.map((x) => x.id),
      ['a', 'd'],
    );
    assert.ok(p1.next);
    const p2 = pageOf(items, { order: 'desc', limit: 2, after: decodeNextToken(encodeNextToken(p1.next)) });
    assert.deepEqual(
      p2.items.map((x) => x.id),
      ['c', 'b'],
    );
    assert.equal(p2.next, undefined, 'nothing after the last page');
  });

  it('oldest first with asc; an item removed between pages does not shift them', () => {
    const p1 = pageOf(items, { order: 'asc', limit: 2 });
    assert.deepEqual(
      p1.items.map((x) => x.id),
      ['b', 'c'],
    );
    const rest = items.filter((x) => x.id !== 'b');
    const p2 = pageOf(rest, { order: 'asc', limit: 2, after: p1.next });
    assert.deepEqual(
      p2.items.map((x) => x.id),
      ['d', 'a'],
    );
    assert.equal(p2.next, undefined);
  });

  it('a page exactly as long as what is left has no next token', () => {
    assert.equal(pageOf(items, { order: 'desc', limit: 4 }).next, undefined);
    assert.deepEqual(pageOf([], { order: 'desc', limit: 4 }), { items: [] });
  });
});
