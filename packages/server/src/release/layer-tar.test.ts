import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import {
  chmodSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { writeLayerTar } from './layer-tar.js';

/** The same tree, made with other times and group/other bits (another checkout, another umask). */
function tree(dir: string, o: { time: number; fileMode: number; dirMode: number }): void {
  mkdirSync(join(dir, 'opt/app/lib'), { recursive: true });
  writeFileSync(join(dir, 'opt/app/b.txt'), 'b\n');
  writeFileSync(join(dir, 'opt/app/a.txt'), 'a\n');
  writeFileSync(join(dir, 'opt/app/lib/run.sh'), '#!/bin/sh\n');
  chmodSync(join(dir, 'opt/app/lib/run.sh'), 0o700 | (o.fileMode & 0o077 ? 0o055 : 0));
  for (const f of ['opt/app/a.txt', 'opt/app/b.txt']) chmodSync(join(dir, f), o.fileMode);
  symlinkSync('lib/run.sh', join(dir, 'opt/app/run'));
  for (const d of ['opt', 'opt/app', 'opt/app/lib']) chmodSync(join(dir, d), o.dirMode);
  for (const f of ['opt/app/a.txt', 'opt/app/b.txt', 'opt/app/lib/run.sh', 'opt/app/lib', 'opt/app', 'opt'])
    utimesSync(join(dir, f), o.time, o.time);
}

const sha = (f: string) => createHash('sha256').update(readFileSync(f)).digest('hex');

test('a layer tar depends on names, contents, owner bits and links only: not on times, umask or order', () => {
  const tmp = mkdtempSync(join(tmpdir(), 'layer-tar-'));
  try {
    tree(join(tmp, 'x'), { time: 1_000_000, fileMode: 0o644, dirMode: 0o755 });
    tree(join(tmp, 'y'), { time: 1_700_000_000, fileMode: 0o664, dirMode: 0o775 });
    tree(join(tmp, 'z'), { time: 1_800_000_000, fileMode: 0o600, dirMode: 0o700 });
    writeLayerTar(join(tmp, 'x'), ['opt'], join(tmp, 'x.tar'), 1_600_000_000);
    writeLayerTar(join(tmp, 'y'), ['opt'], join(tmp, 'y.tar'), 1_600_000_000);
    writeLayerTar(join(tmp, 'z'), ['opt'], join(tmp, 'z.tar'), 1_600_000_000);
    assert.equal(sha(join(tmp, 'x.tar')), sha(join(tmp, 'y.tar')));
    assert.equal(sha(join(tmp, 'x.tar')), sha(join(tmp, 'z.tar')));
    // Another epoch is another layer; so is another byte.
    writeLayerTar(join(tmp, 'x'), ['opt'], join(tmp, 'x2.tar'), 1_600_000_001);
    assert.notEqual(sha(join(tmp, 'x.tar')), sha(join(tmp, 'x2.tar')));
    writeFileSync(join(tmp, 'y/opt/app/a.txt'), 'A\n');
    writeLayerTar(join(tmp, 'y'), ['opt'], join(tmp, 'y2.tar'), 1_600_000_000);
    assert.notEqual(sha(join(tmp, 'x.tar')), sha(join(tmp, 'y2.tar')));
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
});
