import { Type, type Static } from 'typebox';

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

/** `GET /healthz`: up, and what the host has left. */
export const HealthSchema = Type.Object(
  {
    status: Type.Literal('ok'),
    capacity: Type.Optional(CapacitySchema),
  },
  { title: 'Health', additionalProperties: false },
);
export type Health = Static<typeof HealthSchema>;
