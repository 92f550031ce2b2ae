import {
  DEFAULT_TEMPLATE_TAG,
  type Egress,
  EnvMap,
  type Isolation,
  SandboxdError,
  TEMPLATE_IMAGE_PREFIX,
  TEMPLATE_NAME_PATTERN,
  TEMPLATE_TAG_PATTERN,
} from '@sandboxd/protocol';
import { type Static, Type } from 'typebox';
import type { E2bTemplate } from '../config.js';

/*
 * E2B's sandbox creation (`POST /v2/sandboxes`, `NewSandboxV2`, and the older
 * `POST /sandboxes`) as sandboxd takes it: the body's shape, what of it sandboxd cannot do
 * (refused, never ignored), and template names to images.
 */

/** Bounds of E2B's `metadata`: labels, not storage. */
export const METADATA_LIMITS = { entries: 64, keyChars: 128, valueChars: 1024 } as const;

/** `metadata`: string to string; keys 1..128 characters, values up to 1024, no NUL. */
export const MetadataMap = Type.Record(
  Type.String({ pattern: `^[^\\u0000]{1,${METADATA_LIMITS.keyChars}}$` }),
  Type.String({ pattern: '^[^\\u0000]*$', maxLength: METADATA_LIMITS.valueChars }),
  { additionalProperties: false, maxProperties: METADATA_LIMITS.entries },
);

const Hosts = Type.Array(Type.String({ maxLength: 1024 }), { maxItems: 1000 });

/** E2B's `SandboxNetworkConfig`: known fields only, so a new one is named rather than ignored. */
const NetworkConfig = Type.Object(
  {
    allowOut: Type.Optional(Hosts),
    denyOut: Type.Optional(Hosts),
    allowPublicTraffic: Type.Optional(Type.Boolean()),
    maskRequestHost: Type.Optional(Type.String({ maxLength: 1024 })),
    httpsPorts: Type.Optional(Type.Array(Type.Integer({ minimum: 1, maximum: 65535 }), { maxItems: 1000 })),
    egressProxy: Type.Optional(Type.Unknown()),
    rules: Type.Optional(Type.Unknown()),
  },
  { additionalProperties: false },
);

/** E2B's `SandboxNetworkUpdateConfig` (`PUT /sandboxes/{id}/network`): what is omitted is cleared. */
export const NetworkUpdateSchema = Type.Object(
  {
    allow_internet_access: Type.Optional(Type.Boolean()),
    allowOut: Type.Optional(Hosts),
    denyOut: Type.Optional(Hosts),
    egressProxy: Type.Optional(Type.Unknown()),
    rules: Type.Optional(Type.Unknown()),
  },
  { additionalProperties: false },
);
export type NetworkUpdate = Static<typeof NetworkUpdateSchema>;

/** The body of E2B's create: `NewSandboxV2` (and `NewSandbox`'s `secure`). */
export const NewSandboxSchema = Type.Object(
  {
    templateID: Type.String({ minLength: 1, maxLength: 512 }),
    timeout: Type.Optional(Type.Integer({ minimum: 1, maximum: 2_147_483_647 })),
    envVars: Type.Optional(EnvMap),
    metadata: Type.Optional(MetadataMap),
    autoPause: Type.Optional(Type.Boolean()),
    autoPauseMemory: Type.Optional(Type.Boolean()),
    autoResume: Type.Optional(Type.Object({ enabled: Type.Boolean() }, { additionalProperties: false })),
    allow_internet_access: Type.Optional(Type.Boolean()),
    network: Type.Optional(NetworkConfig),
    volumeMounts: Type.Optional(
      Type.Array(
        Type.Object(
          { name: Type.String({ maxLength: 256 }), path: Type.String({ maxLength: 1024 }) },
          { additionalProperties: false },
        ),
        { maxItems: 64 },
      ),
    ),
    /**
     * E2B's MCP gateway configuration (server name -> its settings). E2B's API only records
     * it; the SDK itself starts `mcp-gateway --config <it>` in the sandbox (as root, its
     * default template `mcp-gateway` having that program), so it is taken here and the
     * template decides, as with E2B.
     */
    mcp: Type.Optional(Type.Union([Type.Record(Type.String(), Type.Unknown()), Type.Null()])),
    iam: Type.Optional(Type.Unknown()),
    /** Deprecated in E2B: envd access is always secured (an access token), whatever this says. */
    secure: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: false },
);
export type NewSandbox = Static<typeof NewSandboxSchema>;

const ALL_TRAFFIC = '0.0.0.0/0';

/** The template E2B's SDK creates from when `mcp` is given without one (`Sandbox.defaultMcpTemplate`). */
export const MCP_GATEWAY_TEMPLATE = 'mcp-gateway';

/** Given at all (an explicit null counts as not given). */
const given = (v: unknown): boolean => v !== undefined && v !== null;

/** Given and not empty (`[]` and `{}` ask for nothing). */
const present = (v: unknown): boolean =>
  v !== undefined &&
  v !== null &&
  !(Array.isArray(v) && v.length === 0) &&
  !(typeof v === 'object' && !Array.isArray(v) && Object.keys(v).length === 0);

/**
 * What of `b` sandboxd cannot do, each as a sentence naming the field; empty when it can do
 * all of it. Egress maps onto sandboxd's own (see {@link egressOf}); what does not map
 * (a deny list short of all traffic, allow rules without denying the rest) is refused.
 * `network.rules` map onto secret injection rules (secrets.ts, {@link secretRulesOf}).
 */
