import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { freeze, freezeAsked, isFrozen, thaw } from './freezer.js';

const dirs: string[] = [];
after(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** A fixture cgroup tree: v1 (a `freezer` hierarchy) or v2 (unified only). */
function tree(v: 'v1' | 'v2'): string {
  const root = mkdtempSync(join(tmpdir(), `freezer-${v}-`));
  dirs.push(root);
  if (v === 'v1') {
    mkdirSync(join(root, 'freezer/par/c1'), { recursive: true });
    writeFileSync(join(root, 'freezer/par/c1/freezer.state'), 'THAWED\n');
  } else {
    writeFileSync(join(root, 'cgroup.controllers'), 'memory pids\n');
    mkdirSync(join(root, 'par/c1'), { recursive: true });
    writeFileSync(join(root, 'par/c1/cgroup.freeze'), '0\n');
    writeFileSync(join(root, 'par/c1/cgroup.events'), 'populated 1\nfrozen 0\n');
  }
  return root;
}

describe('freezer', () => {
  it('v1: writes FROZEN / THAWED to freezer.state and reads the state back', async () => {
    const root = tree('v1');
    assert.equal(await isFrozen('par', 'c1', root), false);
    await freeze('par', 'c1', root);
    assert.equal(readFileSync(join(root, 'freezer/par/c1/freezer.state'), 'utf8'), 'FROZEN');
    assert.equal(await isFrozen('par', 'c1', root), true);
    assert.equal(await freezeAsked('par', 'c1', root), true);
    await thaw('par', 'c1', root);
    assert.equal(await isFrozen('par', 'c1', root), false);
  });

  it('v2: writes cgroup.freeze and waits for cgroup.events to say frozen', async () => {
    const root = tree('v2');
    const p = freeze('par', 'c1', root);
    setTimeout(() => writeFileSync(join(root, 'par/c1/cgroup.events'), 'populated 1\nfrozen 1\n'), 20);
    await p;
    assert.equal(readFileSync(join(root, 'par/c1/cgroup.freeze'), 'utf8'), '1');
    assert.equal(await isFrozen('par', 'c1', root), true);
    await thaw('par', 'c1', root);
    assert.equal(readFileSync(join(root, 'par/c1/cgroup.freeze'), 'utf8'), '0');
    assert.equal(await freezeAsked('par', 'c1', root), false);
  });

  it('a missing cgroup: freeze and thaw reject, isFrozen says false', async () => {
    const root = tree('v1');
    await assert.rejects(freeze('par', 'nope', root), /cannot freeze/);
    await assert.rejects(thaw('par', 'nope', root), /cannot thaw/);
    assert.equal(await isFrozen('par', 'nope', root), false);
  });
});
