import { Command } from 'commander';
import { type Egress, Sandbox } from '@sandboxd/sdk';
import { withExamples, type Context } from '../context.js';
import { CliError, collect, printJson } from '../ui.js';

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

/** `sbx network ID`: replaces a sandbox's egress (new connections follow it at once). */
export function networkCommand(ctx: Context): Command {
  const cmd = new Command('network')
    .description("replace a sandbox's egress: none, internet, or --allow rules (domains, *.wildcards, CIDRs)")
    .argument('<id>', 'sandbox id')
    .argument('[egress]', 'none or internet (omit with --allow)')
    .option('-a, --allow <rule>', 'allow a domain, *.domain or IPv4 CIDR (repeatable)', collect)
    .option('--json', 'print the network settings as JSON')
    .action(async (id: string, mode: string | undefined, o: { allow?: string[]; json?: boolean }) => {
      const egress = egressOption(mode, o.allow);
      if (egress === undefined) throw new CliError('say none, internet, or --allow RULE');
      const sb = await Sandbox.get(id, ctx.client());
      const network = await sb.setNetwork(egress);
      if (o.json) return printJson(network);
      process.stdout.write(`${sb.id} egress: ${formatEgress(network.egress)}\n`);
    });
  return withExamples(
    cmd,
    'sbx network sbx_abc... --allow pypi.org --allow files.pythonhosted.org --allow "*.github.com"',
    'sbx network sbx_abc... internet',
    'sbx network sbx_abc... none',
  );
}
