import { createReadStream, statSync } from 'node:fs';
import { basename } from 'node:path';
import { Readable } from 'node:stream';
import { Command } from 'commander';
import { NotFoundError, type BuildableImage, type ImageInfo } from '@sandboxd/sdk';
import { withExamples, type Context } from '../context.js';
import { ProgressLine } from '../progress.js';
import { CliError, formatBytes, printJson, table } from '../ui.js';

const BUILDABLE = ['local/debian:bookworm', 'local/busybox:latest'];
const short = (digest: string) => digest.replace(/^sha256:/, '').slice(0, 12);
const summary = (i: ImageInfo) => `${i.ref} ${short(i.digest)} (${formatBytes(i.sizeBytes)})`;

/** Runs an image job with a progress line; prints the image, or JSON. */
async function withProgress(
  title: string,
  json: boolean | undefined,
  job: (p: ProgressLine) => Promise<ImageInfo>,
  verb: string,
): Promise<void> {
  const progress = new ProgressLine(title);
  let img: ImageInfo;
  try {
    img = await job(progress);
  } catch (e) {
    progress.stop();
    throw e;
  }
  progress.stop(`${verb} ${summary(img)}`);
  if (json) printJson(img);
}

/**
 * Wraps an action so that the 404 non-admins get reads as what it means: the image routes
 * answer `not_found` only when they are not there for this account (an unknown image is
 * `template_not_found`).
 */
function adminOnly<A extends unknown[]>(fn: (...a: A) => Promise<void>): (...a: A) => Promise<void> {
  return async (...a) => {
    try {
      await fn(...a);
    } catch (e) {
      if (e instanceof NotFoundError && e.kind === 'not_found') {
        throw new CliError('the images commands need the API key of an admin account');
      }
      throw e;
    }
  };
}

/** `sbx images pull|ls|import|build`: the server's image cache (admin only). */
export function imagesCommand(ctx: Context): Command {
  const images = new Command('images').description("manage the server's images (admin only)");

  images.addCommand(
    withExamples(
      new Command('pull')
        .description('pull an image from its registry, even if cached')
        .argument('<ref>', 'image reference, e.g. debian:bookworm or 127.0.0.1:5000/tools:1')
        .option('--json', 'print the image as JSON')
        .action(
          adminOnly(async (ref: string, o: { json?: boolean }) => {
            const client = ctx.client();
            await withProgress(
              `pull ${ref}`,
              o.json,
              (p) => client.images.pull(ref, { onProgress: (e) => p.update(e) }),
              'pulled',
            );
          }),
        ),
      'sbx images pull debian:bookworm',
    ),
  );

  images.addCommand(
    withExamples(
      new Command('ls')
        .alias('list')
        .description('list cached images')
        .option('--json', 'print the images as JSON')
        .action(
          adminOnly(async (o: { json?: boolean }) => {
            const list = await ctx.client().images.list();
            if (o.json) return printJson(list);
            if (list.length === 0) return void process.stdout.write('No images.\n');
            process.stdout.write(
              table(
                ['REF', 'DIGEST', 'SIZE'],
                list.map((i) => [i.ref, short(i.digest), formatBytes(i.sizeBytes)]),
                ctx.out,
              ),
            );
          }),
        ),
      'sbx images ls',
    ),
  );

  images.addCommand(
    withExamples(
      new Command('import')
        .description('upload an OCI archive or `docker save` tar and add it to the cache')
        .argument('<file>', 'the .tar file')
        .option('--ref <ref>', 'name to give the image (default: the name the archive records)')
        .option('--json', 'print the image as JSON')
        .action(
          adminOnly(async (file: string, o: { ref?: string; json?: boolean }) => {
            let size: number;
            try {
              size = statSync(file).size;
            } catch {
              throw new CliError(`cannot read ${file}`);
            }
            const client = ctx.client();
            await withProgress(
              `import ${basename(file)}`,
              o.json,
              (p) => {
                let sent = 0;
                const count = new TransformStream<Uint8Array, Uint8Array>({
                  transform(chunk, c) {
                    sent += chunk.byteLength;
                    p.update({ phase: sent >= size ? 'importing' : 'uploading', bytes: sent, totalBytes: size });
                    c.enqueue(chunk);
                  },
                });
                const body = (Readable.toWeb(createReadStream(file)) as ReadableStream<Uint8Array>).pipeThrough(count);
                return client.images.import(body, { ref: o.ref });
              },
              'imported',
            );
          }),
        ),
      'sbx images import ./tools.tar --ref tools:1',
    ),
  );

  images.addCommand(
    withExamples(
      new Command('build')
        .description(`build one of ${BUILDABLE.join(', ')} offline on the server`)
        .argument('<ref>', BUILDABLE.join(' or '))
        .option('--json', 'print the image as JSON')
        .action(
          adminOnly(async (ref: string, o: { json?: boolean }) => {
            if (!BUILDABLE.includes(ref)) throw new CliError(`only ${BUILDABLE.join(' and ')} can be built`);
            const client = ctx.client();
            await withProgress(
              `build ${ref}`,
              o.json,
              (p) => client.images.build(ref as BuildableImage, { onProgress: (e) => p.update(e) }),
              'built',
            );
          }),
        ),
      'sbx images build local/busybox:latest',
    ),
  );
  return images;
}
