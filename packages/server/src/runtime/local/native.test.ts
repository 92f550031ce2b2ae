import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { linksMusl, NATIVE_SRC_DIR, nativeBin } from './native.js';

/** Whether an ELF file asks for a program interpreter (PT_INTERP): a dynamically linked one. */
function hasInterpreter(elf: Buffer): boolean {
  assert.equal(elf.subarray(0, 4).toString('latin1'), '\x7fELF');
  assert.equal(elf[4], 2, 'a 64-bit ELF');
  const phoff = Number(elf.readBigUInt64LE(32));
  const phentsize = elf.readUInt16LE(54);
  const phnum = elf.readUInt16LE(56);
  for (let i = 0; i < phnum; i++) if (elf.readUInt32LE(phoff + i * phentsize) === 3) return true;
  return false;
}

const sources = readdirSync(NATIVE_SRC_DIR).filter((f) => f.endsWith('.c'));
const musl = sources.filter((f) => linksMusl(readFileSync(join(NATIVE_SRC_DIR, f), 'utf8')));

describe('native helpers', () => {
  it('the helpers that start per sandbox are marked for musl', () => {
    for (const h of ['exec-agent', 'idmap-mount', 'net-attach', 'spawner', 'tty-relay', 'snapshot-apply'])
      assert.ok(musl.includes(`${h}.c`), h);
  });

  for (const src of musl) {
    it(`${src} builds as a static musl program`, () => {
      const elf = readFileSync(nativeBin(src.slice(0, -2)));
      assert.equal(hasInterpreter(elf), false, 'statically linked (the agent runs inside sandboxes of any image)');
      // glibc's start-up code (what costs ~0.3 ms of cpuid per start on these machines)
      // reads its tunables from this variable; a musl program has no such string.
      assert.equal(elf.includes('GLIBC_TUNABLES'), false, 'not linked against glibc');
    });
  }

  it('seccomp-bpf stays dynamic against glibc (libseccomp)', () => {
    const elf = readFileSync(nativeBin('seccomp-bpf'));
    assert.equal(hasInterpreter(elf), true);
  });
});