export function unsupportedIn(b: NewSandbox): string[] {
  const out: string[] = [];
  const no = (what: string) => out.push(`sandboxd does not support ${what} yet`);
  // autoPause: true is `onTimeout: 'pause'`; the pause keeps memory (E2B's autoPauseMemory: true).
  if (b.autoPause === true && b.autoPauseMemory === false)
    no(
      "filesystem-only pauses (autoPauseMemory: false, the SDK's onTimeout {action: 'pause', keepMemory: false}): sandboxd's pauses keep memory and processes",
    );
  if (b.autoResume?.enabled === true) no('auto-resume (autoResume)');
  if (present(b.volumeMounts)) no("E2B volumes (volumeMounts); sandboxd's own API mounts its volumes");
  if (given(b.iam)) no('workload identity (iam)');
  const n = b.network;
  if (n) {
    const denyAll = present(n.denyOut) && (n.denyOut?.every((x) => x === ALL_TRAFFIC) ?? false);
    if (present(n.allowOut) && !denyAll)
      no('egress rules without denying all other traffic (network.allowOut needs network.denyOut: ["0.0.0.0/0"])');
    if (present(n.denyOut) && !denyAll)
      no('egress deny lists (network.denyOut); only denying all traffic, with network.allowOut as the exceptions');
    if (given(n.egressProxy)) no('egress proxies (network.egressProxy)');
    if (present(n.maskRequestHost)) no('host masks (network.maskRequestHost)');
    if (present(n.httpsPorts)) no('HTTPS sandbox ports (network.httpsPorts)');
  }
  if (b.allow_internet_access === true && present(n?.denyOut))
    no('internet access together with denying it (allow_internet_access: true and network.denyOut)');
  return out;
}

/**
 * sandboxd's egress for E2B's network update (whose omitted fields are cleared: E2B then
 * allows all traffic, `internet`), or what of it sandboxd cannot do, as for a create.
 */
export function egressOfUpdate(b: NetworkUpdate): { egress: Egress } | { unsupported: string[] } {
  const out: string[] = [];
  const no = (what: string) => out.push(`sandboxd does not support ${what} yet`);
  const denyAll = present(b.denyOut) && (b.denyOut?.every((x) => x === ALL_TRAFFIC) ?? false);
  if (present(b.allowOut) && !denyAll)
    no('egress rules without denying all other traffic (allowOut needs denyOut: ["0.0.0.0/0"])');
  if (present(b.denyOut) && !denyAll)
    no('egress deny lists (denyOut); only denying all traffic, with allowOut as the exceptions');
  if (given(b.egressProxy)) no('egress proxies (egressProxy)');
  if (b.allow_internet_access === true && present(b.denyOut))
    no('internet access together with denying it (allow_internet_access: true and denyOut)');
  if (out.length) return { unsupported: out };
  if (denyAll) return { egress: present(b.allowOut) ? { allow: [...(b.allowOut ?? [])] } : 'none' };
  return { egress: b.allow_internet_access === false ? 'none' : 'internet' };
}

/**
 * sandboxd's egress for an E2B create (after {@link unsupportedIn}): `denyOut: ["0.0.0.0/0"]`
 * is `none`, or `{allow: allowOut}` with exceptions; `allow_internet_access` false is `none`,
 * true `internet`; undefined (the server's default) when it says nothing.
 */
export function egressOf(b: NewSandbox): Egress | undefined {
  const n = b.network;
  if (present(n?.denyOut)) return present(n?.allowOut) ? { allow: [...(n?.allowOut ?? [])] } : 'none';
  if (b.allow_internet_access === false) return 'none';
  if (b.allow_internet_access === true) return 'internet';
  return undefined;
}

/**
 * The image of an E2B template name: a configured template's image; else the account's
 * template of that name (`name` or `name:tag`, made by E2B's `Template.build` or sandboxd's
 * builds; `templates/<name>:<tag>`, tag `latest` by default, E2B's `default` too) when
 * `template` finds one; else the name itself taken as an image reference (`python:3.12`,
 * `local/busybox:latest`). So an account's template shadows an image of the same name for
 * that account. The name is kept as the sandbox's template either way.
 */
export async function imageOfTemplate(
  templates: Readonly<Record<string, E2bTemplate>>,
  templateID: string,
  template?: (name: string, tag: string) => Promise<unknown>,
): Promise<{ image: string; configured: boolean; isolation?: Isolation }> {
  if (Object.hasOwn(templates, templateID)) {
    const t = templates[templateID];
    return { image: t.image, configured: true, ...(t.isolation ? { isolation: t.isolation } : {}) };
  }
  const named = template ? accountTemplateOf(templateID) : null;
  if (named && template) {
    try {
      await template(named.name, named.tag);
      return { image: `${TEMPLATE_IMAGE_PREFIX}${named.name}:${named.tag}`, configured: false };
    } catch (e) {
      // Not one of the account's: an image reference, as before (also while builds are not served).
      if (!(e instanceof SandboxdError && (e.kind === 'not_found' || e.kind === 'unsupported'))) throw e;
    }
  }
  return { image: templateID, configured: false };
}

const TEMPLATE_NAME = new RegExp(TEMPLATE_NAME_PATTERN);
const TEMPLATE_TAG = new RegExp(TEMPLATE_TAG_PATTERN);

/** `name` or `name:tag` as an account template could be named (E2B's `default` tag is `latest`); null otherwise. */
export function accountTemplateOf(templateID: string): { name: string; tag: string } | null {
  const colon = templateID.indexOf(':');
  const name = colon === -1 ? templateID : templateID.slice(0, colon);
  let tag = colon === -1 ? DEFAULT_TEMPLATE_TAG : templateID.slice(colon + 1);
  if (tag === 'default') tag = DEFAULT_TEMPLATE_TAG;
  return TEMPLATE_NAME.test(name) && TEMPLATE_TAG.test(tag) ? { name, tag } : null;
}
