import { Command, Option } from 'commander';
import type { SecretRule } from '@sandboxd/sdk';
import { withExamples, type Context } from '../context.js';
import { CliError, printJson, promptSecret, relative, table } from '../ui.js';

/** Longest value, in bytes (the server's limit; protocol MAX_SECRET_VALUE_BYTES). */
const MAX_VALUE_BYTES = 8192;
/** Most bytes `sbx secret set` reads from a pipe before refusing. */
const MAX_STDIN_BYTES = 64 * 1024;

/** Why a value given as an argument is refused, in one sentence. */
export const VALUE_ARGUMENT_REFUSED =
  'a secret value is never a command-line argument (other users see arguments in ps, and shells keep them in their history): ' +
  'pipe it in (printf %s "$VALUE" | sbx secret set NAME, or sbx secret set NAME < file) or type it at the hidden prompt';

/**
 * Parses `NAME=DOMAIN[,DOMAIN...][:HEADER[:FORMAT]]` into an injection rule: `FORMAT` is the
 * rest after the second `:` (it may hold more), `{value}` in it stands for the value.
 * Throws CliError naming `flag` and what is wrong.
 */
export function parseSecretRule(spec: string, flag = '--secret'): SecretRule {
  const usage = `${flag} must be NAME=DOMAIN[,DOMAIN...][:HEADER[:FORMAT]], e.g. OPENAI=api.openai.com:Authorization:'Bearer {value}'`;
  const eq = spec.indexOf('=');
  if (eq <= 0) throw new CliError(`${usage} (got "${spec}")`);
  const secret = spec.slice(0, eq);
  const rest = spec.slice(eq + 1);
  const c1 = rest.indexOf(':');
  const domainText = c1 < 0 ? rest : rest.slice(0, c1);
  const domains = domainText.split(',').map((d) => d.trim());
  if (domains.some((d) => d === ''))
    throw new CliError(`${usage}: the domains of "${secret}" are a comma-separated list with no empty item`);
  const rule: SecretRule = { secret, domains };
  if (c1 < 0) return rule;
  const headerAndFormat = rest.slice(c1 + 1);
  const c2 = headerAndFormat.indexOf(':');
  const header = c2 < 0 ? headerAndFormat : headerAndFormat.slice(0, c2);
  if (header === '') throw new CliError(`${usage}: the header of "${secret}" is empty`);
  rule.header = header;
  if (c2 < 0) return rule;
  const format = headerAndFormat.slice(c2 + 1);
  if (format === '')
    throw new CliError(`${usage}: the format of "${secret}" is empty (leave out ":FORMAT" for {value})`);
  rule.format = format;
  return rule;
}

/** One line per rule: `NAME -> domains [Header: format] $ENV=placeholder`. */
export function formatSecretRules(rules: SecretRule[] | undefined): string[] {
  return (rules ?? []).map(
    (r) =>
      `${r.secret} -> ${r.domains.join(', ')}` +
      (r.header ? ` [${r.header}: ${r.format ?? '{value}'}]` : ' [placeholder replaced]') +
      (r.placeholder ? ` $${r.secret.replace(/-/g, '_')}=${r.placeholder}` : ''),
  );
}

/** Why `value` cannot be a secret's value (never repeating it), or null. Mirrors the server's check. */
export function valueProblem(value: string): string | null {
  if (value.length === 0) return 'the value is empty';
  if (/[\r\n]/.test(value)) return 'the value is one line: a newline can only end it';
  if (/[^\x20-\x7e]/.test(value))
    return 'the value is printable ASCII only (no control characters or non-ASCII): it goes into HTTP request heads';
  if (value.length > MAX_VALUE_BYTES) return `the value is at most ${MAX_VALUE_BYTES} bytes`;
  return null;
}

/** Reads the value from piped stdin: all of it, less one final newline (`\n` or `\r\n`). */
async function readPipedValue(): Promise<string> {
  let data = '';
  for await (const chunk of process.stdin) {
    data += chunk;
    if (data.length > MAX_STDIN_BYTES)
      throw new CliError(`stdin holds more than ${MAX_STDIN_BYTES} bytes: not a secret value`);
  }
  return data.replace(/\r?\n$/, '');
}

