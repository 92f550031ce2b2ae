import { Type, type Static } from 'typebox';
import { ErrorBodySchema } from './common.js';

/** Images the server builds offline, without a registry (`POST /api/v1/images/build`). */
export const BUILDABLE_IMAGES = ['local/debian:bookworm', 'local/busybox:latest'] as const;
export type BuildableImage = (typeof BUILDABLE_IMAGES)[number];

/** Phases a pull or build reports, in order; `done` is last. */
export const IMAGE_PHASES = ['pulling', 'bootstrapping', 'packing', 'unpacking', 'done'] as const;
export type ImagePhase = (typeof IMAGE_PHASES)[number];

/** Media type of streamed progress: one JSON object per line (see {@link ImageProgressEventSchema}). */
export const NDJSON_MEDIA_TYPE = 'application/x-ndjson';
/** Media type of the body of `POST /api/v1/images/import`. */
export const IMAGE_ARCHIVE_MEDIA_TYPE = 'application/x-tar';

/** An OCI image reference: `debian:bookworm`, `ghcr.io/org/app:1.2`, `127.0.0.1:5000/x@sha256:...`. */
export const ImageRefString = Type.String({ minLength: 1, maxLength: 512, pattern: '^[^\\s\\u0000]+$' });

/** An image in the server's cache. */
export const ImageSchema = Type.Object(
  {
    ref: Type.String({ description: 'Canonical reference in lists; the reference as given otherwise.' }),
    digest: Type.String({ description: 'Config digest (`sha256:...`).' }),
    sizeBytes: Type.Integer({ minimum: 0 }),
    workingDir: Type.String(),
    user: Type.String(),
    env: Type.Record(Type.String(), Type.String()),
  },
  { title: 'Image', additionalProperties: false },
);
export type Image = Static<typeof ImageSchema>;

/** `{ images }`, the answer of `GET /api/v1/images`. */
export const ImageListSchema = Type.Object(
  { images: Type.Array(ImageSchema) },
  { title: 'ImageList', additionalProperties: false },
);
export type ImageList = Static<typeof ImageListSchema>;

/** `{ image }`, the answer of pull, build and import when progress is not streamed. */
export const ImageReplySchema = Type.Object(
  { image: ImageSchema },
  { title: 'ImageReply', additionalProperties: false },
);
export type ImageReply = Static<typeof ImageReplySchema>;

/** The body of `POST /api/v1/images/pull`: pulls even when cached, so a moved tag is followed. */
export const ImagePullSchema = Type.Object(
  { ref: ImageRefString },
  { title: 'ImagePull', additionalProperties: false },
);
export type ImagePull = Static<typeof ImagePullSchema>;

/** The body of `POST /api/v1/images/build`: (re)builds one of {@link BUILDABLE_IMAGES}. */
export const ImageBuildSchema = Type.Object(
  { ref: Type.Enum([...BUILDABLE_IMAGES]) },
  { title: 'ImageBuild', additionalProperties: false },
);
export type ImageBuild = Static<typeof ImageBuildSchema>;

/** Query of `POST /api/v1/images/import`: the name to give the image (default: the name the archive records). */
export const ImageImportQuerySchema = Type.Object(
  { ref: Type.Optional(ImageRefString) },
  { additionalProperties: false },
);
export type ImageImportQuery = Static<typeof ImageImportQuerySchema>;

/**
 * One line of streamed progress (`Accept: application/x-ndjson`): any number of
 * `progress` lines, then exactly one `done` or `error` line. The status is 200 either way,
 * since it is sent before the outcome is known.
 */
export const ImageProgressEventSchema = Type.Union(
  [
    Type.Object(
      {
        type: Type.Literal('progress'),
        phase: Type.Enum([...IMAGE_PHASES]),
        bytes: Type.Optional(Type.Integer({ minimum: 0, description: 'Downloaded or written so far.' })),
        totalBytes: Type.Optional(Type.Integer({ minimum: 0 })),
      },
      { additionalProperties: false },
    ),
    Type.Object({ type: Type.Literal('done'), image: ImageSchema }, { additionalProperties: false }),
    Type.Object({ type: Type.Literal('error'), error: ErrorBodySchema }, { additionalProperties: false }),
  ],
  { title: 'ImageProgressEvent' },
);
export type ImageProgressEvent = Static<typeof ImageProgressEventSchema>;
