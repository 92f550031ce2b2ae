/**
 * The parts of a local driver made from the server config report through the server's
 * logger: here the image store, whose warnings (pulls without a network namespace, work
 * dirs it cannot remove) would otherwise go nowhere.
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { test } from 'node:test';
import pino from 'pino';
import { loadConfig } from '../../config.js';
import { createLocalDriver } from './driver.js';

test("the image store of a driver made from the config logs to the server's logger", () => {
  const base = mkdtempSync(join(tmpdir(), 'sbx-parts-'));
  try {
    // A work dir of a process that is gone (pid 1 with another start time): the store removes
    // it when it starts, and says so.
    mkdirSync(join(base, 'images', 'tmp', '1.1.pull'), { recursive: true });
    const lines: Array<Record<string, unknown>> = [];
    const sink = new Writable({
      write(chunk, _enc, done) {
        for (const l of String(chunk).split('\n').filter(Boolean)) lines.push(JSON.parse(l));
        done();
      },
    });
    const logger = pino({ level: 'info' }, sink);
    const config = loadConfig({
      SANDBOXD_DATA_DIR: join(base, 'data'),
      SANDBOXD_IMAGE_DIR: join(base, 'images'),
      SANDBOXD_RUN_DIR: join(base, 'run'),
    });
    createLocalDriver(config, logger);
    const line = lines.find((l) => String(l.msg).includes('stale work dir'));
    assert.ok(line, JSON.stringify(lines));
    assert.equal(line.component, 'images');
  } finally {
    rmSync(base, { recursive: true, force: true });
  }
});
