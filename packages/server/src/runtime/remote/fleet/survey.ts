import type { RuntimeSandbox, RuntimeSurvey } from '../../driver.js';
import type { RunnerMember } from './member.js';
import type { Membership } from './membership.js';
import { LIST_TIMEOUT_MS, within } from './placer.js';

/**
 * Lists every runner of `members` that is up (each within {@link LIST_TIMEOUT_MS}; one that
 * fails is passed to `failed`), and says of any node whether it answered, or how long it has
 * been silent. A sandbox with no runner recorded (`absent(null)`) is covered only when every
 * runner of the list answered.
 */
export async function surveyRunners(
  members: Membership,
  failed: (m: RunnerMember, e: unknown) => void,
): Promise<RuntimeSurvey> {
  const answered = new Set<string>();
  const sandboxes: RuntimeSandbox[] = [];
  const list = members.members();
  await Promise.all(
    list
      .filter((m) => m.up)
      .map(async (m) => {
        try {
          sandboxes.push(...(await within(m.driver.list(), LIST_TIMEOUT_MS, m.node!)));
          answered.add(m.node!);
        } catch (e) {
          failed(m, e);
        }
      }),
  );
  const complete = list.every((m) => m.duplicateOf !== null || (m.node !== null && answered.has(m.node)));
  return {
    sandboxes,
    absent: (host) => {
      if (host === null)
        return complete ? null : { host: '(not recorded)', forMs: 0, reason: 'not every runner answered' };
      if (answered.has(host)) return null;
      return members.absence(host) ?? { host, forMs: 0, reason: 'it did not answer the listing' };
    },
  };
}