/** `sbx secret set|ls|rm|audit`: the account's secrets (values injected by the egress proxy). */
export function secretCommand(ctx: Context): Command {
  const secret = new Command('secret')
    .alias('secrets')
    .description(
      "manage secrets: values the egress proxy puts into a sandbox's requests (the sandbox holds a placeholder)",
    );

  secret.addCommand(
    withExamples(
      new Command('set')
        .description('create or change a secret; the value comes from stdin when piped, else from a hidden prompt')
        .argument('<name>', 'secret name: a letter or _, then letters, digits, _ or - (at most 64)')
        .argument('[value]', 'refused: see --help')
        .option('-d, --description <text>', 'what the secret is for (shown by sbx secret ls)')
        .option('--keep-value', 'change only the description (reads no value)')
        .addOption(new Option('--value <value>', 'refused: a value is never an argument').hideHelp())
        .option('--json', 'print the secret (never its value) as JSON')
        .action(
          async (
            name: string,
            valueArg: string | undefined,
            o: { description?: string; keepValue?: boolean; value?: string; json?: boolean },
          ) => {
            if (valueArg !== undefined || o.value !== undefined) throw new CliError(VALUE_ARGUMENT_REFUSED, 2);
            const client = ctx.client();
            let value: string | undefined;
            if (o.keepValue) {
              if (o.description === undefined)
                throw new CliError('--keep-value changes only the description: give --description');
            } else {
              value = process.stdin.isTTY
                ? await promptSecret(`Value of ${name} (not shown): `, { trim: false })
                : await readPipedValue();
              const problem = valueProblem(value);
              if (problem) throw new CliError(`${problem}; nothing was changed`);
            }
            const r = await client.secrets.put(name, { value, description: o.description });
            if (o.json) return printJson(r.secret);
            process.stdout.write(
              `${r.created ? 'Created' : 'Updated'} secret ${r.secret.name} (version ${r.secret.version})\n`,
            );
          },
        ),
      'printf %s "$OPENAI_API_KEY" | sbx secret set OPENAI --description "prod key"',
      'sbx secret set GITHUB_TOKEN            # asks for the value, without echo',
      'sbx secret set OPENAI --keep-value -d "rotated monthly"',
    ),
  );

  secret.addCommand(
    withExamples(
      new Command('ls')
        .alias('list')
        .description('list secrets (names and metadata, never values)')
        .option('--json', 'print the secrets as JSON')
        .action(async (o: { json?: boolean }) => {
          const list = await ctx.client().secrets.list();
          if (o.json) return printJson(list);
          if (list.length === 0) return void process.stdout.write('No secrets.\n');
          const rows = list.map((s) => [s.name, String(s.version), relative(s.updatedAt), s.description]);
          process.stdout.write(table(['NAME', 'VERSION', 'UPDATED', 'DESCRIPTION'], rows, ctx.out));
        }),
      'sbx secret ls',
    ),
  );

  secret.addCommand(
    withExamples(
      new Command('rm')
        .alias('delete')
        .description('delete secrets; sandboxes whose rules name them stop injecting at once')
        .argument('<name...>', 'secret names')
        .action(async (names: string[]) => {
          const client = ctx.client();
          for (const name of names) {
            await client.secrets.delete(name);
            process.stdout.write(`Deleted secret ${name}\n`);
          }
        }),
      'sbx secret rm OPENAI',
    ),
  );

  secret.addCommand(
    withExamples(
      new Command('audit')
        .description('the injections the egress proxy made, newest first')
        .option('-s, --sandbox <id>', "only into this sandbox's requests")
        .option('--secret <name>', 'only of this secret')
        .option('-n, --limit <n>', 'at most this many (default 50)', '50')
        .option('--json', 'print the injections as JSON')
        .action(async (o: { sandbox?: string; secret?: string; limit: string; json?: boolean }) => {
          const limit = Number(o.limit);
          if (!/^\d+$/.test(o.limit) || limit < 1 || limit > 100_000)
            throw new CliError(`--limit must be a whole number from 1 to 100000 (got "${o.limit}")`);
          const out = [];
          for await (const i of ctx.client().secrets.allInjections({ sandboxId: o.sandbox, secret: o.secret }, limit))
            out.push(i);
          if (o.json) return printJson(out);
          if (out.length === 0) return void process.stdout.write('No injections.\n');
          const rows = out.map((i) => [
            i.at,
            i.sandboxId,
            i.secret,
            i.method,
            i.destination,
            i.status === null ? `error: ${i.error ?? 'no answer'}` : String(i.status),
          ]);
          process.stdout.write(table(['TIME', 'SANDBOX', 'SECRET', 'METHOD', 'DESTINATION', 'STATUS'], rows, ctx.out));
        }),
      'sbx secret audit',
      'sbx secret audit --sandbox sbx_abc... --secret OPENAI -n 200',
    ),
  );
  return secret;
}
