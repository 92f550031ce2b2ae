import { Type, type Static } from 'typebox';
import { ISOLATIONS } from './sandbox.js';

/** One isolation tier the runtime offers (the driver's `isolations()`), as `/healthz` reports it. */
export const IsolationSupportSchema = Type.Object(
  {
    isolation: Type.Enum([...ISOLATIONS]),
    runtime: Type.String({ description: 'The OCI runtime that runs it (`crun`, `runc`, `runsc`).' }),
    platform: Type.Optional(
      Type.String({ description: 'gVisor: the platform runsc uses on this host (`kvm`, `systrap` or `ptrace`).' }),
    ),
    memorySnapshots: Type.Boolean({
      description: 'Whether its sandboxes pause to disk (`{memory: "disk"}`) and fork.',
    }),
  },
  { title: 'IsolationSupport', additionalProperties: false },
);
export type IsolationSupportWire = Static<typeof IsolationSupportSchema>;

/** What the host has left for new sandboxes; a create past a limit answers 503 `capacity` naming the resource. */
export const CapacitySchema = Type.Object(
  {
    sandboxes: Type.Object(
      {
        used: Type.Integer({ minimum: 0, description: 'Live sandboxes (started and being created) of all accounts.' }),
        max: Type.Union([Type.Integer({ minimum: 1 }), Type.Null()], {
          description: 'maxSandboxes; null: no count limit.',
        }),
        free: Type.Union([Type.Integer({ minimum: 0 }), Type.Null()], { description: 'max - used; null: no limit.' }),
      },
      { additionalProperties: false },
    ),
    memory: Type.Object(
      {
        availableBytes: Type.Union([Type.Integer({ minimum: 0 }), Type.Null()], {
          description: "The host's MemAvailable; null: unknown.",
        }),
        floorBytes: Type.Integer({ minimum: 0, description: 'Creates answer 503 below this; 0: off.' }),
      },
      { additionalProperties: false },
    ),
    disk: Type.Object(
      {
        freeBytes: Type.Union([Type.Integer({ minimum: 0 }), Type.Null()], {
          description: "Free space of the data dir's file system; null: unknown.",
        }),
        floorBytes: Type.Integer({ minimum: 0, description: 'Creates answer 503 below this; 0: off.' }),
      },
      { additionalProperties: false },
    ),
    addresses: Type.Union(
      [
        Type.Object(
          { free: Type.Integer({ minimum: 0 }), total: Type.Integer({ minimum: 0 }) },
          { additionalProperties: false },
        ),
        Type.Null(),
      ],
      { description: 'Sandbox network addresses left and in all; null: the runtime has no sandbox network.' },
    ),
    full: Type.Array(
      Type.Union([Type.Literal('sandboxes'), Type.Literal('memory'), Type.Literal('disk'), Type.Literal('addresses')]),
      {
        description: 'The resources at their limit now; empty while a create would be let through.',
      },
    ),
  },
  { title: 'Capacity', additionalProperties: false },
);
export type Capacity = Static<typeof CapacitySchema>;

/** One runner of an `api` process (`SANDBOXD_ROLE=api`), as `/healthz` reports it. */
export const RunnerStatusSchema = Type.Object(
  {
    node: Type.Union([Type.String(), Type.Null()], {
      description: "The runner's node name (`SANDBOXD_NODE_NAME`); null until it first answered.",
    }),
    url: Type.String({ description: 'Where the api process reaches it.' }),
    state: Type.Union([Type.Literal('up'), Type.Literal('down'), Type.Literal('removed')], {
      description:
        '`up`: it answers and creates may go there; `down`: it does not answer (its sandboxes turn `error` after SANDBOXD_RUNNER_DOWN_MS); `removed`: it left the runner list.',
    }),
    downForMs: Type.Optional(Type.Integer({ minimum: 0, description: 'While not up: ms since it last answered.' })),
    reason: Type.Optional(Type.String({ description: 'While not up: why.' })),
    sandboxes: Type.Union([Type.Integer({ minimum: 0 }), Type.Null()], {
      description: 'Sandboxes it holds (running or paused), as it last reported; null: never reported.',
    }),
    memoryAvailableBytes: Type.Union([Type.Integer({ minimum: 0 }), Type.Null()], {
      description: "Its host's MemAvailable, as last reported; null: unknown.",
    }),
    diskFreeBytes: Type.Union([Type.Integer({ minimum: 0 }), Type.Null()], {
      description: "Free space of its data dir's file system, as last reported; null: unknown.",
    }),
    addresses: Type.Union(
      [
        Type.Object(
          { free: Type.Integer({ minimum: 0 }), total: Type.Integer({ minimum: 0 }) },
          { additionalProperties: false },
        ),
        Type.Null(),
      ],
      { description: 'Its sandbox network addresses left and in all; null: unknown.' },
    ),
    full: Type.Array(Type.Union([Type.Literal('memory'), Type.Literal('disk'), Type.Literal('addresses')]), {
      description: 'What it has no room in by its last report (the floors of `capacity`); empty: creates may go there.',
    }),
    isolations: Type.Optional(
      Type.Array(IsolationSupportSchema, {
        description: 'The isolation tiers it offers, as it last reported; absent: never reported.',
      }),
    ),
  },
  { title: 'RunnerStatus', additionalProperties: false },
);
export type RunnerStatusWire = Static<typeof RunnerStatusSchema>;

/** `GET /healthz`: up, and what the host (or the best runner) has left. */
export const HealthSchema = Type.Object(
  {
    status: Type.Literal('ok'),
    capacity: Type.Optional(CapacitySchema),
    isolations: Type.Optional(
      Type.Array(IsolationSupportSchema, {
        description:
          'The isolation tiers creates may ask for here (role `api`: those some runner offers), each with its OCI runtime; shown with `capacity`.',
      }),
    ),
    runners: Type.Optional(
      Type.Array(RunnerStatusSchema, {
        description:
          'Role `api`, to an admin only: every runner, by node name. `capacity` is then that of the runner the next create would go to.',
      }),
    ),
  },
  { title: 'Health', additionalProperties: false },
);
export type Health = Static<typeof HealthSchema>;

/**
 * `GET /livez` and `GET /readyz` (every role, no credentials): the kubelet's probes. A fixed
 * body that reveals nothing (no figures, names or versions); not ready is 503 `unavailable`.
 */
export const ProbeSchema = Type.Object({ status: Type.Literal('ok') }, { title: 'Probe', additionalProperties: false });
export type Probe = Static<typeof ProbeSchema>;
