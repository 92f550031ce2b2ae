import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { breadcrumbs, childPath, formatSize, normalizePath, parentPath, sortEntries } from './files-util.js';

describe('file browser helpers', () => {
  it('normalizePath: absolute, no empty, . or .. segments; relative input from the folder given', () => {
    assert.equal(normalizePath('/'), '/');
    assert.equal(normalizePath(''), '/');
    assert.equal(normalizePath('  /work/  '), '/work');
    assert.equal(normalizePath('//a///b/./c/'), '/a/b/c');
    assert.equal(normalizePath('/a/b/../c'), '/a/c');
    assert.equal(normalizePath('/../../etc'), '/etc');
    assert.equal(normalizePath('sub/dir', '/work'), '/work/sub/dir');
    assert.equal(normalizePath('..', '/work/sub'), '/work');
    assert.equal(normalizePath('a b/ü', '/'), '/a b/ü');
  });

  it('parentPath and childPath', () => {
    assert.equal(parentPath('/'), '/');
    assert.equal(parentPath('/work'), '/');
    assert.equal(parentPath('/work/a/'), '/work');
    assert.equal(childPath('/', 'a.txt'), '/a.txt');
    assert.equal(childPath('/work', 'a.txt'), '/work/a.txt');
  });

  it('breadcrumbs name each segment with the path it opens', () => {
    assert.deepEqual(breadcrumbs('/'), [{ name: '/', path: '/' }]);
    assert.deepEqual(breadcrumbs('/work/sub'), [
      { name: '/', path: '/' },
      { name: 'work', path: '/work' },
      { name: 'sub', path: '/work/sub' },
    ]);
  });

  it('formatSize uses binary units', () => {
    assert.equal(formatSize(0), '0 B');
    assert.equal(formatSize(1023), '1023 B');
    assert.equal(formatSize(1024), '1 KiB');
    assert.equal(formatSize(1536), '1.5 KiB');
    assert.equal(formatSize(20 * 1024 * 1024), '20 MiB');
    assert.equal(formatSize(1024 * 1024 - 1), '1 MiB');
    assert.equal(formatSize(5.25 * 1024 ** 3), '5.3 GiB');
    assert.equal(formatSize(-1), '—');
  });

  it('sortEntries: folders first, then by name, numbers compared as numbers', () => {
    const e = (name: string, type: string) => ({ name, type });
    const sorted = sortEntries([
      e('b.txt', 'file'),
      e('z', 'dir'),
      e('file10', 'file'),
      e('link', 'symlink'),
      e('a', 'dir'),
      e('file9', 'file'),
    ]);
    assert.deepEqual(
      sorted.map((x) => x.name),
      ['a', 'z', 'b.txt', 'file9', 'file10', 'link'],
    );
  });
});
