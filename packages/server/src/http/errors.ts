import {
  ERROR_KINDS,
  ERROR_STATUS,
  errorBody,
  SandboxdError,
  type ErrorBody,
  type ErrorKind,
  type ValidationProblem,
} from '@sandboxd/protocol';
import type { FastifyError } from 'fastify';
import { isOutOfSpace, OUT_OF_STORAGE_MESSAGE } from '../domain/storage.js';
import { pointerToken } from '../domain/json-pointer.js';

interface SchemaError {
  keyword?: string;
  schemaPath?: string;
  instancePath?: string;
  message?: string;
  params?: Record<string, unknown>;
}

const PART: Record<string, string> = { body: 'body', querystring: 'query', params: 'params', headers: 'headers' };

/**
 * The ONE mapping from anything thrown to an HTTP status and Error body. SandboxdError
 * answers as it says; fastify's validation, body-limit, media-type and JSON errors become
 * 400/413; a full disk is a 507; anything else is a 500 that leaks nothing (`internal: true`
 * tells the caller to log it).
 */
export function toHttpError(err: unknown): { status: number; body: ErrorBody; internal: boolean } {
  // A full disk (ENOSPC, SQLITE_FULL) anywhere below is the server's condition, not a bug: 507.
  if ((!(err instanceof SandboxdError) || err.kind === 'internal') && isOutOfSpace(err))
    return http('insufficient_storage', OUT_OF_STORAGE_MESSAGE);
  if (err instanceof SandboxdError) {
    return { status: err.status, body: err.toBody(), internal: err.kind === 'internal' };
  }
  const fe = err as Partial<FastifyError> & { validation?: SchemaError[]; validationContext?: string };
  if (Array.isArray(fe.validation)) {
    const problems = formatProblems(fe.validation, PART[fe.validationContext ?? 'body'] ?? 'body');
    const message = `Invalid request: ${problems.map((p) => `${p.in}${p.path} ${p.message}`).join('; ')}`;
    return http('validation', message.length > 1000 ? `${message.slice(0, 997)}...` : message, problems);
  }
  switch (fe.code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return http('payload_too_large', 'Request body is larger than 1 MiB');
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return http('validation', 'Content-Type must be application/json');
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
      return http('validation', 'Malformed JSON body');
  }
  const status = typeof fe.statusCode === 'number' ? fe.statusCode : 500;
  if (status >= 400 && status < 500) {
    if (err instanceof SyntaxError) return http('validation', 'Malformed JSON body');
    const kind = ERROR_KINDS.find((k) => ERROR_STATUS[k] === status);
    return http(kind ?? 'validation', safeMessage(fe.message));
  }
  if (status === 503) return http('unavailable', 'Server is shutting down');
  return { status: 500, body: errorBody('internal', 'Internal server error'), internal: true };
}

function http(kind: ErrorKind, message: string, details?: unknown) {
  return { status: ERROR_STATUS[kind], body: errorBody(kind, message, details), internal: false };
}

/** Fastify's own 4xx messages are fixed texts; still cap them. */
function safeMessage(m: unknown): string {
  return typeof m === 'string' && m.length > 0 ? m.slice(0, 300) : 'Bad request';
}

/** Longest field path a problem names (paths echo keys of the request). */
const MAX_PATH_CHARS = 300;

/**
 * Turns schema errors into one problem per field: unknown fields are named, union
 * branches collapse to the branch that got furthest, enums list the allowed values.
 */
export function formatProblems(errors: SchemaError[], part: string): ValidationProblem[] {
  const anyOfPaths = new Set(errors.filter((e) => e.keyword === 'anyOf').map((e) => e.instancePath ?? ''));
  const out: ValidationProblem[] = [];
  const seen = new Set<string>();
  const push = (p: ValidationProblem) => {
    // Field names come from the request: a 100 KB unknown key is named, not echoed in full.
    if (p.path.length > MAX_PATH_CHARS)
      p = { ...p, path: `${p.path.slice(0, MAX_PATH_CHARS)}...(${p.path.length - MAX_PATH_CHARS} more characters)` };
    const key = `${p.path}\u0000${p.message}`;
    if (!seen.has(key)) {
      seen.add(key);
      out.push(p);
    }
  };
  for (const e of errors) {
    const path = e.instancePath ?? '';
    if (e.keyword === 'boolean') {
      // `additionalProperties: false` fails per unknown field; the summary error naming them
      // all comes last and is cut off when the validator stops at its error cap.
      if (/\/additionalProperties$/.test(e.schemaPath ?? ''))
        push({ in: part, path, message: 'is not an allowed field' });
      continue;
    }

    if (e.keyword === 'additionalProperties') {
      const names = (e.params?.additionalProperties as string[] | undefined) ?? [];
      for (const n of names) push({ in: part, path: `${path}/${pointerToken(n)}`, message: 'is not an allowed field' });
      continue;
    }
    if (e.keyword === 'anyOf') {
      const deeper = errors.some((x) => (x.instancePath ?? '').startsWith(`${path}/`) && x.keyword !== 'anyOf');
      if (!deeper) push({ in: part, path, message: 'must be a string or an object of the documented shape' });
      continue;
    }
    if (anyOfPaths.has(path) && (e.keyword === 'type' || e.keyword === 'pattern' || e.keyword === 'const')) {
      const deeper = errors.some((x) => (x.instancePath ?? '').startsWith(`${path}/`));
      if (deeper || e.keyword === 'type') continue; // the other branch explains better
    }
    if (e.keyword === 'enum') {
      push({
        in: part,
        path,
        message: 'must be one of the allowed values',
        allowed: e.params?.allowedValues as unknown[],
      });
      continue;
    }
    if (e.keyword === 'required') {
      const missing = (e.params?.requiredProperties as string[] | undefined) ?? [
        String(e.params?.missingProperty ?? ''),
      ];
      for (const n of missing) push({ in: part, path: `${path}/${pointerToken(n)}`, message: 'is required' });
      continue;
    }
    push({ in: part, path, message: e.message ?? 'is invalid' });
  }
  if (!out.length) out.push({ in: part, path: '', message: 'is invalid' });
  return out;
}
