import { sql as initial } from './001-initial.js';
import { sql as privatePorts } from './002-private-ports.js';
import { sql as rateCounters } from './003-rate-counters.js';
import { sql as e2bSandboxFields } from './004-e2b-sandbox-fields.js';
import { sql as lifecycle } from './005-lifecycle.js';
import { sql as leases } from './006-leases.js';
import { sql as runners } from './007-runners.js';
import { sql as sandboxNetwork } from './008-sandbox-network.js';
import { sql as accountBalance } from './009-account-balance.js';
import { sql as builds } from './010-builds.js';
import { sql as instanceMeta } from './011-instance-meta.js';
import { sql as secrets } from './012-secrets.js';
import { sql as isolation } from './013-isolation.js';

/** A schema step; `version` is stored in SQLite's `user_version` once applied. */
export interface Migration {
  version: number;
  name: string;
  sql: string;
}

/** Every migration, in order. Append only; never edit an applied one. */
export const MIGRATIONS: readonly Migration[] = [
  { version: 1, name: 'initial', sql: initial },
  { version: 2, name: 'private-ports', sql: privatePorts },
  { version: 3, name: 'rate-counters', sql: rateCounters },
  { version: 4, name: 'e2b-sandbox-fields', sql: e2bSandboxFields },
  { version: 5, name: 'lifecycle', sql: lifecycle },
  { version: 6, name: 'leases', sql: leases },
  { version: 7, name: 'runners', sql: runners },
  { version: 8, name: 'sandbox-network', sql: sandboxNetwork },
  { version: 9, name: 'account-balance', sql: accountBalance },
  { version: 10, name: 'builds', sql: builds },
  { version: 11, name: 'instance-meta', sql: instanceMeta },
  { version: 12, name: 'secrets', sql: secrets },
  { version: 13, name: 'isolation', sql: isolation },
];
