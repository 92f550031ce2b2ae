import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { timestampMs } from '@bufbuild/protobuf/wkt';
import type { FileEntry } from '@sandboxd/protocol';
import {
  needsHome,
  normalizePath,
  permissionsString,
  resolveEnvdPath,
  toEntryInfo,
  toFilesystemEvent,
} from './entries.js';
import { EventType, FileType } from './gen/filesystem_pb.js';

const entry = (o: Partial<FileEntry> = {}): FileEntry => ({
  name: 'f.txt',
  path: '/home/user/f.txt',
  type: 'file',
  size: 5,
  mode: 0o644,
  owner: 'user',
  group: 'user',
  modifiedAt: '2026-11-24T10:00:00.123Z',
  ...o,
});

describe('envd entries', () => {
  it('permissions read like Go FileMode.String()', () => {
    assert.equal(permissionsString('file', 0o644), '-rw-r--r--');
    assert.equal(permissionsString('file', 0o600), '-rw-------');
    assert.equal(permissionsString('file', 0), '----------');
    assert.equal(permissionsString('file', 0o777), '-rwxrwxrwx');
    assert.equal(permissionsString('dir', 0o755), 'drwxr-xr-x');
    assert.equal(permissionsString('dir', 0o1777), 'dtrwxrwxrwx');
    assert.equal(permissionsString('symlink', 0o777), 'Lrwxrwxrwx');
    assert.equal(permissionsString('file', 0o4755), 'urwxr-xr-x');
    assert.equal(permissionsString('dir', 0o2775), 'dgrwxrwxr-x');
    assert.equal(permissionsString('file', 0o6755), 'ugrwxr-xr-x');
    assert.equal(permissionsString('other', 0o666), '?rw-rw-rw-');
    assert.equal(permissionsString('other', 0o1666), 't?rw-rw-rw-');
  });

  it('maps an entry to EntryInfo: type, size as int64, permission bits, names, time', () => {
    const e = toEntryInfo(entry({ mode: 0o4755 }));
    assert.equal(e.name, 'f.txt');
    assert.equal(e.path, '/home/user/f.txt');
    assert.equal(e.type, FileType.FILE);
    assert.equal(e.size, 5n);
    assert.equal(e.mode, 0o755, 'the permission bits only, as envd');
    assert.equal(e.permissions, 'urwxr-xr-x');
    assert.deepEqual([e.owner, e.group], ['user', 'user']);
    assert.ok(e.modifiedTime);
    assert.equal(timestampMs(e.modifiedTime), Date.parse('2026-11-24T10:00:00.123Z'));
    assert.equal(e.symlinkTarget, undefined);
    assert.deepEqual(e.metadata, {});
    assert.equal(toEntryInfo(entry({ type: 'dir' })).type, FileType.DIRECTORY);
    assert.equal(toEntryInfo(entry({ type: 'other' })).type, FileType.UNSPECIFIED);
    assert.equal(toEntryInfo(entry({ modifiedAt: 'garbage' })).modifiedTime, undefined);
    assert.equal(toEntryInfo(entry({ size: 2 ** 40 })).size, 2n ** 40n);
  });

  it('makes a relative symlink target absolute against the link directory', () => {
    const link = (symlinkTarget: string) =>
      toEntryInfo(entry({ type: 'symlink', name: 'l', path: '/a/b/l', mode: 0o777, symlinkTarget }));
    assert.equal(link('f.txt').symlinkTarget, '/a/b/f.txt');
    assert.equal(link('../c/d').symlinkTarget, '/a/c/d');
    assert.equal(link('/etc/passwd').symlinkTarget, '/etc/passwd');
    assert.equal(link('f.txt').type, FileType.SYMLINK);
    assert.equal(link('f.txt').permissions, 'Lrwxrwxrwx');
  });

  it('names events relative to the watched directory', () => {
    const ev = (type: 'create' | 'write' | 'remove' | 'rename' | 'chmod', path: string) =>
      toFilesystemEvent('/w', { type, path, entry: entry({ path }) }, false);
    assert.deepEqual(ev('create', '/w/a.txt'), { name: 'a.txt', type: EventType.CREATE });
    assert.deepEqual(ev('write', '/w/sub/b'), { name: 'sub/b', type: EventType.WRITE });
    assert.deepEqual(ev('remove', '/w/x'), { name: 'x', type: EventType.REMOVE });
    assert.deepEqual(ev('rename', '/w/x'), { name: 'x', type: EventType.RENAME });
    assert.deepEqual(ev('chmod', '/w'), { name: '.', type: EventType.CHMOD });
    assert.equal(ev('create', '/elsewhere/x'), null);
    assert.equal(toFilesystemEvent('/w', { type: 'overflow' }, false), null);
    assert.deepEqual(toFilesystemEvent('/', { type: 'create', path: '/etc' }, false), {
      name: 'etc',
      type: EventType.CREATE,
    });
    const withEntry = toFilesystemEvent('/w', { type: 'create', path: '/w/a', entry: entry({ path: '/w/a' }) }, true);
    assert.equal(withEntry?.entry?.path, '/w/a');
    assert.equal(toFilesystemEvent('/w', { type: 'remove', path: '/w/a' }, true)?.entry, undefined);
  });

  it('resolves paths like envd: absolute as they are, relative and ~ against the home', () => {
    assert.equal(needsHome('/x'), false);
    assert.equal(needsHome('x'), true);
    assert.equal(needsHome(''), true);
    assert.equal(needsHome('~'), true);
    assert.equal(resolveEnvdPath('/etc/../x', '/home/user'), '/etc/../x');
    assert.equal(resolveEnvdPath('a.txt', '/home/user'), '/home/user/a.txt');
    assert.equal(resolveEnvdPath('a/b/', '/home/user'), '/home/user/a/b');
    assert.equal(resolveEnvdPath('a/../../x', '/home/user'), '/home/x');
    assert.equal(resolveEnvdPath('../../../..', '/home/user'), '/');
    assert.equal(resolveEnvdPath('', '/home/user'), '/home/user');
    assert.equal(resolveEnvdPath('.', '/home/user'), '/home/user');
    assert.equal(resolveEnvdPath('~', '/home/user'), '/home/user');
    assert.equal(resolveEnvdPath('~/', '/home/user'), '/home/user');
    assert.equal(resolveEnvdPath('~/d/f', '/home/user'), '/home/user/d/f');
    assert.equal(resolveEnvdPath('x', '/'), '/x');
    assert.throws(() => resolveEnvdPath('~root/x', '/home/user'), { kind: 'validation' });
  });

  it('normalizes paths as the file tool reports them', () => {
    assert.equal(normalizePath('/a//b/'), '/a/b');
    assert.equal(normalizePath('/'), '/');
    assert.equal(normalizePath('//'), '/');
    assert.equal(normalizePath('/a/b'), '/a/b');
  });
});
