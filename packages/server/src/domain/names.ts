import { randomInt } from 'node:crypto';

const ADJECTIVES = [
  'quiet', 'brave', 'calm', 'eager', 'fancy', 'gentle', 'happy', 'jolly', 'kind', 'lively',
  'proud', 'silly', 'witty', 'bold', 'bright', 'crisp', 'daring', 'fresh', 'golden', 'swift',
  'amber', 'silver', 'misty', 'sunny', 'rapid', 'steady', 'clever', 'humble', 'noble', 'plucky',
];
const NOUNS = [
  'river', 'forest', 'meadow', 'canyon', 'harbor', 'island', 'valley', 'summit', 'breeze', 'comet',
  'falcon', 'otter', 'badger', 'heron', 'maple', 'cedar', 'willow', 'pebble', 'lagoon', 'glacier',
  'ember', 'spark', 'delta', 'orbit', 'prairie', 'tundra', 'reef', 'grove', 'ridge', 'creek',
];

/** A human-friendly sandbox name such as `quiet-river-4821`; callers ensure uniqueness. */
export function newSandboxName(): string {
  const a = ADJECTIVES[randomInt(ADJECTIVES.length)];
  const n = NOUNS[randomInt(NOUNS.length)];
  return `${a}-${n}-${String(randomInt(10_000)).padStart(4, '0')}`;
}
