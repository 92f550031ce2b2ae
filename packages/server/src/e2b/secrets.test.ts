import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { SandboxdError } from '@sandboxd/protocol';
import {
  descriptionOf,
  e2bEgressOf,
  e2bRulesOf,
  metadataOf,
  namesOf,
  referencedNames,
  secretIdOf,
  secretRulesOf,
} from './secrets.js';

/*
 * The E2B door's mapping of secrets and network transform rules (pure parts). The routes, on
 * the fake runtime: control.test.ts; the unchanged `e2b` SDK: test/e2e/e2b/secrets.test.ts.
 */

const id = (n: string) => n;
/** `${e2b.secrets.<n>}`, as E2B's Secret.fill writes it. */
const R = (n: string) => ['$', '{e2b.secrets.', n, '}'].join('');
const problemAt = (fn: () => unknown, path: string, text: RegExp) =>
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof SandboxdError && e.kind === 'validation');
    assert.equal((e.details as Array<{ path: string }>)[0].path, path);
    assert.match(e.message, text);
    return true;
  });

describe('E2B secrets mapping', () => {
  it('secretID is stable and name-derived; lookups try the id, then the lower-cased name, then the name', () => {
    assert.equal(secretIdOf('openai-key'), 'sec_6f70656e61692d6b6579');
    assert.deepEqual(namesOf(secretIdOf('openai-key')), ['openai-key']);
    assert.deepEqual(namesOf(secretIdOf('OPENAI')), ['OPENAI']);
    assert.deepEqual(namesOf('openai'), ['openai']);
    assert.deepEqual(namesOf('OpenAI'), ['openai', 'OpenAI']);
    // Not a valid id (odd hex, or not a name once decoded): a name.
    assert.deepEqual(namesOf('sec_abc'), ['sec_abc']);
    assert.deepEqual(namesOf('sec_00'), ['sec_00']);
  });

  it('metadata is kept as JSON in the description, and read back; a plain description is {description}', () => {
    assert.equal(descriptionOf(undefined), '');
    assert.equal(descriptionOf({}), '');
    const d = descriptionOf({ team: 'ml', env: 'prod' });
    assert.equal(d, '{"team":"ml","env":"prod"}');
    assert.deepEqual(metadataOf(d), { team: 'ml', env: 'prod' });
    assert.deepEqual(metadataOf(''), {});
    assert.deepEqual(metadataOf('prod key'), { description: 'prod key' });
    assert.deepEqual(metadataOf('{not json'), { description: '{not json' });
    assert.deepEqual(metadataOf('{"n":1}'), { description: '{"n":1}' });
    problemAt(() => descriptionOf({ big: 'x'.repeat(1100) }), '/metadata', /at most 1024 characters/);
  });

  it('maps header transforms with one reference onto rules, merging domains; shows them back', () => {
    const rules = secretRulesOf(
      {
        'API.example.com': [{ transform: { headers: { Authorization: `Bearer ${R('openai')}` } } }],
        '*.example.org': [
          { transform: { headers: { Authorization: `Bearer ${R('openai')}`, 'X-Key': `${R('gh')}` } } },
          {},
          { transform: {} },
        ],
      },
      (n) => n.toUpperCase(),
    );
    assert.deepEqual(rules, [
      {
        secret: 'OPENAI',
        domains: ['api.example.com', '*.example.org'],
        header: 'Authorization',
        format: 'Bearer {value}',
      },
      { secret: 'GH', domains: ['*.example.org'], header: 'X-Key', format: '{value}' },
    ]);
    assert.deepEqual(e2bRulesOf(rules), {
      'api.example.com': [{ transform: { headers: { Authorization: `Bearer ${R('OPENAI')}` } } }],
      '*.example.org': [{ transform: { headers: { Authorization: `Bearer ${R('OPENAI')}`, 'X-Key': `${R('GH')}` } } }],
    });
    assert.equal(e2bRulesOf([{ secret: 'A', domains: ['a.example.com'] }]), undefined);
    assert.equal(e2bRulesOf(undefined), undefined);
    assert.deepEqual(secretRulesOf(undefined, id), []);
    assert.deepEqual(secretRulesOf({}, id), []);
    assert.deepEqual(referencedNames({ a: [{ transform: { headers: { h: `x ${R('k-1')} y` } } }] }), ['k-1']);
  });

  it('refuses a header with no reference, or two, or a stray {value}, and malformed rules, naming the path', () => {
    const at = (rules: unknown, path: string, text: RegExp) => problemAt(() => secretRulesOf(rules, id), path, text);
    at(
      { 'a.com': [{ transform: { headers: { 'X-Fixed': 'plain' } } }] },
      '/network/rules/a.com/0/transform/headers/X-Fixed',
      /holds no \$\{e2b\.secrets\.NAME\} reference: sandboxd injects secrets only/,
    );
    at(
      { 'a.com': [{ transform: { headers: { H: `${R('a')}:${R('b')}` } } }] },
      '/network/rules/a.com/0/transform/headers/H',
      /more than one/,
    );
    at(
      { 'a.com': [{ transform: { headers: { H: `{value} ${R('a')}` } } }] },
      '/network/rules/a.com/0/transform/headers/H',
      /the text \{value\}/,
    );
    at([], '/network/rules', /is an object/);
    at({ 'a.com': {} }, '/network/rules/a.com', /is a list/);
    at({ 'a.com': [{ transform: { body: 'x' } }] }, '/network/rules/a.com/0/transform/body', /headers only/);
    at({ 'a.com': [{ match: 1 }] }, '/network/rules/a.com/0/match', /transform only/);
    at(
      { 'a.com': [{ transform: { headers: { H: 1 } } }] },
      '/network/rules/a.com/0/transform/headers/H',
      /is a string/,
    );
  });

  it('shows egress as allowOut/denyOut', () => {
    assert.deepEqual(e2bEgressOf('none'), { denyOut: ['0.0.0.0/0'] });
    assert.deepEqual(e2bEgressOf('internet'), {});
    assert.deepEqual(e2bEgressOf({ allow: ['a.com'] }), { allowOut: ['a.com'], denyOut: ['0.0.0.0/0'] });
  });
});
