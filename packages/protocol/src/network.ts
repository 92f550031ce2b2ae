import { Type, type Static } from 'typebox';
import { SecretRulesSchema } from './secrets.js';

/** Most rules one sandbox's `network.egress.allow` may hold. */
export const MAX_EGRESS_RULES = 64;

/** The egress modes in increasing order of reach; a plan's `egress` is the most it allows. */
export const EGRESS_LEVELS = ['none', 'allow', 'internet'] as const;
export type EgressLevel = (typeof EGRESS_LEVELS)[number];

/** `{allow: [rule, ...]}`: only what the rules name (domains, `*.` wildcards, IPv4 CIDRs). */
export const EgressAllowSchema = Type.Object(
  {
    allow: Type.Array(Type.String({ minLength: 1, maxLength: 256 }), {
      maxItems: MAX_EGRESS_RULES,
      description:
        "Each rule a domain (`pypi.org`: that name only), a wildcard (`*.npmjs.org`: every name under it, not the name itself) or an IPv4 CIDR (`203.0.113.0/24`, or one address). Private, loopback, link-local, metadata and the host's own addresses stay unreachable whatever the rules say.",
    }),
  },
  { title: 'EgressAllow', additionalProperties: false },
);

/**
 * What a sandbox may reach outside: `none` (nothing), `internet` (every public address),
 * or `{allow: [...]}`.
 */
export const EgressSchema = Type.Union([Type.Enum(['none', 'internet']), EgressAllowSchema], {
  title: 'Egress',
  description:
    "`none`: no traffic leaves the sandbox. `internet`: every public address. `{allow}`: names resolved through the sandbox's resolver (for their TTL) and CIDRs; HTTP and TLS are checked by Host and SNI.",
});
export type Egress = Static<typeof EgressSchema>;

/** A sandbox's network settings: on create, on `PATCH .../network`, and in the sandbox object. */
export const SandboxNetworkSchema = Type.Object(
  {
    egress: EgressSchema,
    secrets: Type.Optional(SecretRulesSchema),
  },
  { title: 'SandboxNetwork', additionalProperties: false },
);
export type SandboxNetwork = Static<typeof SandboxNetworkSchema>;

/** `{ network }`: the answer of `PATCH /api/v1/sandboxes/{id}/network`. */
export const SandboxNetworkReplySchema = Type.Object(
  { id: Type.String(), network: SandboxNetworkSchema },
  { title: 'SandboxNetworkReply', additionalProperties: false },
);
export type SandboxNetworkReply = Static<typeof SandboxNetworkReplySchema>;

/** The level of an egress setting: `none`, `allow` or `internet`. */
export function egressLevel(e: Egress): EgressLevel {
  return typeof e === 'string' ? e : 'allow';
}

/** One parsed rule: a name, every name under a suffix, or an IPv4 prefix. */
export type EgressRule =
  | { kind: 'domain'; name: string }
  | { kind: 'wildcard'; suffix: string }
  | { kind: 'cidr'; base: string; len: number };

const LABEL_RE = /^(?!-)[a-z0-9-]{1,63}(?<!-)$/;
const IPV4_RE = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/;

/** Why `name` (lowercase, no trailing dot) is not a domain of at least two labels, or null. */
function domainProblem(name: string): string | null {
  if (name.length > 253) return 'a domain is at most 253 characters';
  const labels = name.split('.');
  if (labels.length < 2) return 'a domain needs at least two labels (e.g. pypi.org)';
  const bad = labels.find((l) => !LABEL_RE.test(l));
  if (bad !== undefined)
    return `label "${bad}" is not 1-63 letters, digits or inner hyphens${bad.includes('*') ? ' (a wildcard is allowed only as the whole first label: *.example.com)' : ''}`;
  if (/^\d+$/.test(labels[labels.length - 1])) return 'the last label is a number: write an address as a CIDR';
  return null;
}

/**
 * Parses one egress rule (case-insensitive; a trailing dot is dropped). Returns the rule or,
 * for a bad one, `{problem}` saying why.
 */
export function parseEgressRule(raw: string): EgressRule | { problem: string } {
  const s = raw.trim().toLowerCase().replace(/\.$/, '');
  if (s === '') return { problem: 'empty rule' };
  if (/^[\d./]+$/.test(s)) {
    const [addr, lenText, extra] = s.split('/');
    if (extra !== undefined) return { problem: 'a CIDR has one "/"' };
    const m = IPV4_RE.exec(addr);
    if (!m || m.slice(1).some((o) => Number(o) > 255 || (o.length > 1 && o.startsWith('0'))))
      return { problem: `"${addr}" is not an IPv4 address` };
    const len = lenText === undefined ? 32 : /^\d{1,2}$/.test(lenText) ? Number(lenText) : -1;
    if (len < 0 || len > 32) return { problem: 'the prefix length must be 0-32' };
    const n = m.slice(1).reduce((a, o) => a * 256 + Number(o), 0);
    if (n % 2 ** (32 - len) !== 0)
      return { problem: `host bits are set: did you mean ${formatIpv4(n - (n % 2 ** (32 - len)))}/${len}?` };
    if (len < 8) return { problem: 'a CIDR of more than a /8 is too wide: use "internet"' };
    return { kind: 'cidr', base: addr, len };
  }
  if (s.startsWith('*.')) {
    const problem = domainProblem(s.slice(2));
    return problem ? { problem } : { kind: 'wildcard', suffix: s.slice(2) };
  }
  const problem = domainProblem(s);
  return problem ? { problem } : { kind: 'domain', name: s };
}

/** The canonical text of a parsed rule (what the sandbox object shows). */
export function formatEgressRule(r: EgressRule): string {
  return r.kind === 'domain' ? r.name : r.kind === 'wildcard' ? `*.${r.suffix}` : `${r.base}/${r.len}`;
}

function formatIpv4(n: number): string {
  return [24, 16, 8, 0].map((s) => Math.floor(n / 2 ** s) % 256).join('.');
}

/** Whether rule `r` (a domain or wildcard) allows the name `name` (lowercase, no trailing dot). */
export function ruleAllowsName(r: EgressRule, name: string): boolean {
  if (r.kind === 'domain') return name === r.name;
  if (r.kind === 'wildcard') return name.length > r.suffix.length + 1 && name.endsWith(`.${r.suffix}`);
  return false;
}
