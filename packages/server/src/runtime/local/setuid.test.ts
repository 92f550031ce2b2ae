import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { SandboxdError } from '@sandboxd/protocol';
import { buildOciConfig } from './bundle/oci-config.js';
import { allowsSetuid, SETUID_LABEL } from './setuid.js';

describe('org.sandboxd.setuid', () => {
  it('is off without the label, on with "allow", and any other value is refused naming the image', () => {
    assert.equal(allowsSetuid(undefined, 'x'), false);
    assert.equal(allowsSetuid({ other: 'allow' }, 'x'), false);
    assert.equal(allowsSetuid({ [SETUID_LABEL]: 'allow' }, 'x'), true);
    for (const bad of ['true', 'yes', '', 'ALLOW'])
      assert.throws(
        () => allowsSetuid({ [SETUID_LABEL]: bad }, 'local/odd:1'),
        (e: unknown) =>
          e instanceof SandboxdError &&
          e.kind === 'validation' &&
          /local\/odd:1.*org\.sandboxd\.setuid/.test(e.message),
      );
  });

  it('turns no_new_privs off in the OCI config, nothing else', () => {
    const base = {
      id: 'a',
      instance: 'i',
      hostname: 'a',
      rootfs: '/r',
      env: [],
      limits: { cpus: 1, memoryBytes: 1 << 28, pids: 100, rootDiskBytes: 1 << 30 },
      uidBase: 100000,
      agentPath: '/agent',
      etcFiles: { hosts: '/h', hostname: '/n' },
      volumes: [],
      seccomp: { defaultAction: 'SCMP_ACT_ERRNO', syscalls: [] },
      cgroupsPath: 'x',
    } as unknown as Parameters<typeof buildOciConfig>[0];
    const off = buildOciConfig(base) as { process: Record<string, unknown> };
    const on = buildOciConfig({ ...base, allowSetuid: true }) as { process: Record<string, unknown> };
    assert.equal(off.process.noNewPrivileges, true);
    assert.equal(on.process.noNewPrivileges, false);
    assert.deepEqual({ ...on.process, noNewPrivileges: true }, off.process);
    assert.deepEqual({ ...on, process: null }, { ...off, process: null });
  });
});
