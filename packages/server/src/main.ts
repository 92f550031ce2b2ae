// The server's entry point (`npm start`, the Kubernetes manifests, the tests' harness):
// serves as SANDBOXD_ROLE says. `sandboxd serve` (bin/sandboxd.js) does the same.
import { reportFatal, serveProcess } from './serving.js';

serveProcess().catch((e) => {
  reportFatal(e);
  process.exit(1);
});
