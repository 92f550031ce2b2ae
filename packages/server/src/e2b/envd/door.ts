import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Code, type ConnectRouter, createContextValues } from '@connectrpc/connect';
import { codeToString } from '@connectrpc/connect/protocol-connect';
import { connectNodeAdapter } from '@connectrpc/connect-node';
import { SANDBOX_ID_PATTERN } from '@sandboxd/protocol';
import type { Logger } from 'pino';
import type { E2bTemplate } from '../../config.js';
import type { SandboxRecord } from '../../domain/sandbox.js';
import { type PortAddress, PublicHosts } from '../../proxy/host.js';
import type { AccessTokens } from '../tokens.js';
import { ENVD_PORT } from '../version.js';
import { type EnvdCall, envdCallKey } from './context.js';
import { envdErrorBody } from './errors.js';

const SANDBOX_ID = new RegExp(SANDBOX_ID_PATTERN);

/** What a valid signed URL grants: one operation on one path, as one user (undefined: the default). */
interface SignedGrant {
  path: string;
  operation: 'read' | 'write';
  user: string | undefined;
}
/** Largest Connect message accepted (PTY/stdin input, paths): far above what the SDK sends. */
const READ_MAX_BYTES = 16 * 2 ** 20;

export interface EnvdDoorDeps {
  /** `publicHost` of the config: envd answers `49983-<id>.<publicHost>`. */
  publicHost: string;
  tokens: AccessTokens;
  /** Any account's sandbox by id (the access token proves the caller may use it). */
  findSandbox(id: string): Promise<SandboxRecord | null>;
  templates: Readonly<Record<string, E2bTemplate>>;
  now(): number;
  log: Logger;
  /** The Connect services (process.Process, filesystem.Filesystem). */
  routes(router: ConnectRouter): void;
  /**
   * envd's plain HTTP paths (`/files`, ...). Returns false for a path it does not serve
   * (the door answers 404).
   */
  rest(call: EnvdCall, req: IncomingMessage, res: ServerResponse): Promise<boolean>;
  /**
   * Charges one request to the account's request limit (the same budget as sandboxd's own
   * API); resolves with the wait in ms when the limit is exceeded, else null.
   */
  charge(accountId: string): Promise<number | null>;
  /**
   * Serves a request that names another port than envd's in `E2b-Sandbox-Port` (E2B's SDK
   * does so for its code interpreter, 49999): the port proxy, as if the request were for
   * `<port>-<id>.<publicHost>`. Absent: such requests are refused (400).
   */
  forwardPort?: (req: IncomingMessage, res: ServerResponse, addr: PortAddress) => void;
}

/**
 * The in-sandbox front door of E2B's SDKs (their "envd"). It claims, before fastify and
 * the port proxy, every request that carries `E2b-Sandbox-Id` (all in-sandbox traffic sent
 * to one origin, `E2B_SANDBOX_URL`) or whose Host is `49983-<id>.<publicHost>` (per-sandbox
 * hosts, `E2B_DOMAIN`). It finds the sandbox, checks its access token (`X-Access-Token`,
 * or a signed `/files` URL), and hands the request to the Connect services or to envd's
 * HTTP paths with an {@link EnvdCall}. A request whose `E2b-Sandbox-Port` names another port
 * (E2B's code interpreter: 49999) goes to the port proxy instead (`forwardPort`), with the
 * proxy's rules. Answers before a handler:
 *  - no token: 401; unknown sandbox or a token that is not its own: 404 (the same answer,
 *    so ids of other accounts' sandboxes cannot be probed);
 *  - a signed URL whose `Authorization: Basic` names another user than the one it was
 *    signed for: 403 (the call's user comes only from what was signed);
 *  - the caller's own sandbox no longer running, or killed and its record removed (its
 *    token proves it was the caller's): 502, which E2B's SDK reads as "the sandbox was
 *    killed or timed out" (`isRunning()` is false).
 */
export class EnvdDoor {
  /** The port proxy's reading of `<port>-<sandboxId>.<publicHost>` hosts. */
  private readonly hosts: PublicHosts;
  private readonly calls = new WeakMap<IncomingMessage, EnvdCall>();
  private readonly connect: (req: IncomingMessage, res: ServerResponse) => void;

  constructor(private readonly d: EnvdDoorDeps) {
    this.hosts = new PublicHosts(d.publicHost);
    this.connect = connectNodeAdapter({
      routes: d.routes,
      readMaxBytes: READ_MAX_BYTES,
      contextValues: (req) => createContextValues().set(envdCallKey, this.calls.get(req as IncomingMessage) ?? null),
      fallback: (req, res) => this.fallback(req as IncomingMessage, res as ServerResponse),
    });
  }

  /** For {@link FrontDoor.claimRequests}: the `E2b-Sandbox-Id` header, or a `49983-<id>.<publicHost>` Host. */
  readonly claims = (req: IncomingMessage): boolean => {
    if (req.headers['e2b-sandbox-id'] !== undefined) return true;
    return this.hosts.claims(req) && this.envdAddress(req) !== null;
  };

