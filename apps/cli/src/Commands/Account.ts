/**
 * `svc whoami`, `svc audit`, `svc workers`, `svc health`: who the key is, the org's audit log
 * (a full-access key), the platform's worker processes, the API's health. Over the API, like
 * `svc sandbox`.
 *
 *   svc whoami --json
 *   svc audit --action apikey.created --limit 20
 */
import type { AuditEntry } from "@svc/sdk"
import { Console, Effect, Option } from "effect"
import { Command, Flag } from "effect/cli"
import { call } from "../Client.ts"

const print = (value: unknown) => Console.log(JSON.stringify(value, null, 2))
const json = Flag.Boolean("json").pipe(Flag.withDescription("Print the API's JSON"), Flag.withDefault(false))

export const whoami = Command.make(
  "whoami",
  { json },
  Effect.fn(function*(o) {
    const me = yield* call((svc) => svc.whoami())
    if (o.json) return yield* print(me)
    yield* Console.log(`org         ${me.org.id}  ${me.org.name}`)
    yield* Console.log(`user        ${me.user === null ? "none (a service key)" : `${me.user.id}  ${me.user.email}`}`)
    yield* Console.log(`credential  ${me.credential.type} ${me.credential.id}`)
    yield* Console.log(`scopes      ${me.credential.scopes.join(" ")}`)
    yield* Console.log(`expires     ${me.credential.expiresAt ?? "never"}`)
  })
).pipe(Command.withDescription("Who the key is: its org, its user, its scopes (any valid key)"))

const entryLine = (e: AuditEntry) =>
  [e.createdAt, e.action.padEnd(22), `${e.actor.type}:${e.actor.id ?? "-"}`, e.target_id ?? "-", e.ip ?? ""].join("  ")
    .trimEnd()

export const audit = Command.make(
  "audit",
  {
    action: Flag.String("action").pipe(
      Flag.withDescription("Only this action (apikey.created, sandbox.deleted, org.updated...)"),
      Flag.optional
    ),
    limit: Flag.Int("limit").pipe(Flag.optional),
    offset: Flag.Int("offset").pipe(Flag.optional),
    json
  },
  Effect.fn(function*(o) {
    const page = yield* call((svc) =>
      svc.audit.list({
        action: Option.getOrUndefined(o.action),
        limit: Option.getOrUndefined(o.limit),
        offset: Option.getOrUndefined(o.offset)
      })
    )
    if (o.json) return yield* print(page)
    for (const e of page.entries) yield* Console.log(entryLine(e))
    yield* Console.log(`${page.entries.length} of ${page.total}${page.has_more ? " (more: --offset)" : ""}`)
  })
).pipe(Command.withDescription("The org's audit log, newest first (a full-access key)"))

export const workers = Command.make(
  "workers",
  { json },
  Effect.fn(function*(o) {
    const list = yield* call((svc) => svc.workers.list())
    if (o.json) return yield* print(list)
    for (const w of list.workers) yield* Console.log([w.name, w.script_name, w.version, w.prefix].join("  "))
    yield* Console.log(`${list.workers.length} workers`)
  })
).pipe(Command.withDescription("The runtime's worker processes that sent a heartbeat in the last 15 s"))

export const health = Command.make(
  "health",
  { json },
  Effect.fn(function*(o) {
    const h = yield* call((svc) => svc.health())
    if (o.json) return yield* print(h)
    yield* Console.log(`${h.status}  postgres=${h.postgres}  nats=${h.nats}`)
  })
).pipe(Command.withDescription("The API's health: whether its Postgres and NATS answer"))
