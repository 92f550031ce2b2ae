/**
 * xterm.js adds `<style>` elements at run time. The page's Content-Security-Policy allows
 * styles only from the server and from elements carrying this response's nonce, so every
 * style element created on this page gets the nonce (the server sends a new one each time).
 */
const nonce = document.querySelector<HTMLMetaElement>('meta[name="sandboxd-nonce"]')?.content ?? '';

if (nonce && !nonce.startsWith('%')) {
  const create = Document.prototype.createElement;
  Document.prototype.createElement = function (this: Document, tag: string, options?: ElementCreationOptions) {
    const el = create.call(this, tag, options);
    if (tag.toLowerCase() === 'style') (el as HTMLStyleElement).nonce = nonce;
    return el;
  } as typeof Document.prototype.createElement;
}

/** Whether the server saw a valid session cookie when it sent the page. */
export const bootSignedIn =
  document.querySelector<HTMLMetaElement>('meta[name="sandboxd-boot"]')?.content === 'signed-in';
