import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { SandboxdError } from '@sandboxd/protocol';
import { FakeDriver } from './driver.js';

const spec = (id: string, image = 'local/busybox:latest') => ({
  id,
  image,
  env: { GREETING: 'hi' },
  volumes: [{ name: 'acc_x__v', mountPath: '/v', sizeGb: 1 }],
  limits: { memoryBytes: 1, cpus: 1, pids: 1, rootDiskBytes: 1 },
});

describe('FakeDriver', () => {
  it('knows the two local images and refuses others with template_not_found', async () => {
    const d = new FakeDriver();
    await d.create(spec('a'));
    await d.create(spec('b', 'local/debian:bookworm'));
    await assert.rejects(d.create(spec('c', 'debian:bookworm')), (e: SandboxdError) => e.kind === 'template_not_found');
  });

  it('runs its tiny command subset', async () => {
    const d = new FakeDriver();
    await d.create(spec('a'));
    assert.equal((await d.exec('a', 'echo "a  b" $GREETING')).stdout, 'a  b hi\n');
    assert.equal((await d.exec('a', 'printenv GREETING', { env: { GREETING: 'yo' } })).stdout, 'yo\n');
    assert.equal((await d.exec('a', 'exit 7')).exitCode, 7);
    assert.equal((await d.exec('a', 'false')).exitCode, 1);
    assert.equal((await d.exec('a', 'true')).exitCode, 0);
    assert.equal((await d.exec('a', 'ls')).exitCode, 127);
    assert.equal((await d.exec('a', 'sleep 5', { timeoutMs: 10 })).exitCode, 124);
    assert.equal((await d.exec('a', 'echo 12345', { maxOutputBytes: 3 })).truncated, true);
  });

  it('volumes: kept after delete, conflict on another size, in use while mounted', async () => {
    const d = new FakeDriver();
    await d.create(spec('a'));
    await assert.rejects(d.deleteVolume('acc_x__v'), (e: SandboxdError) => e.kind === 'conflict');
    await assert.rejects(d.ensureVolume('acc_x__v', 2), (e: SandboxdError) => e.kind === 'conflict');
    await d.delete('a');
    assert.equal((await d.listVolumes()).length, 1);
    await d.deleteVolume('acc_x__v');
    await assert.rejects(d.exec('a', 'true'), (e: SandboxdError) => e.kind === 'not_found');
  });
});
