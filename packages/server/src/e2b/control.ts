import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { LIMITS, MAX_FORK_COUNT, type SandboxNetwork, SandboxdError, type SecretRule } from '@sandboxd/protocol';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { Type } from 'typebox';
import type { PlanConfig } from '../config.js';
import type { SandboxRecord } from '../domain/sandbox.js';
import { type HttpDeps, principalOf } from '../http/deps.js';
import { planOf } from '../services/context.js';
import {
  egressOf,
  egressOfUpdate,
  imageOfTemplate,
  MCP_GATEWAY_TEMPLATE,
  type NewSandbox,
  NewSandboxSchema,
  NetworkUpdateSchema,
  unsupportedIn,
} from './create.js';
import {
  decodeNextToken,
  encodeNextToken,
  matchesMetadata,
  pageOf,
  parseLimit,
  parseMetadataFilter,
  parseOrder,
  parseStartedAfter,
  parseStates,
} from './listing.js';
import { e2bEgressOf, e2bRulesOf, e2bSecretRoutes, referencedNames, secretRulesOf } from './secrets.js';
import { e2bTemplateRoutes } from './templates-routes.js';
import { ENVD_VERSION } from './version.js';

/** E2B's deprecated `clientID`: one fixed value. */
export const CLIENT_ID = 'sandboxd';

/**
 * The lifetime E2B's connect (and refresh) ensures when the request names none: E2B's
 * documented default of 300 s, from now; it only ever extends, and is cut to what the plan
 * still allows rather than refused, since the caller did not ask for it.
 */
export const DEFAULT_KEEPALIVE_MS = 300_000;

const MiB = 1024 * 1024;

/** Every E2B path and route option: hidden from sandboxd's own OpenAPI document. */
const hide = { hide: true } as const;

const IdParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 200 }) });

const ListQuery = Type.Object(
  {
    metadata: Type.Optional(Type.String({ maxLength: 16_384 })),
    state: Type.Optional(Type.Union([Type.String(), Type.Array(Type.String(), { maxItems: 10 })])),
    limit: Type.Optional(Type.String()),
    nextToken: Type.Optional(Type.String({ maxLength: 1000 })),
    order: Type.Optional(Type.String()),
    startedAfter: Type.Optional(Type.String({ maxLength: 100 })),
    template: Type.Optional(Type.String({ maxLength: 512 })),
  },
  { additionalProperties: false },
);

/** Seconds from now, as E2B's timeout bodies count. */
const Seconds = Type.Integer({ minimum: 0, maximum: 2_147_483_647 });

const TimeoutBody = Type.Object({ timeout: Seconds }, { additionalProperties: false });
const ConnectV2Body = Type.Object(
  { timeout: Type.Optional(Seconds), memory: Type.Optional(Type.Boolean()) },
  { additionalProperties: false },
);
const ConnectV1Body = Type.Object(
  { timeout: Seconds, memory: Type.Optional(Type.Boolean()) },
  { additionalProperties: false },
);
const PauseBody = Type.Object({ memory: Type.Optional(Type.Boolean()) }, { additionalProperties: false });
const ResumeBody = Type.Object(
  { timeout: Type.Optional(Seconds), autoPause: Type.Optional(Type.Boolean()), memory: Type.Optional(Type.Boolean()) },
  { additionalProperties: false },
);
const RefreshBody = Type.Object({ duration: Type.Optional(Seconds) }, { additionalProperties: false });
/** E2B's `SandboxForkRequest`: `count` (sandboxd's cap, {@link MAX_FORK_COUNT}) and the forks' `timeout` in seconds. */
const ForkBody = Type.Object(
  {
    count: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_FORK_COUNT })),
    timeout: Type.Optional(Seconds),
  },
  { additionalProperties: false },
);

/** E2B's `Sandbox`: what its SDK needs to reach the sandbox's envd. */
interface E2bSandbox {
  sandboxID: string;
  templateID: string;
  alias?: string;
  clientID: string;
  envdVersion: string;
  envdAccessToken: string;
  domain: string;
  /** Set for a sandbox with private ports (E2B's `allowPublicTraffic: false`): the header its ports take. */
  trafficAccessToken: string | null;
}

