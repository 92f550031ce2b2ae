import assert from 'node:assert/strict';
import { test } from 'node:test';
import { SandboxdError } from '@sandboxd/protocol';
import { parseRef } from './ref.js';

test('normalises references like docker', () => {
  const cases: [string, string][] = [
    ['debian', 'docker.io/library/debian:latest'],
    ['debian:bookworm', 'docker.io/library/debian:bookworm'],
    ['library/debian', 'docker.io/library/debian:latest'],
    ['docker.io/debian', 'docker.io/library/debian:latest'],
    ['index.docker.io/library/debian:12', 'docker.io/library/debian:12'],
    ['user/app:v1.2', 'docker.io/user/app:v1.2'],
    ['ghcr.io/o/r/img:x', 'ghcr.io/o/r/img:x'],
    ['127.0.0.1:5000/x:1', '127.0.0.1:5000/x:1'],
    ['localhost/x', 'localhost/x:latest'],
    ['localhost:5000/a/b', 'localhost:5000/a/b:latest'],
    ['my-reg.example.com:443/a_b/c.d-e__f:t', 'my-reg.example.com:443/a_b/c.d-e__f:t'],
    [`x@sha256:${'a'.repeat(64)}`, `docker.io/library/x@sha256:${'a'.repeat(64)}`],
    [`x:1@sha256:${'b'.repeat(64)}`, `docker.io/library/x:1@sha256:${'b'.repeat(64)}`],
    ['local/busybox', 'local/busybox:latest'],
    ['local/debian:bookworm', 'local/debian:bookworm'],
  ];
  for (const [input, want] of cases) assert.equal(parseRef(input).canonical, want, input);
});

test('local/ is its own namespace; local.example/x is a registry', () => {
  const l = parseRef('local/busybox');
  assert.equal(l.local, true);
  assert.equal(l.domain, 'local');
  assert.equal(l.path, 'busybox');
  const r = parseRef('local.example/x');
  assert.equal(r.local, false);
  assert.equal(r.domain, 'local.example');
  // `local` alone is a Docker Hub official image name, not the namespace.
  assert.equal(parseRef('local').canonical, 'docker.io/library/local:latest');
});

test('invalid references are validation errors naming the problem', () => {
  const bad: [string, RegExp][] = [
    ['', /empty/],
    ['Debian', /lowercase/],
    ['foo/Bar', /lowercase/],
    ['debian:', /tag/],
    ['debian:-x', /tag/],
    ['debian@sha256:xyz', /digest/],
    ['a b', /whitespace/],
    ['a//b', /component/],
    ['-a', /component/],
    ['a..b', /component/],
    ['reg.io:99999/x', /registry host/],
    [':tag', /missing repository/],
    [`local/x@sha256:${'a'.repeat(64)}`, /local/],
    [`x/${'a'.repeat(300)}`, /(long|255)/],
  ];
  for (const [input, msg] of bad) {
    assert.throws(
      () => parseRef(input),
      (e: unknown) => e instanceof SandboxdError && e.kind === 'validation' && msg.test(e.message),
      `${JSON.stringify(input)} should fail with ${msg}`,
    );
  }
});

test('snapshot refs: snapshot/<owner>/<name> as given, made here (never pulled); any other snapshot/ ref is invalid', () => {
  for (const ref of [
    'snapshot/acct_1/my-env',
    'snapshot/a/b.c_d-e',
    'snapshot/0/x..y',
    `snapshot/${'a'.repeat(64)}/z`,
    `snapshot/acct_1/_l.${'0123456789abcdef'.repeat(4)}`, // an image build's layer (internal: starts with _)
    `snapshot/a/_${'x'.repeat(127)}`,
  ]) {
    const r = parseRef(ref);
    assert.deepEqual([r.canonical, r.local, r.snapshot, r.domain], [ref, true, true, 'snapshot']);
  }
  for (const ref of [
    'snapshot/x',
    'snapshot/a/b/c',
    'snapshot/A/b',
    'snapshot/a/B',
    'snapshot/a/-b',
    'snapshot/a/b:1',
    `snapshot/a/b@sha256:${'a'.repeat(64)}`,
    `snapshot/${'a'.repeat(65)}/b`,
    `snapshot/a/${'b'.repeat(64)}`,
    'snapshot/a/_',
    `snapshot/a/_${'x'.repeat(128)}`,
    'snapshot/a/_L.x',
    'snapshot/a/.x',
  ]) {
    assert.throws(
      () => parseRef(ref),
      (e: unknown) => e instanceof SandboxdError && e.kind === 'validation' && /snapshot/.test(e.message),
      ref,
    );
  }
  assert.equal(parseRef('snapshots/a/b').snapshot, undefined, 'another docker.io repository');
});
