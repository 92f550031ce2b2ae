import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { gzipSync, zstdCompressSync } from 'node:zlib';
import { checkDiffIds } from './diff-ids.js';
import type { SelectedImage } from './oci-read.js';

const sha = (b: Buffer) => `sha256:${createHash('sha256').update(b).digest('hex')}`;

test('layers are checked against the diff_ids of the config, uncompressed as their media type says', async () => {
  const layout = mkdtempSync(join(tmpdir(), 'sbx-diffids-'));
  try {
    mkdirSync(join(layout, 'blobs', 'sha256'), { recursive: true });
    const blob = (b: Buffer) => {
      writeFileSync(join(layout, 'blobs', 'sha256', sha(b).slice(7)), b);
      return sha(b);
    };
    const tars = [Buffer.alloc(1024, 0), Buffer.concat([Buffer.from('not really a tar'), Buffer.alloc(1008)])];
    const layers = [
      { mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip', data: gzipSync(tars[0]) },
      { mediaType: 'application/vnd.oci.image.layer.v1.tar+zstd', data: zstdCompressSync(tars[1]) },
      { mediaType: 'application/vnd.oci.image.layer.v1.tar', data: tars[1] },
      { mediaType: 'application/vnd.docker.image.rootfs.diff.tar.gzip', data: gzipSync(tars[1]) },
    ].map((l) => ({ mediaType: l.mediaType, digest: blob(l.data), size: l.data.length }));
    const image = (diffIds: string[], ls = layers): SelectedImage => ({
      manifestDigest: 'sha256:00',
      configDigest: 'sha256:00',
      manifest: { schemaVersion: 2, config: { mediaType: 'x', digest: 'sha256:00', size: 0 }, layers: ls },
      config: { rootfs: { diff_ids: diffIds } },
    });
    const good = [sha(tars[0]), sha(tars[1]), sha(tars[1]), sha(tars[1])];
    await checkDiffIds(layout, image(good));
    await assert.rejects(checkDiffIds(layout, image([sha(tars[1]), ...good.slice(1)])), /diffid mismatch/);
    await assert.rejects(checkDiffIds(layout, image(good.slice(1))), /4 layers, the config 3/);
    const odd = [{ ...layers[0], mediaType: 'application/vnd.example.layer' }];
    await assert.rejects(checkDiffIds(layout, image([good[0]], odd)), /not supported/);
  } finally {
    rmSync(layout, { recursive: true, force: true });
  }
});
