import { Type, type Static } from 'typebox';

/** The onboarding event kinds accepted by `POST /api/v1/events/track`. */
export const EVENT_KINDS = [
  'onboarding.started',
  'onboarding.step_1_welcome',
  'onboarding.step_2_setup_workspace',
  'onboarding.step_3_verify_nodejs',
  'onboarding.step_4_create_token',
  'onboarding.step_5_export_token',
  'onboarding.step_6_install_sdk',
  'onboarding.step_7_create_script',
  'onboarding.step_8_run_script',
  'onboarding.completed',
  'onboarding.skipped',
] as const;
export type EventKind = (typeof EVENT_KINDS)[number];

/** The body of `POST /api/v1/events/track`; `metadata` is at most 8 KiB as JSON. */
export const TrackEventSchema = Type.Object(
  {
    event: Type.Enum([...EVENT_KINDS]),
    metadata: Type.Record(Type.String(), Type.Unknown()),
  },
  { title: 'TrackEvent', additionalProperties: false },
);
export type TrackEvent = Static<typeof TrackEventSchema>;

/** One stored event, as the account's event list answers it. */
export const StoredEventSchema = Type.Object(
  {
    event: Type.String(),
    metadata: Type.Record(Type.String(), Type.Unknown()),
    createdAt: Type.String({ format: 'date-time' }),
  },
  { title: 'StoredEvent', additionalProperties: false },
);

/** `{ events }`, oldest first. */
export const EventListSchema = Type.Object(
  { events: Type.Array(StoredEventSchema) },
  { title: 'EventList', additionalProperties: false },
);
export type EventList = Static<typeof EventListSchema>;
