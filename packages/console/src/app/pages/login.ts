/** Sign-in (email and password) and sign-up, before there is a session. */
import { AuthenticationError, NotFoundError, ValidationError, type AccountInfo } from '@sandboxd/sdk';
import { errorText, signIn, signUp } from '../api.js';
import { h, notice, setChildren } from '../dom.js';

/** Renders the sign-in form (`mode: 'signin'`, at /login) or the sign-up form (at /signup) into `root`. */
export function renderLogin(
  root: HTMLElement,
  mode: 'signin' | 'signup',
  onSignedIn: (account: AccountInfo) => void,
): void {
  const up = mode === 'signup';
  const main = h('main', { id: 'main', class: 'login', tabindex: -1 });
  setChildren(root, main);
  const email = h('input', {
    type: 'email',
    name: 'email',
    autocomplete: up ? 'email' : 'username',
    required: true,
    id: 'email',
  });
  const password = h('input', {
    type: 'password',
    name: 'password',
    autocomplete: up ? 'new-password' : 'current-password',
    required: true,
    id: 'password',
    minlength: up ? 8 : null,
  });
  const status = h('div', { 'aria-live': 'polite' });
  const submit = h('button', { type: 'submit', class: 'btn primary wide' }, up ? 'Create account' : 'Sign in');
  const form = h(
    'form',
    { class: 'card login-card', 'aria-labelledby': 'login-title' },
    h('div', { class: 'brand big' }, h('span', { class: 'logo', 'aria-hidden': 'true' }, '>_'), 'sandboxd'),
    h('h1', { id: 'login-title' }, up ? 'Create your account' : 'Sign in to your console'),
    h('div', { class: 'field' }, h('label', { for: 'email' }, 'Email'), email),
    h(
      'div',
      { class: 'field' },
      h('label', { for: 'password' }, 'Password'),
      password,
      up ? h('p', { class: 'hint' }, 'At least 8 characters.') : null,
    ),
    status,
    submit,
    h(
      'p',
      { class: 'switch' },
      up ? 'Have an account? ' : 'No account yet? ',
      h('a', { href: up ? '/login' : '/signup' }, up ? 'Sign in' : 'Create one'),
    ),
    up
      ? null
      : h('p', { class: 'hint' }, 'First start? Open the one-time login link the server printed on its console.'),
  );
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    submit.disabled = true;
    setChildren(status);
    try {
      onSignedIn(up ? await signUp(email.value, password.value) : await signIn(email.value, password.value));
    } catch (e) {
      const text =
        e instanceof AuthenticationError
          ? 'Wrong email or password.'
          : e instanceof ValidationError
            ? e.problems.map((p) => `${p.path.slice(1) || 'request'}: ${p.message}`).join('; ') || e.message
            : up && e instanceof NotFoundError
              ? 'Sign-up is turned off on this server; ask its admin for an account.'
              : errorText(e);
      setChildren(status, notice('error', text));
    } finally {
      submit.disabled = false;
    }
  });
  main.append(form);
  email.focus();
}
