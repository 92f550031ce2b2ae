import { Command, Option } from 'commander';
import { Sandbox, type SandboxCreateParams } from '@sandboxd/sdk';
import { withExamples, type Context } from '../context.js';
import { CliError, collect, parseDuration, parseEnv, parsePairs, printJson, relative } from '../ui.js';
import { egressOption, formatEgress } from './network.js';
import { formatSecretRules, parseSecretRule } from './secret.js';

/** Default image of `sbx create`. */
export const DEFAULT_IMAGE = 'local/debian:bookworm';

/** Parses `name:/path` or `name:/path:sizeGb` into the volume map of a create. */
export function parseVolumes(specs: string[]): SandboxCreateParams['volumes'] {
  if (specs.length === 0) return undefined;
  const out: NonNullable<SandboxCreateParams['volumes']> = {};
  for (const s of specs) {
    const m = /^([^:]+):(\/[\s\S]*?)(?::(\d+))?$/.exec(s);
    if (!m) throw new CliError(`--volume must be name:/path or name:/path:sizeGb (got "${s}")`);
    out[m[2]] = m[3] ? { name: m[1], sizeGb: Number(m[3]) } : m[1];
  }
  return out;
}

/** `k=v, k2=v2`, as tables and messages show metadata. */
export function formatMetadata(m: Record<string, string> | undefined): string {
  return Object.entries(m ?? {})
    .map(([k, v]) => `${k}=${v}`)
    .join(', ');
}

/** `sbx create`: starts a sandbox and prints its id and public URL template. */
export function createCommand(ctx: Context): Command {
  const cmd = new Command('create')
    .description('create a sandbox and print its id and public URL template')
    .option('-i, --image <ref>', 'container image', DEFAULT_IMAGE)
    .option('-e, --env <KEY=VALUE>', 'environment variable (repeatable)', collect)
    .option('-v, --volume <name:/path[:sizeGb]>', 'named volume to mount (repeatable)', collect)
    .option('-t, --timeout <duration>', 'lifetime: ms, or with s/m/h (default 10m)')
    .option('-m, --metadata <KEY=VALUE>', 'label kept with the sandbox, for `sbx ls --metadata` (repeatable)', collect)
    .addOption(
      new Option('--on-timeout <action>', 'what happens when the lifetime ends (default stop)').choices([
        'stop',
        'pause',
      ]),
    )
    .addOption(
      new Option(
        '--isolation <tier>',
        "isolation tier: container, or gvisor (a user-space kernel; pauses to disk and forks) (default: the plan's)",
      ).choices(['container', 'gvisor']),
    )
    .option('--egress <mode>', "what it may reach outside: none or internet (default: the server's)")
    .option('-a, --allow <rule>', 'egress by rule instead: a domain, *.domain or IPv4 CIDR (repeatable)', collect)
    .option(
      '-s, --secret <NAME=DOMAINS[:HEADER[:FORMAT]]>',
      "inject secret NAME into requests to DOMAINS (comma-separated), in HEADER as FORMAT ({value} stands for it); the sandbox's $NAME holds a placeholder (repeatable)",
      collect,
    )
    .option('-q, --quiet', 'print only the id')
    .option('--json', 'print the sandbox as JSON')
    .action(
      async (o: {
        image: string;
        env?: string[];
        volume?: string[];
        timeout?: string;
        metadata?: string[];
        onTimeout?: 'stop' | 'pause';
        isolation?: 'container' | 'gvisor';
        egress?: string;
        allow?: string[];
        secret?: string[];
        quiet?: boolean;
        json?: boolean;
      }) => {
        const params: SandboxCreateParams = { image: o.image };
        const env = parseEnv(o.env ?? []);
        const volumes = parseVolumes(o.volume ?? []);
        if (env) params.env = env;
        if (volumes) params.volumes = volumes;
        if (o.timeout !== undefined) params.timeoutMs = parseDuration(o.timeout, '--timeout');
        const metadata = parsePairs(o.metadata ?? [], '--metadata');
        if (metadata) params.metadata = metadata;
        if (o.onTimeout) params.onTimeout = o.onTimeout;
        if (o.isolation) params.isolation = o.isolation;
        const egress = egressOption(o.egress, o.allow);
        const secrets = (o.secret ?? []).map((x) => parseSecretRule(x));
        if (secrets.length > 0 && egress === undefined)
          throw new CliError(
            '--secret needs the egress its domains go through: --allow DOMAIN... or --egress internet',
          );
        if (egress !== undefined) params.network = secrets.length > 0 ? { egress, secrets } : { egress };
        const client = ctx.client();
        const sb = await Sandbox.create(params, client);
        if (o.json) return printJson(sb.info);
        if (o.quiet) return void process.stdout.write(`${sb.id}\n`);
        const p = ctx.out;
        const scheme = new URL(client.apiUrl).protocol;
        process.stdout.write(
          `Created sandbox ${p.bold(sb.id)} (${sb.name})\n` +
            `  image     ${sb.image}\n` +
            `  isolation ${sb.isolation}\n` +
            `  ${sb.onTimeout === 'pause' ? 'pauses at' : 'stops at '} ${sb.info.stopAt} (${relative(sb.info.stopAt)})\n` +
            (Object.keys(sb.metadata ?? {}).length ? `  metadata  ${formatMetadata(sb.metadata)}\n` : '') +
            `  egress    ${formatEgress(sb.info.network?.egress)}\n` +
            formatSecretRules(sb.info.network?.secrets)
              .map((l) => `  secret    ${l}\n`)
              .join('') +
            `  URL       ${scheme}//${sb.info.publicAccessUrlTemplate}\n`,
        );
      },
    );
  return withExamples(
    cmd,
    'sbx create',
    'sbx create --image local/busybox:latest --env GREETING=hi --volume data:/data --timeout 30m',
    'sbx create --metadata team=ml --metadata run=42 --on-timeout pause',
    'sbx create --isolation gvisor',
    'sbx create --allow pypi.org --allow files.pythonhosted.org --allow "*.github.com"',
    "sbx create --allow api.openai.com --secret OPENAI=api.openai.com:Authorization:'Bearer {value}'",
  );
}
