/**
 * The overlay test/deploy/cluster.test.ts applies: deploy/kubernetes/base in a namespace of
 * its own, with the image, database URL, a fresh runner token, a bootstrap API key and the
 * host names of the run. Also rendered offline by test/deploy/kubernetes.test.ts.
 */
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { stringify } from 'yaml';

const base = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'deploy', 'kubernetes', 'base');

export interface E2eOverlay {
  namespace: string;
  /** `name[:tag]` */
  image: string;
  databaseUrl: string;
  apiKey: string;
  publicHost: string;
  /** The Ingress's API host; unset: the base's placeholder stays (the run goes through port-forward). */
  apiHost?: string;
  replicas?: number;
}

export function writeE2eOverlay(dir: string, o: E2eOverlay): void {
  const at = o.image.lastIndexOf(':');
  const [newName, newTag] = at > o.image.lastIndexOf('/') ? [o.image.slice(0, at), o.image.slice(at + 1)] : [o.image];
  writeFileSync(
    join(dir, 'secrets.env'),
    `database-url=${o.databaseUrl}\nrunner-token=${randomBytes(32).toString('hex')}\nbootstrap-api-key=${o.apiKey}\n`,
  );
  const api = {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name: 'sandboxd-api' },
    spec: {
      template: {
        spec: {
          containers: [
            {
              name: 'api',
              env: [
                { name: 'SANDBOXD_PUBLIC_HOST', value: o.publicHost },
                {
                  name: 'SANDBOXD_BOOTSTRAP_API_KEY',
                  valueFrom: { secretKeyRef: { name: 'sandboxd-secrets', key: 'bootstrap-api-key' } },
                },
              ],
            },
          ],
        },
      },
    },
  };
  writeFileSync(join(dir, 'api.yaml'), stringify(api));
  const hosts = [
    { op: 'replace', path: '/spec/rules/1/host', value: `*.${o.publicHost}` },
    ...(o.apiHost ? [{ op: 'replace', path: '/spec/rules/0/host', value: o.apiHost }] : []),
  ];
  const kustomization = {
    apiVersion: 'kustomize.config.k8s.io/v1beta1',
    kind: 'Kustomization',
    namespace: o.namespace,
    resources: [relative(dir, base)],
    images: [{ name: 'sandboxd', newName, ...(newTag ? { newTag } : {}) }],
    replicas: [{ name: 'sandboxd-api', count: o.replicas ?? 2 }],
    secretGenerator: [{ name: 'sandboxd-secrets', envs: ['secrets.env'] }],
    patches: [{ path: 'api.yaml' }, { target: { kind: 'Ingress', name: 'sandboxd' }, patch: stringify(hosts) }],
  };
  writeFileSync(join(dir, 'kustomization.yaml'), stringify(kustomization));
}
