import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  driverImageOf,
  isLayerNamespace,
  layerRef,
  parseLayerRef,
  parseTemplateImage,
  templateImage,
} from './snapshots.js';

const KEY = 'a'.repeat(64);

describe('image names of an account', () => {
  it('templates/<name>[:<tag>]: latest by default; a bad name or tag is invalid; other images are not templates', () => {
    assert.deepEqual(parseTemplateImage('templates/web'), { name: 'web', tag: 'latest' });
    assert.deepEqual(parseTemplateImage('templates/web:v1.2'), { name: 'web', tag: 'v1.2' });
    assert.equal(templateImage('web', 'v1'), 'templates/web:v1');
    for (const bad of [
      'templates/',
      'templates/Web',
      'templates/web:',
      'templates/web:.x',
      'templates/a/b',
      'templates/web:a:b',
    ])
      assert.deepEqual(parseTemplateImage(bad), { invalid: true }, bad);
    assert.equal(parseTemplateImage('local/busybox:latest'), null);
    assert.equal(parseTemplateImage('snapshots/x'), null);
  });

  it('layer refs: snapshot/<account>/_l.<64 hex>, never a snapshot name', () => {
    assert.equal(layerRef('acc_1', KEY), `snapshot/acc_1/_l.${KEY}`);
    assert.deepEqual(parseLayerRef(layerRef('acc_1', KEY)), { accountId: 'acc_1', key: KEY });
    assert.equal(parseLayerRef('snapshot/acc_1/web'), null);
    assert.equal(parseLayerRef(`snapshot/acc_1/_l.${KEY}x`), null);
    assert.equal(isLayerNamespace(layerRef('acc_1', KEY)), true);
    assert.equal(isLayerNamespace('snapshot/acc_1/_l.short'), true);
    assert.equal(isLayerNamespace('snapshot/acc_1/l.x'), false);
    assert.equal(isLayerNamespace('local/busybox:latest'), false);
  });

  it("a create's image: its own snapshots and templates, any other image as is, never the runtime's namespace", async () => {
    const find = {
      snapshot: async (name: string) =>
        name === 'snap' ? { state: 'ready' } : name === 'half' ? { state: 'creating' } : null,
      template: async (name: string, tag: string) =>
        name === 'web' && tag === 'latest' ? { driverRef: layerRef('acc_1', KEY) } : null,
    };
    assert.equal(await driverImageOf('templates/web', find, 'acc_1'), layerRef('acc_1', KEY));
    assert.equal(await driverImageOf('templates/web:latest', find, 'acc_1'), layerRef('acc_1', KEY));
    assert.equal(await driverImageOf('templates/web:v2', find, 'acc_1'), null);
    assert.equal(await driverImageOf('templates/Bad', find, 'acc_1'), null);
    assert.equal(await driverImageOf('snapshots/snap', find, 'acc_1'), 'snapshot/acc_1/snap');
    assert.equal(await driverImageOf('snapshots/half', find, 'acc_1'), null);
    assert.equal(await driverImageOf(layerRef('acc_1', KEY), find, 'acc_1'), null);
    assert.equal(await driverImageOf('local/busybox:latest', find, 'acc_1'), 'local/busybox:latest');
  });
});
