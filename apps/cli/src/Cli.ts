/**
 * The `svc` command tree and how it runs. The user's commands (every one a client of the /v1 API
 * through `@svc/sdk`) are the whole tree of the installable `svc` (`Client/main.ts`, packed by
 * `npm run cli:pack`); the repository's `svc` (`main.ts`) adds the operator's (`svc dev`, one
 * per role, `svc org create`, `svc key create`), whose modules load only when one of them runs.
 * Nothing here imports a server package: `svc --help` and every user command load the client
 * alone.
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as NodeServices from "@effect/platform-node/NodeServices"
import { Effect } from "effect"
import { Command } from "effect/cli"
import { reportCliError } from "./Client.ts"
import { audit, health, whoami, workers } from "./Commands/Account.ts"
import { app } from "./Commands/Apps.ts"
import { events } from "./Commands/Events.ts"
import { key } from "./Commands/Keys.ts"
import { mcp } from "./Commands/Mcp.ts"
import { org } from "./Commands/Orgs.ts"
import { sandbox } from "./Commands/Sandboxes.ts"
import { secret } from "./Commands/Secrets.ts"
import { template } from "./Commands/Templates.ts"
import { usage } from "./Commands/Usage.ts"
import { volume } from "./Commands/Volumes.ts"
import { webhook } from "./Commands/Webhooks.ts"

export const VERSION = "0.1.0"

type Commands = ReadonlyArray<Command.Command.Any>

/** The operator's commands, where the tree has them: at the top, under `org` and under `key`. */
export interface OperatorCommands<Top extends Commands, Org extends Commands, Key extends Commands> {
  readonly top: Top
  readonly org: Org
  readonly key: Key
}

/** The installable `svc`'s: none. */
export const NO_OPERATOR_COMMANDS: OperatorCommands<readonly [], readonly [], readonly []> = {
  top: [],
  org: [],
  key: []
}

/** `svc` with the user's commands and the operator's given. */
export const tree = <const Top extends Commands, const Org extends Commands, const Key extends Commands>(
  operator: OperatorCommands<Top, Org, Key>
) =>
  Command.make("svc").pipe(
    Command.withDescription("The sandbox platform"),
    Command.withSubcommands([
      ...operator.top,
      whoami,
      org(operator.org),
      key(operator.key),
      sandbox,
      secret,
      volume,
      webhook,
      template,
      app,
      events,
      usage,
      audit,
      workers,
      health,
      mcp
    ])
  )

/** Runs a tree on the process's arguments; a `CliError` is printed with exit status 1. */
export const run = <Name extends string, Input, ContextInput, E>(
  command: Command.Command<Name, Input, ContextInput, E, NodeServices.NodeServices>
) =>
  command.pipe(
    Command.run({ version: VERSION }),
    reportCliError,
    Effect.provide(NodeServices.layer),
    NodeRuntime.runMain
  )
