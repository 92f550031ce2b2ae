import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseEgressRule, ruleAllowsName } from '@sandboxd/protocol';
import { checkEgress, decideEgress } from './egress.js';

describe('egress rules', () => {
  it('parses domains, wildcards and CIDRs, canonical; says why a rule is bad', () => {
    assert.deepEqual(parseEgressRule('PyPI.org.'), { kind: 'domain', name: 'pypi.org' });
    assert.deepEqual(parseEgressRule('*.npmjs.org'), { kind: 'wildcard', suffix: 'npmjs.org' });
    assert.deepEqual(parseEgressRule('203.0.113.0/24'), { kind: 'cidr', base: '203.0.113.0', len: 24 });
    assert.deepEqual(parseEgressRule('203.0.113.7'), { kind: 'cidr', base: '203.0.113.7', len: 32 });
    const why = (s: string) => (parseEgressRule(s) as { problem: string }).problem;
    assert.match(why('localhost'), /two labels/);
    assert.match(why('*'), /two labels/);
    assert.match(why('a.*.org'), /wildcard is allowed only as the whole first label/);
    assert.match(why('-x.org'), /label "-x"/);
    assert.match(why('10.1.2.3/8'), /host bits are set: did you mean 10\.0\.0\.0\/8/);
    assert.match(why('1.2.3.256'), /not an IPv4 address/);
    assert.match(why('0.0.0.0/0'), /too wide/);
    assert.match(why('1.2.3.4/33'), /0-32/);
    assert.match(why('1.2.3'), /two labels|IPv4|number/);
    assert.match(why(`${'a'.repeat(64)}.org`), /1-63/);
  });

  it('a domain allows that name only; a wildcard every name under it, not the name itself', () => {
    const d = parseEgressRule('pypi.org') as Parameters<typeof ruleAllowsName>[0];
    const w = parseEgressRule('*.npmjs.org') as Parameters<typeof ruleAllowsName>[0];
    assert.ok(ruleAllowsName(d, 'pypi.org'));
    assert.ok(!ruleAllowsName(d, 'files.pypi.org'));
    assert.ok(!ruleAllowsName(d, 'notpypi.org'));
    assert.ok(ruleAllowsName(w, 'registry.npmjs.org') && ruleAllowsName(w, 'a.b.npmjs.org'));
    assert.ok(!ruleAllowsName(w, 'npmjs.org') && !ruleAllowsName(w, 'evilnpmjs.org'));
  });

  it('checkEgress names each bad rule by its path and makes the rest canonical, without duplicates', () => {
    assert.deepEqual(checkEgress({ allow: ['A.org', 'a.org.', '*.B.org'] }, '/network/egress'), {
      allow: ['a.org', '*.b.org'],
    });
    assert.throws(
      () => checkEgress({ allow: ['ok.org', 'x', 'ok2.org', '1.2.3.4/40'] }, '/network/egress'),
      (e: { kind: string; details: { path: string }[] }) =>
        e.kind === 'validation' &&
        e.details.map((d) => d.path).join() === '/network/egress/allow/1,/network/egress/allow/3',
    );
  });

  it('the plan bounds what is asked (403 quota); the server default is lowered to the plan', () => {
    assert.equal(decideEgress('internet', 'none', 'internet'), 'internet');
    assert.deepEqual(decideEgress({ allow: ['a.org'] }, 'none', 'allow'), { allow: ['a.org'] });
    assert.throws(() => decideEgress('internet', 'none', 'allow'), { kind: 'quota' });
    assert.throws(() => decideEgress({ allow: ['a.org'] }, 'none', 'none'), { kind: 'quota' });
    assert.equal(decideEgress('none', 'internet', 'none'), 'none');
    assert.equal(decideEgress(undefined, 'internet', 'internet'), 'internet');
    assert.equal(decideEgress(undefined, 'internet', 'allow'), 'none');
    assert.equal(decideEgress(undefined, 'none', 'internet'), 'none');
  });
});
