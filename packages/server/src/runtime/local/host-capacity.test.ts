import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseMemAvailable, readHostCapacity } from './host-capacity.js';

const MEMINFO = `MemTotal:       24684032 kB
MemFree:        22316544 kB
MemAvailable:   23665664 kB
Buffers:          102400 kB
`;

describe('host capacity readers', () => {
  it('MemAvailable of /proc/meminfo, in bytes; null without it', () => {
    assert.equal(parseMemAvailable(MEMINFO), 23665664 * 1024);
    assert.equal(parseMemAvailable('MemTotal: 1 kB\nMemFree: 1 kB\n'), null);
    assert.equal(parseMemAvailable(''), null);
  });

  it('reads memory and the free space of the data dir through the readers; a reader that fails gives null', () => {
    const seen: string[] = [];
    const got = readHostCapacity('/data', {
      meminfo: () => MEMINFO,
      statfs: (p) => {
        seen.push(p);
        return { bavail: 1000, bsize: 4096 };
      },
    });
    assert.deepEqual(got, { memoryAvailableBytes: 23665664 * 1024, diskFreeBytes: 4_096_000 });
    assert.deepEqual(seen, ['/data']);
    const fail = () => {
      throw Object.assign(new Error('ENOENT'), { code: 'ENOENT' });
    };
    assert.deepEqual(readHostCapacity('/nonexistent', { meminfo: fail, statfs: fail }), {
      memoryAvailableBytes: null,
      diskFreeBytes: null,
    });
  });

  it('on this host: both figures are known and positive', () => {
    const got = readHostCapacity('/');
    assert.ok(got.memoryAvailableBytes !== null && got.memoryAvailableBytes > 0);
    assert.ok(got.diskFreeBytes !== null && got.diskFreeBytes > 0);
  });
});