  /** The envd address a Host names, or null (another port, or a Host the proxy refuses). */
  private envdAddress(req: IncomingMessage): PortAddress | null {
    try {
      const a = this.hosts.parse(req);
      return a.port === ENVD_PORT ? a : null;
    } catch {
      return null;
    }
  }

  readonly handle = (req: IncomingMessage, res: ServerResponse): void => {
    const other = this.otherPort(req);
    if (other) {
      if ('refuse' in other) refuse(req, res, other.refuse.status, other.refuse.message);
      else this.d.forwardPort?.(req, res, other);
      return;
    }
    this.admit(req).then(
      (verdict) => {
        if ('refuse' in verdict) {
          const r = verdict.refuse;
          if (r.retryAfterMs !== undefined)
            res.setHeader('retry-after', String(Math.max(1, Math.ceil(r.retryAfterMs / 1000))));
          return refuse(req, res, r.status, r.message);
        }
        this.calls.set(req, verdict.call);
        this.connect(req, res);
      },
      (e) => {
        this.d.log.error({ err: e }, 'envd door failed');
        refuse(req, res, 500, 'Internal error');
      },
    );
  };

  private async admit(
    req: IncomingMessage,
  ): Promise<{ call: EnvdCall } | { refuse: { status: number; message: string; retryAfterMs?: number } }> {
    const id = this.sandboxIdOf(req);
    if ('refuse' in id) return id;
    const url = new URL(req.url ?? '/', 'http://envd');
    const token = header(req, 'x-access-token');
    const signature = url.pathname === '/files' ? url.searchParams.get('signature') : null;
    if (!token && !signature) return { refuse: { status: 401, message: 'X-Access-Token is missing' } };
    const sb = await this.d.findSandbox(id.id);
    // No record, but the sandbox's own token: it existed and was killed (its record removed).
    // E2B answers 502 for a sandbox that is gone, which its SDK reads as "not running".
    if (sb === null && token && (await this.d.tokens.verify(id.id, token)))
      return { refuse: { status: 502, message: `Sandbox ${id.id} is not running (it was killed)` } };
    // A token is the sandbox's whole authority (any user); a signed URL is one grant, and the
    // call acts only as what it names: its path, operation and user.
    const grant = sb !== null && !token ? await this.signedGrant(sb.id, req.method ?? 'GET', url) : null;
    const owned = sb !== null && (token ? await this.d.tokens.verify(sb.id, token) : grant !== null);
    if (!sb || !owned) return { refuse: { status: 404, message: `Sandbox ${id.id} not found` } };
    const named = basicUser(req);
    if (grant && named !== undefined && named !== (grant.user ?? ''))
      return {
        refuse: {
          status: 403,
          message: `This URL is signed for ${grant.user === undefined ? "the sandbox's default user" : `user '${grant.user}'`}; the Authorization header names '${named}'`,
        },
      };
    if (sb.state === 'paused')
      return { refuse: { status: 502, message: `Sandbox ${sb.id} is paused: connect to it to resume it` } };
    if (sb.state !== 'started' || sb.stopAt <= this.d.now())
      return { refuse: { status: 502, message: `Sandbox ${sb.id} is not running (it was stopped or timed out)` } };
    const template = sb.template ? this.d.templates[sb.template] : undefined;
    const wait = await this.d.charge(sb.accountId);
    if (wait !== null)
      return {
        refuse: {
          status: 429,
          message: `Too many requests for this account; retry in ${Math.max(1, Math.ceil(wait / 1000))} s`,
          retryAfterMs: wait,
        },
      };
    return {
      call: grant
        ? {
            accountId: sb.accountId,
            sandbox: sb,
            user: grant.user,
            defaultUser: template?.user,
            signed: { path: grant.path, operation: grant.operation },
          }
        : { accountId: sb.accountId, sandbox: sb, user: named, defaultUser: template?.user },
    };
  }

  /**
   * The sandbox port of a request by header for another port than envd's, which goes to
   * the port proxy (when the door has one); null for envd's requests.
   */
  private otherPort(req: IncomingMessage): PortAddress | { refuse: { status: number; message: string } } | null {
    const id = header(req, 'e2b-sandbox-id');
    const port = header(req, 'e2b-sandbox-port');
    if (id === undefined || port === undefined || Number(port) === ENVD_PORT || !this.d.forwardPort) return null;
    if (!/^[1-9][0-9]{0,4}$/.test(port) || Number(port) > 65535)
      return { refuse: { status: 400, message: `E2b-Sandbox-Port ${port} is not a port (1-65535)` } };
    if (!SANDBOX_ID.test(id)) return { refuse: { status: 404, message: `Sandbox ${id} not found` } };
    return { sandboxId: id, port: Number(port) };
  }

