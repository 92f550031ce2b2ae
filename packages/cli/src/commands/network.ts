import { Command } from 'commander';
import { type Egress, Sandbox } from '@sandboxd/sdk';
import { withExamples, type Context } from '../context.js';
import { CliError, collect, printJson } from '../ui.js';
import { formatSecretRules, parseSecretRule } from './secret.js';

/**
 * The egress of `--egress none|internet` and `--allow RULE...` (rules mean `{allow}`);
 * undefined when neither is given. Throws CliError when both, or another mode, are.
 */
export function egressOption(mode: string | undefined, allow: string[] | undefined): Egress | undefined {
  if (allow?.length) {
    if (mode !== undefined && mode !== 'allow')
      throw new CliError('--allow and --egress none|internet exclude each other');
    return { allow };
  }
  if (mode === undefined) return undefined;
  if (mode !== 'none' && mode !== 'internet')
    throw new CliError(`--egress must be none or internet (got "${mode}"); rules go in --allow`);
  return mode;
}

/** `none`, `internet`, or `allow: a, b`, as messages show an egress. */
export function formatEgress(e: Egress | undefined): string {
  if (e === undefined) return 'none';
  return typeof e === 'string' ? e : `allow: ${e.allow.join(', ')}`;
}

/**
 * `sbx network ID`: replaces a sandbox's egress (new connections follow it at once) and, with
 * `--secret` or `--no-secrets`, its secret injection rules (kept as they are otherwise).
 */
export function networkCommand(ctx: Context): Command {
  const cmd = new Command('network')
    .description(
      "replace a sandbox's egress (none, internet, or --allow rules) and/or its secret injection rules (--secret, --no-secrets)",
    )
    .argument('<id>', 'sandbox id')
    .argument('[egress]', 'none or internet (omit with --allow; omitted with only --secret/--no-secrets: kept)')
    .option('-a, --allow <rule>', 'allow a domain, *.domain or IPv4 CIDR (repeatable)', collect)
    .option(
      '-s, --secret <NAME=DOMAINS[:HEADER[:FORMAT]]>',
      'replace the injection rules with these (repeatable; syntax of sbx create --secret)',
      collect,
    )
    .option('--no-secrets', 'remove every injection rule')
    .option('--json', 'print the network settings as JSON')
    .action(
      async (
        id: string,
        mode: string | undefined,
        o: { allow?: string[]; secret?: string[]; secrets: boolean; json?: boolean },
      ) => {
        let egress = egressOption(mode, o.allow);
        const rules = (o.secret ?? []).map((x) => parseSecretRule(x));
        if (rules.length > 0 && !o.secrets) throw new CliError('--secret and --no-secrets exclude each other');
        const secrets = rules.length > 0 ? rules : o.secrets ? undefined : [];
        if (egress === undefined && secrets === undefined)
          throw new CliError('say none, internet, or --allow RULE (and/or --secret RULE, --no-secrets)');
        const sb = await Sandbox.get(id, ctx.client());
        // Rules alone keep the egress: the update always carries one, so send the current.
        egress ??= sb.info.network?.egress ?? 'none';
        const network = await sb.setNetwork(secrets === undefined ? { egress } : { egress, secrets });
        if (o.json) return printJson(network);
        process.stdout.write(
          `${sb.id} egress: ${formatEgress(network.egress)}\n` +
            formatSecretRules(network.secrets)
              .map((l) => `  secret ${l}\n`)
              .join(''),
        );
      },
    );
  return withExamples(
    cmd,
    'sbx network sbx_abc... --allow pypi.org --allow files.pythonhosted.org --allow "*.github.com"',
    'sbx network sbx_abc... internet',
    'sbx network sbx_abc... none',
    "sbx network sbx_abc... --secret OPENAI=api.openai.com:Authorization:'Bearer {value}'   # keeps the egress",
    'sbx network sbx_abc... --no-secrets',
  );
}
