/**
 * Crash-test child: creates sandboxes one after another forever, printing `created <id>`
 * after each, until the parent kills it with SIGKILL (mid-create, on purpose).
 * argv: <json LocalDriverOptions>
 */
import { LocalDriver } from '../../src/runtime/local/driver.js';

const driver = new LocalDriver(JSON.parse(process.argv[2]));
await driver.init();
await driver.recover();
const limits = { memoryBytes: 64 * 1024 * 1024, cpus: 0.5, pids: 32, rootDiskBytes: 64 * 1024 * 1024 };
for (let i = 0; i < 50; i++) {
  const id = `crash_${i}`;
  const volumes = i % 2 === 0 ? [{ name: 'crashvol', mountPath: '/data', sizeGb: 1 }] : [];
  await driver.create({ id, image: 'local/busybox:latest', env: {}, volumes, limits });
  if (i === 0) await driver.exec(id, 'echo durable > /data/f && sync /data/f');
  process.stdout.write(`created ${id}\n`);
}