/** The template E2B sees: the name it was created from, or the image of a sandboxd create. */
const templateOf = (r: SandboxRecord): string => r.template ?? r.image;

/** `details.state` of a sandboxd `conflict` (the state the sandbox was in). */
const stateIn = (e: SandboxdError): unknown => (e.details as { state?: unknown } | undefined)?.state;

/** E2B's 409 for a pause of a paused sandbox (its SDK's pause then answers false). */
const alreadyPaused = (id: string) =>
  new SandboxdError('conflict', `Sandbox ${id} is already paused`, { state: 'paused' });

const notFound = (id: string) => new SandboxdError('not_found', `Sandbox ${id} not found`);

/** 409 for a paused sandbox asked for something that needs it running. */
const pausedConflict = (id: string) =>
  new SandboxdError('conflict', `Sandbox ${id} is paused: connect (or resume) it first`, { state: 'paused' });

/** E2B's two states; the records E2B does not see (stopped, error, being created or started) have none. */
const e2bState = (r: SandboxRecord): 'running' | 'paused' | undefined =>
  r.state === 'started' ? 'running' : r.state === 'paused' ? 'paused' : undefined;

/** A pause with `memory: false` (E2B's filesystem-only snapshot) or a resume that reboots. */
const NO_MEMORY =
  "filesystem-only pauses and resumes that reboot (memory: false, the SDK's keepMemory: false or onResume: 'reboot'): sandboxd's pauses keep memory and processes";

const unsupported = (what: string) => new SandboxdError('unsupported', `sandboxd does not support ${what} yet`);

/** An empty body (or none) takes the defaults. */
const emptyBodyIsObject = async (req: FastifyRequest) => {
  req.body ??= {};
};

/**
 * E2B's control API (the `api.e2b.app` of E2B's SDKs), served under `/e2b` over the same
 * services as sandboxd's own API: creates meet the same tokens, concurrency, plan lifetimes
 * and images; timeouts the same rules; kills the same delete; pause, resume and connect of a
 * paused sandbox the lifecycle service's pause and resume. Only `started` (E2B's `running`)
 * and `paused` sandboxes of the caller's account exist here; stopped ones do not. What
 * sandboxd cannot do is refused with 501 (`unsupported`) and a message naming it, never ignored.
 * Registered with the prefix `/e2b`; hidden from sandboxd's OpenAPI document.
 */
