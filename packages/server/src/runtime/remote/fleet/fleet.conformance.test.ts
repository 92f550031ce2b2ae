import { FakeRunners, MemoryRecords } from '../../../../test/fake-runners.js';
import { runDriverConformance } from '../../conformance.js';
import { FleetDriver } from './fleet.js';
import { fixedUrls } from './records.js';

/*
 * The fleet is a RuntimeDriver like any other: the shared conformance suite against a fleet
 * of two fake runners (creates spread over both; every later call must find its runner).
 */
runDriverConformance({
  name: 'fleet of two fake runners',
  image: 'local/busybox:latest',
  make: async () => {
    const runners = new FakeRunners({ 'http://one:1': 'one', 'http://two:1': 'two' });
    const fleet = new FleetDriver({
      source: fixedUrls(['http://one:1', 'http://two:1']),
      connect: runners.connect,
      records: new MemoryRecords(),
      downAfterMs: 5000,
      floors: { memoryBytes: 0, diskBytes: 0 },
      log: { info() {}, warn() {} },
      poll: false,
    });
    await fleet.init();
    await fleet.recover();
    return fleet;
  },
  destroy: (d) => d.close(),
});
