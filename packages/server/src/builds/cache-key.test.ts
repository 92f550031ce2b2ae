import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { canonicalJson, configKey, imageKey, stepKey } from './cache-key.js';
import type { CopyStep, ImageConfig, RunStep, Step } from './plan.js';

const config: ImageConfig = {
  env: { PATH: '/usr/bin:/bin', LANG: 'C.UTF-8' },
  workingDir: '/app',
  user: 'app',
  entrypoint: null,
  cmd: ['serve'],
  labels: { a: 'b' },
  exposedPorts: ['80/tcp'],
  shell: ['/bin/sh', '-c'],
};
const run: RunStep = { line: 3, text: 'RUN make', kind: 'run', argv: ['/bin/sh', '-c', 'make'], args: { V: '1' } };
const copy: CopyStep = {
  line: 4,
  text: 'COPY . /app/',
  kind: 'copy',
  from: { kind: 'context' },
  sources: ['.'],
  dest: '/app/',
};
const parent = imageKey('sha256:0123');

describe('cache keys', () => {
  it('canonical JSON sorts keys at every depth and drops undefined members', () => {
    assert.equal(
      canonicalJson({ b: 1, a: { d: [3, { y: 1, x: undefined }], c: null } }),
      '{"a":{"c":null,"d":[3,{"y":1}]},"b":1}',
    );
    assert.equal(canonicalJson({ a: 1, b: 2 }), canonicalJson({ b: 2, a: 1 }));
    assert.equal(canonicalJson('x"'), '"x\\""');
  });

  it('are sha256 hex, stable across processes (golden values) and across key order', () => {
    // Golden values: a change here invalidates every cached layer (bump the prefix on purpose, not by accident).
    assert.equal(parent, '6204d8fe7268d778cc73e7c8a99cb88bb709f3669d86453488c20fd6226882ba');
    assert.equal(stepKey(parent, run, 'x', config), '62d09f92afd6e6dd1805d4a1129a39344822915b3e7d1de5d977ba00e8493b88');
    assert.equal(configKey(parent, config), '0dfc39f784edebb612ebb0b87ab34001a09fbaf060a64c19491bc77ea91399dc');
    const reordered = JSON.parse(
      JSON.stringify({ args: run.args, argv: run.argv, kind: run.kind, text: run.text, line: run.line }),
    );
    assert.equal(stepKey(parent, reordered as Step), stepKey(parent, run));
    const shuffledConfig = { ...config, env: { LANG: 'C.UTF-8', PATH: '/usr/bin:/bin' } };
    assert.equal(stepKey(parent, run, undefined, shuffledConfig), stepKey(parent, run, undefined, config));
    assert.equal(configKey(parent, shuffledConfig), configKey(parent, config));
  });

  it('ignore where the step was written, and the index of a --from stage', () => {
    assert.equal(stepKey(parent, { ...run, line: 99, text: 'RUN   make' }), stepKey(parent, run));
    const fromStage = (stage: number): CopyStep => ({ ...copy, from: { kind: 'stage', stage }, sources: ['/out'] });
    assert.equal(stepKey(parent, fromStage(0), 'k1'), stepKey(parent, fromStage(3), 'k1'));
    assert.notEqual(stepKey(parent, fromStage(0), 'k1'), stepKey(parent, fromStage(0), 'k2'));
  });

  it('change when anything meaningful changes', () => {
    const base = stepKey(parent, copy, 'h', config);
    const variants = [
      stepKey(imageKey('sha256:4567'), copy, 'h', config),
      stepKey(parent, copy, 'h2', config),
      stepKey(parent, copy, undefined, config),
      stepKey(parent, copy, 'h'),
      stepKey(parent, { ...copy, dest: '/srv/' }, 'h', config),
      stepKey(parent, { ...copy, chown: '1000' }, 'h', config),
      stepKey(parent, { ...copy, chmod: 0o755 }, 'h', config),
      stepKey(parent, { ...copy, add: true }, 'h', config),
      stepKey(parent, { ...copy, sources: ['src'] }, 'h', config),
      stepKey(parent, { ...copy, from: { kind: 'image', ref: 'alpine:3' } }, 'h', config),
      stepKey(parent, { ...copy, from: { kind: 'upload', hash: 'abc' } }, 'h', config),
      stepKey(parent, copy, 'h', { ...config, user: 'root' }),
      stepKey(parent, copy, 'h', { ...config, env: { ...config.env, X: '1' } }),
      stepKey(parent, copy, 'h', { ...config, workingDir: '/' }),
    ];
    assert.equal(new Set([base, ...variants]).size, variants.length + 1);
    const runs = [
      stepKey(parent, run),
      stepKey(parent, { ...run, argv: ['/bin/sh', '-c', 'make all'] }),
      stepKey(parent, { ...run, args: { V: '2' } }),
      stepKey(parent, { ...run, args: {} }),
      stepKey(parent, { line: 3, text: 'WORKDIR /app', kind: 'workdir', path: '/app' }),
      stepKey(parent, { line: 3, text: 'ENV A=1', kind: 'config', set: { env: { A: '1' } } }),
    ];
    assert.equal(new Set(runs).size, runs.length);
    assert.notEqual(configKey(parent, config), configKey(parent, { ...config, cmd: ['other'] }));
    assert.notEqual(configKey(parent, config), stepKey(parent, { line: 1, text: '', kind: 'config', set: config }));
    assert.notEqual(imageKey('a'), imageKey('b'));
  });
});