  private sandboxIdOf(req: IncomingMessage): { id: string } | { refuse: { status: number; message: string } } {
    const fromHeader = header(req, 'e2b-sandbox-id');
    if (fromHeader !== undefined) {
      const port = header(req, 'e2b-sandbox-port');
      if (port !== undefined && Number(port) !== ENVD_PORT)
        return {
          refuse: {
            status: 400,
            message: `E2b-Sandbox-Port ${port}: only envd (${ENVD_PORT}) is served by header; reach other ports at their port URL`,
          },
        };
      if (!SANDBOX_ID.test(fromHeader)) return { refuse: { status: 404, message: `Sandbox ${fromHeader} not found` } };
      return { id: fromHeader };
    }
    const a = this.envdAddress(req);
    if (!a) return { refuse: { status: 404, message: 'Sandbox not found' } };
    return { id: a.sandboxId };
  }

  /**
   * What an E2B signed file URL grants, or null when its signature is not valid: `v1_` +
   * base64 SHA-256 of `path:operation:user:token[:expiration]` (E2B's SDK signs the
   * `username` it puts in the URL, `''` for none: the template's default user).
   */
  private async signedGrant(sandboxId: string, method: string, url: URL): Promise<SignedGrant | null> {
    const sig = url.searchParams.get('signature') ?? '';
    const exp = url.searchParams.get('signature_expiration');
    if (exp !== null && (!/^[0-9]{1,12}$/.test(exp) || Number(exp) * 1000 < this.d.now())) return null;
    const operation = method === 'GET' || method === 'HEAD' ? 'read' : 'write';
    const path = url.searchParams.get('path') ?? '';
    const user = url.searchParams.get('username') ?? '';
    const raw = [path, operation, user, await this.d.tokens.tokenFor(sandboxId), ...(exp === null ? [] : [exp])].join(
      ':',
    );
    const want = Buffer.from(`v1_${createHash('sha256').update(raw).digest('base64').replace(/=+$/, '')}`);
    const got = Buffer.from(sig);
    if (want.length !== got.length || !timingSafeEqual(want, got)) return null;
    return { path, operation, user: user || undefined };
  }

  private fallback(req: IncomingMessage, res: ServerResponse): void {
    const call = this.calls.get(req);
    if (!call) {
      refuse(req, res, 401, 'No sandbox for this request');
      return;
    }
    this.d.rest(call, req, res).then(
      (served) => {
        if (!served)
          refuse(req, res, 404, `envd has no ${req.method} ${new URL(req.url ?? '/', 'http://envd').pathname}`);
      },
      (e) => {
        this.d.log.error({ err: e }, 'envd request failed');
        if (!res.headersSent) refuse(req, res, 500, 'Internal error');
        else res.destroy();
      },
    );
  }
}

function header(req: IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

/** `Authorization: Basic base64(user:)`, E2B's way of naming the user of a call. */
function basicUser(req: IncomingMessage): string | undefined {
  const m = /^Basic\s+([A-Za-z0-9+/=]+)$/i.exec(header(req, 'authorization') ?? '');
  if (!m) return undefined;
  const user = Buffer.from(m[1], 'base64').toString('utf8').split(':')[0];
  return user || undefined;
}

/** Connect's code for the door's refusals (the HTTP status also carries it for plain paths). */
const CONNECT_CODE: Record<number, Code> = {
  400: Code.InvalidArgument,
  401: Code.Unauthenticated,
  403: Code.PermissionDenied,
  404: Code.NotFound,
  429: Code.ResourceExhausted,
  500: Code.Internal,
  502: Code.Unavailable,
};

/**
 * A refusal in the shape the caller reads: Connect's error JSON (`{code: "not_found", ...}`)
 * for unary Connect requests; for streaming ones (`application/connect+json`), whose
 * clients read only the HTTP status of a non-200 answer (404 would read as
 * `unimplemented`), a 200 with the stream's end message carrying the error; envd's
 * `{code: <status>, kind, message}` for its HTTP paths. The body is not read; the
 * connection is closed after the answer so an unread upload cannot linger.
 */
export function refuse(req: IncomingMessage, res: ServerResponse, status: number, message: string): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const type = /^application\/(connect\+)?(json|proto)/.exec(req.headers['content-type'] ?? '');
  const isConnect = type !== null && req.method === 'POST' && !(req.url ?? '').startsWith('/files');
  const error = { code: codeToString(CONNECT_CODE[status] ?? Code.Unknown), message };
  if (isConnect && type[1]) {
    // One envelope: flags 0x02 (end of stream), a big-endian length, then `{error}`.
    const json = Buffer.from(JSON.stringify({ error }));
    const head = Buffer.alloc(5);
    head.writeUInt8(2, 0);
    head.writeUInt32BE(json.length, 1);
    res.writeHead(200, {
      'content-type': `application/connect+${type[2]}`,
      'content-length': head.length + json.length,
      connection: 'close',
    });
    res.end(Buffer.concat([head, json]));
    return;
  }
  const body = isConnect ? JSON.stringify(error) : envdErrorBody(status, message).json;
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(body),
    connection: 'close',
  });
  res.end(body);
}
