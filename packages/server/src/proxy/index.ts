import type { Sandboxd } from '../app.js';
import type { Config } from '../config.js';
import { PortAccess } from './access.js';
import { PortProxy } from './proxy.js';
import { SandboxTargets } from './targets.js';

export { PortProxy } from './proxy.js';
export { PortLinks, LINK_PARAM, LINK_TTL } from './links.js';

/**
 * Builds the port proxy of an assembled server and puts it in front of fastify: it claims
 * requests and upgrades for `*.<publicHost>` on the front door, forgets a sandbox's target
 * as soon as it stops or is removed, and cuts proxied streams and WebSockets when the
 * server closes. With the local runtime every target must lie in `config.subnet`; with
 * the fake runtime (no network) the proxy connects nowhere and answers 502.
 */
export function attachPortProxy(app: Sandboxd, config: Readonly<Config>): PortProxy {
  const targets = new SandboxTargets({
    store: app.store,
    driver: app.driver,
    allowedSubnet: config.runtime === 'local' ? config.subnet : null,
  });
  app.services.sandboxes.onGone((id) => targets.forget(id));
  const access = new PortAccess({
    links: app.services.sandboxes.portLinks,
    accountOfKey: (key) =>
      app.services.auth.fromApiKey(key).then(
        (p) => p.account.id,
        () => null,
      ),
    now: () => app.clock.now(),
  });
  const proxy = new PortProxy({
    publicHost: config.publicHost,
    timeoutMs: config.proxyTimeoutMs,
    targets,
    access,
    log: app.log.child({ component: 'proxy' }),
  });
  proxy.attach(app.frontDoor);
  app.http.addHook('preClose', (done) => {
    proxy.close();
    targets.close();
    done();
  });
  return proxy;
}
