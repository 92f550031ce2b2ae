import { runDriverConformance } from '../conformance.js';
import { FakeDriver } from './driver.js';

runDriverConformance({
  name: 'fake',
  image: 'local/busybox:latest',
  make: async () => {
    const d = new FakeDriver();
    await d.init();
    await d.recover();
    return d;
  },
  destroy: async (d) => d.close(),
});
