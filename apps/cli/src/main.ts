#!/usr/bin/env node
/** `svc`: the one-process dev stack, operator commands, and a client for users. */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as NodeServices from "@effect/platform-node/NodeServices"
import { Effect } from "effect"
import { Command } from "effect/cli"
import { reportCliError } from "./Client.ts"
import { audit, health, whoami, workers } from "./Commands/Account.ts"
import { app } from "./Commands/Apps.ts"
import { dev } from "./Commands/Dev.ts"
import { events } from "./Commands/Events.ts"
import { key } from "./Commands/Keys.ts"
import { org } from "./Commands/Orgs.ts"
import { roles } from "./Commands/Roles.ts"
import { sandbox } from "./Commands/Sandboxes.ts"
import { secret } from "./Commands/Secrets.ts"
import { template } from "./Commands/Templates.ts"
import { usage } from "./Commands/Usage.ts"
import { volume } from "./Commands/Volumes.ts"
import { webhook } from "./Commands/Webhooks.ts"

const svc = Command.make("svc").pipe(
  Command.withDescription("The sandbox platform"),
  Command.withSubcommands([
    dev,
    ...roles,
    whoami,
    org,
    key,
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
    health
  ])
)

svc.pipe(
  Command.run({ version: "0.1.0" }),
  reportCliError,
  Effect.provide(NodeServices.layer),
  NodeRuntime.runMain
)
