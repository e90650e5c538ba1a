/**
 * The floor of bench/cli.ts: `effect`'s CLI with one empty subcommand, run on the same platform
 * services as `svc` (`@effect/platform-node`), bundled the same way. Its `--help` is what any
 * command built on them costs before a command of ours is defined.
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as NodeServices from "@effect/platform-node/NodeServices"
import { Effect } from "effect"
import { Command } from "effect/cli"

Command.make("floor").pipe(
  Command.withSubcommands([Command.make("empty")]),
  Command.run({ version: "0.0.0" }),
  Effect.provide(NodeServices.layer),
  NodeRuntime.runMain
)
