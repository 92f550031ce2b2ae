/** What a `sandboxd` subcommand is (commands/index.ts lists them). */
export class UsageError extends Error {}

export interface Command {
  /** One line for `sandboxd help`. */
  summary: string;
  /** Usage lines printed by `sandboxd help <command>` and after a {@link UsageError}. */
  usage: string;
  /** Runs with the arguments after the command's name; returns the exit status. */
  run(args: string[]): Promise<number>;
}
