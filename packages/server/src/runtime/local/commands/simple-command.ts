/**
 * Commands that `/bin/sh -c` would run as they are: the exec agent can then run them
 * without the shell (one exec fewer, ~0.7 ms on these machines), with the same result.
 *
 * A command qualifies when dash would do nothing with it but split it into words and run
 * the first one found in PATH: words of plain characters separated by blanks (no quoting,
 * expansion, globbing, tilde, comment, redirection, pipe, list or subshell), a first word
 * that is neither an assignment nor a reserved word nor a builtin of dash, bash or
 * busybox ash, and an environment whose every name is a shell identifier (dash exports
 * exactly those). The agent still checks that /bin/sh is dash and falls back to the shell
 * for anything else (see native/exec-agent.c, flag 32).
 */

/** Characters that are literal in every position for dash (none starts an expansion or a token). */
const PLAIN = /^[A-Za-z0-9_./,:@%+=-]+$/;
const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** Reserved words and builtins of dash, bash and busybox ash (run by the shell, not exec'd). */
const SHELL_WORDS = new Set(
  (
    '! { } [ [[ ]] . : alias bg bind break builtin caller case cd chdir command compgen complete compopt ' +
    'continue coproc declare dirs disown do done echo elif else enable esac eval exec exit export false fc ' +
    'fg fi for function getopts hash help history if in jobs kill let local logout mapfile popd printf ' +
    'pushd pwd read readarray readonly return select set shift shopt source suspend test then time times ' +
    'trap true type typeset ulimit umask unalias unset until wait while'
  ).split(' '),
);

/** The words of `command` when the agent may run it without the shell; null otherwise. */
export function simpleWords(command: string, env: readonly string[]): string[] | null {
  const words = command.split(/[ \t]+/).filter((w) => w !== '');
  if (!words.length || words.length > 256) return null;
  if (!words.every((w) => PLAIN.test(w))) return null;
  const first = words[0];
  if (first.includes('=') || SHELL_WORDS.has(first)) return null;
  for (const e of env) {
    const eq = e.indexOf('=');
    if (eq <= 0 || !IDENTIFIER.test(e.slice(0, eq))) return null;
  }
  return words;
}