export const e2bControlRoutes: FastifyPluginAsyncTypebox<HttpDeps> = async (app, d) => {
  const { sandboxes, timeout, lifecycle, secrets } = d.services;

  /**
   * sandboxd's injection rules for E2B's `network.rules` (at `base`): each
   * `${e2b.secrets.NAME}` names the account's secret NAME when it has one of exactly that
   * name, else E2B's lower-cased NAME (an unknown one is then the rules' 400 naming it).
   */
  const rulesOf = async (accountId: string, rules: unknown, base: string): Promise<SecretRule[]> => {
    if (referencedNames(rules).length === 0) return secretRulesOf(rules, (n) => n, base);
    const held = new Set((await secrets.list(accountId)).map((s) => s.name));
    return secretRulesOf(rules, (n) => (held.has(n) ? n : n.toLowerCase()), base);
  };

  const limitsOf = (p: PlanConfig) => ({
    cpuCount: Math.max(1, Math.ceil(p.limits.cpus)),
    memoryMB: Math.floor(p.limits.memoryBytes / MiB),
    diskSizeMB: Math.floor(p.limits.rootDiskBytes / MiB),
  });

  const sandboxAnswer = async (r: SandboxRecord): Promise<E2bSandbox> => ({
    sandboxID: r.id,
    templateID: templateOf(r),
    ...(r.template !== undefined ? { alias: r.template } : {}),
    clientID: CLIENT_ID,
    envdVersion: ENVD_VERSION,
    envdAccessToken: await d.accessTokens.tokenFor(r.id),
    domain: d.config.publicHost,
    trafficAccessToken: r.portsPublic === false ? await d.accessTokens.trafficTokenFor(r.id) : null,
  });

  const listed = (r: SandboxRecord, plan: PlanConfig) => ({
    sandboxID: r.id,
    templateID: templateOf(r),
    ...(r.template !== undefined ? { alias: r.template } : {}),
    clientID: CLIENT_ID,
    startedAt: new Date(r.createdAt).toISOString(),
    // A paused sandbox ends when its retention does (it is deleted then).
    endAt: new Date(r.state === 'paused' ? (r.expiresAt ?? r.stopAt) : r.stopAt).toISOString(),
    state: e2bState(r) ?? 'running',
    ...limitsOf(plan),
    metadata: r.metadata ?? {},
    envdVersion: ENVD_VERSION,
    volumeMounts: r.volumes.map((m) => ({ name: m.name, path: m.mountPath })),
  });

  /** The caller's sandbox while it is started or paused; `not_found` otherwise (E2B: it does not exist). */
  const visible = async (req: FastifyRequest, id: string): Promise<SandboxRecord> => {
    let r: SandboxRecord;
    try {
      r = await sandboxes.get(principalOf(req).account.id, id);
    } catch (e) {
      if (e instanceof SandboxdError && e.kind === 'not_found') throw notFound(id);
      throw e;
    }
    if (e2bState(r) === undefined) throw notFound(id);
    return r;
  };

  /** The caller's sandbox while it is started; 409 while paused; `not_found` otherwise. */
  const running = async (req: FastifyRequest, id: string): Promise<SandboxRecord> => {
    const r = await visible(req, id);
    if (r.state === 'paused') throw pausedConflict(id);
    return r;
  };

  /**
   * A sandbox that changed state between the look-up and the change: paused meanwhile is
   * 409 (as a paused one is for the call), anything else (stopped, deleted) is gone, for E2B.
   */
  const goneIsNotFound = async <T>(id: string, fn: () => Promise<T>): Promise<T> => {
    try {
      return await fn();
    } catch (e) {
      if (e instanceof SandboxdError && e.kind === 'conflict' && stateIn(e) === 'paused') throw pausedConflict(id);
      if (e instanceof SandboxdError && (e.kind === 'conflict' || e.kind === 'not_found')) throw notFound(id);
      throw e;
    }
  };

  /** Every sandbox of the account in one of `states` (few: concurrency and `maxPaused` bound them). */
  const listOf = async (accountId: string, states: ReadonlyArray<'started' | 'paused'>): Promise<SandboxRecord[]> => {
    const out: SandboxRecord[] = [];
    for (const state of states) {
      let cursor: string | undefined;
      do {
        const page = await sandboxes.list(accountId, { state, limit: LIMITS.maxPageSize, cursor });
        out.push(...page.items);
        cursor = page.nextCursor;
      } while (cursor);
    }
    return out;
  };

  /**
   * Resumes a paused sandbox for `seconds` (none or 0: {@link DEFAULT_KEEPALIVE_MS}, cut to
   * the plan's lifetime). Null when it was resumed meanwhile by another call (it runs: the
   * caller treats it as running); `not_found` when it went (stopped, deleted) meanwhile.
   */
  const resumePaused = async (req: FastifyRequest, r: SandboxRecord, seconds: number | undefined) => {
    const account = principalOf(req).account;
    const ms = seconds ? seconds * 1000 : Math.min(DEFAULT_KEEPALIVE_MS, planOf(d.config, account.plan).maxLifetimeMs);
    try {
      return await lifecycle.resume(account, r.id, ms);
    } catch (e) {
      if (e instanceof SandboxdError && e.kind === 'conflict' && stateIn(e) === 'started') return null;
      if (e instanceof SandboxdError && (e.kind === 'conflict' || e.kind === 'not_found')) throw notFound(r.id);
      throw e;
    }
  };

  /** Ensures the sandbox runs at least `seconds` more (a default when absent); never shortens it. */
  const keepAlive = async (req: FastifyRequest, id: string, seconds: number | undefined): Promise<SandboxRecord> => {
    const r = await running(req, id);
    const account = principalOf(req).account;
    await goneIsNotFound(id, () =>
      seconds === undefined
        ? timeout.extend(account, { id: r.id, timeoutMs: DEFAULT_KEEPALIVE_MS, clamp: true })
        : timeout.extend(account, { id: r.id, timeoutMs: seconds * 1000 }),
    );
    return r;
  };

  // --- create -------------------------------------------------------------------------------

  const create = async (req: FastifyRequest, b: NewSandbox) => {
    if (b.autoPauseMemory === false && b.autoPause !== true) {
      const message = 'autoPauseMemory: false only applies when autoPause is true';
      throw new SandboxdError('validation', message, [{ in: 'body', path: '/autoPauseMemory', message }]);
    }
    const refused = unsupportedIn(b);
    const egress = egressOf(b);
    if (refused.length) throw new SandboxdError('unsupported', refused.join('; '));
    const account = principalOf(req).account;
    const rules = await rulesOf(account.id, b.network?.rules, '/network/rules');
    // Rules without E2B's allowOut/denyOut: the server's default egress, as without rules.
    const network =
      rules.length > 0
        ? ({ ...(egress !== undefined ? { egress } : {}), secrets: rules } as SandboxNetwork)
        : egress !== undefined
          ? { egress }
          : undefined;
    const {
      image,
      configured,
      isolation: tier,
    } = await imageOfTemplate(d.config.e2bTemplates, b.templateID, (name, tag) =>
      d.services.builds.getTemplate(account.id, name, tag),
    );
    // The template's tier: configured with it, or the `org.sandboxd.isolation` label of the account's own image.
    const isolation = tier ?? (await sandboxes.imageIsolation(account.id, image));
    // E2B's MCP template is no image anyone can pull: named as E2B names a missing template.
    if (b.templateID === MCP_GATEWAY_TEMPLATE && !configured)
      throw new SandboxdError(
        'template_not_found',
        `template '${MCP_GATEWAY_TEMPLATE}' not found: this server has no MCP gateway template. Configure one ` +
          `(SANDBOXD_E2B_TEMPLATES) whose image has E2B's mcp-gateway program, or create from another template`,
        { templateID: b.templateID },
      );
    const end = d.metrics.createSeconds.startTimer();
    try {
      const r = await sandboxes.create(
        account,
        {
          image,
          ...(b.timeout !== undefined ? { timeoutMs: b.timeout * 1000 } : {}),
          ...(b.envVars !== undefined ? { env: b.envVars } : {}),
          ...(b.autoPause === true ? { onTimeout: 'pause' as const } : {}),
          ...(network !== undefined ? { network } : {}),
          // E2B's private sandbox URLs: sandboxd's private ports, opened by the traffic token too.
          ...(b.network?.allowPublicTraffic === false ? { ports: { public: false } } : {}),
          ...(isolation !== undefined ? { isolation } : {}),
        },
        { template: b.templateID, ...(b.metadata !== undefined ? { metadata: b.metadata } : {}) },
      );
      end({ outcome: 'ok' });
      return r;
    } catch (e) {
      end({ outcome: 'error' });
      if (e instanceof SandboxdError && e.kind === 'template_not_found') {
        const names = Object.keys(d.config.e2bTemplates).join(', ');
        throw new SandboxdError(
          'template_not_found',
          configured
            ? `Template ${b.templateID} is configured with image ${image}, which this server does not have and cannot pull`
            : `Template ${b.templateID} not found: it is neither a template of this server (${names}), nor one of your templates (Template.build), nor an image it has or can pull`,
          { templateID: b.templateID, image },
        );
      }
      throw e;
    }
  };

  for (const path of ['/v2/sandboxes', '/sandboxes']) {
    app.post(path, { schema: { ...hide, body: NewSandboxSchema } }, async (req, reply) =>
      reply.code(201).send(await sandboxAnswer(await create(req, req.body))),
    );
  }

  // --- list ---------------------------------------------------------------------------------

  app.get('/v2/sandboxes', { schema: { ...hide, querystring: ListQuery } }, async (req, reply) => {
    const q = req.query;
    const filter = parseMetadataFilter(q.metadata);
    const states = parseStates(q.state);
    const limit = parseLimit(q.limit);
    const order = parseOrder(q.order);
    const startedAfter = parseStartedAfter(q.startedAfter);
    const after = q.nextToken === undefined || q.nextToken === '' ? undefined : decodeNextToken(q.nextToken);
    const account = principalOf(req).account;
    const all = await listOf(account.id, [
      ...(states.has('running') ? (['started'] as const) : []),
      ...(states.has('paused') ? (['paused'] as const) : []),
    ]);
    const matching = all.filter(
      (r) =>
        matchesMetadata(r.metadata, filter) &&
        (q.template === undefined || templateOf(r) === q.template) &&
        (startedAfter === undefined || r.createdAt >= startedAfter),
    );
    const page = pageOf(matching, { order, limit, after });
    if (page.next) reply.header('x-next-token', encodeNextToken(page.next));
    if (states.has('running'))
      reply.header('x-total-running', String(matching.filter((r) => r.state === 'started').length));
    const plan = planOf(d.config, account.plan);
    return page.items.map((r) => listed(r, plan));
  });

  app.get(
    '/sandboxes',
    {
      schema: {
        ...hide,
        querystring: Type.Object(
          { metadata: Type.Optional(Type.String({ maxLength: 16_384 })) },
          { additionalProperties: false },
        ),
      },
    },
    async (req) => {
      const filter = parseMetadataFilter(req.query.metadata);
      const account = principalOf(req).account;
      const plan = planOf(d.config, account.plan);
      // E2B's v1 list: running sandboxes only.
      const all = (await listOf(account.id, ['started'])).filter((r) => matchesMetadata(r.metadata, filter));
      return pageOf(all, { order: 'desc', limit: all.length }).items.map((r) => listed(r, plan));
    },
  );

  // --- one sandbox --------------------------------------------------------------------------

  app.get('/sandboxes/:id', { schema: { ...hide, params: IdParams } }, async (req) => {
    const r = await visible(req, req.params.id);
    const plan = planOf(d.config, principalOf(req).account.plan);
    const { envdAccessToken, domain } = await sandboxAnswer(r);
    const rules = e2bRulesOf(r.network?.secrets);
    return {
      ...listed(r, plan),
      envdAccessToken,
      domain,
      lifecycle: { onTimeout: r.onTimeout === 'pause' ? 'pause' : 'kill', autoResume: false },
      network: {
        ...e2bEgressOf(r.network?.egress),
        ...(rules ? { rules } : {}),
        allowPublicTraffic: r.portsPublic !== false,
      },
    };
  });

  /**
   * E2B's network update: replaces the egress and the transform rules (omitted: cleared), as
   * sandboxd's `PATCH .../network` with `secrets` always given. 204.
   */
  app.put(
    '/sandboxes/:id/network',
    { schema: { ...hide, params: IdParams, body: NetworkUpdateSchema } },
    async (req, reply) => {
      const r = await visible(req, req.params.id);
      const mapped = egressOfUpdate(req.body);
      if ('unsupported' in mapped) throw new SandboxdError('unsupported', mapped.unsupported.join('; '));
      const account = principalOf(req).account;
      const rules = await rulesOf(account.id, req.body.rules, '/rules');
      await goneIsNotFound(r.id, () =>
        sandboxes.updateNetwork(account, r.id, { egress: mapped.egress, secrets: rules }),
      );
      return reply.code(204).send();
    },
  );

  app.delete('/sandboxes/:id', { schema: { ...hide, params: IdParams } }, async (req, reply) => {
    const r = await visible(req, req.params.id);
    await goneIsNotFound(r.id, () => sandboxes.delete(principalOf(req).account.id, r.id));
    return reply.code(204).send();
  });

  app.post(
    '/sandboxes/:id/timeout',
    { schema: { ...hide, params: IdParams, body: TimeoutBody } },
    async (req, reply) => {
      const r = await running(req, req.params.id);
      await goneIsNotFound(r.id, () =>
        timeout.set(principalOf(req).account, { id: r.id, timeoutMs: req.body.timeout * 1000 }),
      );
      return reply.code(204).send();
    },
  );

  app.post(
    '/sandboxes/:id/pause',
    { schema: { ...hide, params: IdParams, body: PauseBody }, preValidation: emptyBodyIsObject },
    async (req, reply) => {
      const id = req.params.id;
      const r = await visible(req, id);
      if (r.state === 'paused') throw alreadyPaused(id);
      if (req.body.memory === false) throw unsupported(NO_MEMORY);
      try {
        // A gVisor sandbox keeps its memory on disk (E2B's pause persists it); a container's stays in RAM.
        await lifecycle.pause(principalOf(req).account, r.id, sandboxes.pausesToDisk(r) ? { memory: 'disk' } : {});
      } catch (e) {
        if (e instanceof SandboxdError && e.kind === 'conflict' && stateIn(e) === 'paused') throw alreadyPaused(id);
        if (e instanceof SandboxdError && (e.kind === 'conflict' || e.kind === 'not_found')) throw notFound(id);
        throw e;
      }
      return reply.code(204).send();
    },
  );

  /** E2B's connect: a paused sandbox is resumed (201), a running one kept alive (200). */
  const connect = async (req: FastifyRequest, reply: FastifyReply, seconds: number | undefined, memory?: boolean) => {
    const id = (req.params as { id: string }).id;
    const r = await visible(req, id);
    if (r.state === 'paused') {
      if (memory === false) throw unsupported(NO_MEMORY);
      const resumed = await resumePaused(req, r, seconds);
      if (resumed) return reply.code(201).send(await sandboxAnswer(resumed));
    }
    return reply.code(200).send(await sandboxAnswer(await keepAlive(req, id, seconds)));
  };

  app.post(
    '/v2/sandboxes/:id/connect',
    { schema: { ...hide, params: IdParams, body: ConnectV2Body }, preValidation: emptyBodyIsObject },
    async (req, reply) => connect(req, reply, req.body.timeout, req.body.memory),
  );

  app.post(
    '/sandboxes/:id/connect',
    { schema: { ...hide, params: IdParams, body: ConnectV1Body } },
    async (req, reply) => connect(req, reply, req.body.timeout, req.body.memory),
  );

  /** E2B's deprecated resume: 201 for a paused sandbox, 409 for a running one. */
  app.post(
    '/sandboxes/:id/resume',
    { schema: { ...hide, params: IdParams, body: ResumeBody }, preValidation: emptyBodyIsObject },
    async (req, reply) => {
      const id = req.params.id;
      const r = await visible(req, id);
      if (r.state !== 'paused')
        throw new SandboxdError('conflict', `Sandbox ${id} is already running`, { state: 'running' });
      const { autoPause, memory } = req.body;
      if (memory === false) throw unsupported(NO_MEMORY);
      // The record's onTimeout is fixed at create: a resume may only repeat it.
      if (autoPause !== undefined && autoPause !== (r.onTimeout === 'pause'))
        throw unsupported(
          `changing what a sandbox does at its timeout after create (autoPause: ${autoPause} on resume of a sandbox created with autoPause: ${!autoPause}); create the sandbox with the autoPause it needs`,
        );
      const resumed = await resumePaused(req, r, req.body.timeout);
      if (!resumed) throw new SandboxdError('conflict', `Sandbox ${id} is already running`, { state: 'running' });
      return reply.code(201).send(await sandboxAnswer(resumed));
    },
  );

  app.post(
    '/sandboxes/:id/refreshes',
    { schema: { ...hide, params: IdParams, body: RefreshBody }, preValidation: emptyBodyIsObject },
    async (req, reply) => {
      await keepAlive(req, req.params.id, req.body.duration);
      return reply.code(204).send();
    },
  );

  // E2B's fork (SDK 2.x `Sandbox.fork`/`sandbox.fork()`): sandboxd's fork of a gVisor sandbox.
  // All forks are made or none (a refusal answers for all: E2B's "failed before any fork was
  // attempted"), so every entry of the 201 carries a sandbox.
  app.post(
    '/sandboxes/:id/fork',
    { schema: { ...hide, params: IdParams, body: ForkBody }, preValidation: emptyBodyIsObject },
    async (req, reply) => {
      const r = await running(req, req.params.id);
      let forks: SandboxRecord[];
      try {
        // No timeout (or 0): sandboxd's default lifetime.
        forks = await sandboxes.fork(principalOf(req).account, r.id, req.body.count ?? 1, {
          ...(req.body.timeout ? { timeoutMs: req.body.timeout * 1000 } : {}),
        });
      } catch (e) {
        if (e instanceof SandboxdError && e.kind === 'conflict' && stateIn(e) === 'paused') throw pausedConflict(r.id);
        if (e instanceof SandboxdError && e.kind === 'not_found') throw notFound(r.id);
        throw e;
      }
      return reply.code(201).send(await Promise.all(forks.map(async (f) => ({ sandbox: await sandboxAnswer(f) }))));
    },
  );

  // --- not supported yet --------------------------------------------------------------------

  /** Operations on one sandbox sandboxd cannot do: 404 for a sandbox that is not there, else 501. */
  const ofSandbox: Array<[method: 'GET' | 'POST' | 'PUT', path: string, what: string]> = [
    ['POST', '/sandboxes/:id/snapshots', 'snapshots'],
    ['GET', '/sandboxes/:id/metrics', 'sandbox metrics'],
    ['GET', '/sandboxes/:id/logs', "sandbox logs through E2B's API"],
    ['GET', '/v2/sandboxes/:id/logs', "sandbox logs through E2B's API"],
  ];
  for (const [method, url, what] of ofSandbox) {
    app.route({
      method,
      url,
      schema: { ...hide, params: IdParams },
      handler: async (req) => {
        await visible(req, (req.params as { id: string }).id);
        throw unsupported(what);
      },
    });
  }

  /** Whole E2B APIs sandboxd does not serve: every method, every path below. */
  const apis: Array<[paths: string[], what: string]> = [
    [['/snapshots'], 'snapshots'],
    [['/sandboxes/metrics'], 'sandbox metrics'],
    [['/volumes'], "E2B volumes; sandboxd's own API has volumes"],
  ];
  // E2B's template builder (Template.build, names, tags): templates-routes.ts. Below, what
  // of E2B's template API is not served: the legacy Docker-push builds, rebuilds, updates,
  // the timestamp-paged logs, and any other method or path.
  await app.register(e2bTemplateRoutes, { ...d, prefix: '' }); // its options are ours, less our `/e2b`
  await app.register(e2bSecretRoutes, { ...d, prefix: '' });
  const templatesElse =
    "this part of E2B's template API (legacy builds of a pushed Docker image, rebuilds, template updates, paged build logs: Template.build, its status, names and tags are served)";
  for (const [url, methods] of [
    ['/templates', ['DELETE', 'PATCH', 'POST', 'PUT']],
    ['/v2/templates', ['DELETE', 'PATCH', 'POST', 'PUT']],
    ['/v3/templates', ['DELETE', 'GET', 'PATCH', 'PUT']],
  ] as const)
    app.route({
      method: [...methods],
      url,
      schema: hide,
      handler: async () => {
        throw unsupported(templatesElse);
      },
    });
  for (const url of ['/templates/*', '/v2/templates/*', '/v3/templates/*'])
    app.all(url, { schema: hide }, async () => {
      throw unsupported(templatesElse);
    });

  for (const [paths, what] of apis) {
    for (const p of paths) {
      for (const url of [p, `${p}/*`]) {
        app.all(url, { schema: hide }, async () => {
          throw unsupported(what);
        });
      }
    }
  }
};
