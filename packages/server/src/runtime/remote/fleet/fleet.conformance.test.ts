import { fakeFleet } from '../../../../test/fake-runners.js';
import { runDriverConformance } from '../../conformance.js';

/*
 * The fleet is a RuntimeDriver like any other: the shared conformance suite against a fleet
 * of two fake runners (creates spread over both; every later call must find its runner).
 */
runDriverConformance({
  name: 'fleet of two fake runners',
  image: 'local/busybox:latest',
  make: async () => {
    const { fleet } = await fakeFleet({ 'http://one:1': 'one', 'http://two:1': 'two' });
    await fleet.recover();
    return fleet;
  },
  destroy: (d) => d.close(),
});
