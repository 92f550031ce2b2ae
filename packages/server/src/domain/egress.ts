import {
  type Egress,
  EGRESS_LEVELS,
  type EgressLevel,
  egressLevel,
  formatEgressRule,
  parseEgressRule,
  SandboxdError,
  type ValidationProblem,
} from '@sandboxd/protocol';
import { egressPlanError } from './limits.js';

/**
 * The egress of a request, checked and made canonical (rules lowercased, without trailing
 * dots, CIDRs of one address as /32, duplicates dropped). `path` is where the setting sits
 * in the body (`/network/egress`). Throws `validation` naming each bad rule by its path
 * (`/network/egress/allow/3`) and why.
 */
export function checkEgress(e: Egress, path: string): Egress {
  if (typeof e === 'string') return e;
  const problems: ValidationProblem[] = [];
  const out: string[] = [];
  e.allow.forEach((raw, i) => {
    const r = parseEgressRule(raw);
    if ('problem' in r) problems.push({ in: 'body', path: `${path}/allow/${i}`, message: r.problem });
    else if (!out.includes(formatEgressRule(r))) out.push(formatEgressRule(r));
  });
  if (problems.length)
    throw new SandboxdError('validation', problems.map((p) => `${p.path}: ${p.message}`).join('; '), problems);
  return { allow: out };
}

/** Whether level `a` reaches no further than `b`. */
function within(a: EgressLevel, b: EgressLevel): boolean {
  return EGRESS_LEVELS.indexOf(a) <= EGRESS_LEVELS.indexOf(b);
}

/**
 * The egress a sandbox gets: the one asked for (403 `quota` when beyond the plan's
 * `planLevel`), else the server's default, lowered to what the plan allows (a plan of
 * `allow` without rules to give: `none`).
 */
export function decideEgress(
  asked: Egress | undefined,
  serverDefault: 'none' | 'internet',
  planLevel: EgressLevel,
): Egress {
  if (asked !== undefined) {
    if (!within(egressLevel(asked), planLevel)) throw egressPlanError(egressLevel(asked), planLevel);
    return asked;
  }
  return within(serverDefault, planLevel) ? serverDefault : 'none';
}
