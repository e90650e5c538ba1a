/**
 * `svc webhook create|list|get|update|test|deliveries|retry|delete`: a client of the /v1 webhook routes.
 *
 * Built on the SDK's `Svc`. Credentials: `SVC_API_KEY` and `SVC_API_URL` (default http://127.0.0.1:8080), else
 * `.svc/dev-credentials.json` (`{base_url, api_key}`, written for the dev stack). Webhook routes
 * are account-level: the key must be a `*` key. API errors print `error <code>: <message>` and
 * exit 1.
 *
 *   svc webhook create --url https://example.com/hooks --events sandbox.created,sandbox.deleted
 *   svc webhook test wh_... --wait
 *   svc webhook deliveries wh_... --status dead_letter
 *   svc webhook retry wh_... whd_...
 *   svc webhook update wh_... --disable ; svc webhook update wh_... --events '*' --enable
 */
import type { DeliveryAttempt, Webhook } from "@svc/sdk"
import { Console, Effect, Option } from "effect"
import { Argument, Command, Flag } from "effect/cli"
import { call, CliError } from "../Client.ts"

const print = (value: unknown) => Console.log(JSON.stringify(value, null, 2))
const json = Flag.Boolean("json").pipe(Flag.withDescription("Print the API's JSON"), Flag.withDefault(false))
const webhookId = Argument.String("webhook-id").pipe(Argument.withDescription("The webhook's id (wh_...)"))
const attemptLine = (row: DeliveryAttempt) =>
  [
    row.createdAt,
    row.delivery_id,
    String(row.event).padEnd(22),
    `#${row.attempt}`,
    String(row.status).padEnd(11),
    row.response_code ?? "-",
    row.duration_ms === null ? "-" : `${row.duration_ms}ms`,
    row.error ?? "",
    row.next_attempt_at ? `next ${row.next_attempt_at}` : ""
  ].join("  ").trimEnd()

const create = Command.make(
  "create",
  {
    url: Flag.String("url").pipe(Flag.withDescription("http(s) URL resolving to a public address")),
    events: Flag.String("events").pipe(
      Flag.withDescription("Comma-separated exact event names, or * (default *)"),
      Flag.optional
    ),
    secret: Flag.String("secret").pipe(
      Flag.withDescription("Your signing secret, 16+ characters (generated when omitted)"),
      Flag.optional
    ),
    disabled: Flag.Boolean("disabled").pipe(Flag.withDescription("Create it paused"), Flag.withDefault(false)),
    json
  },
  Effect.fn(function*(o) {
    const created = yield* call((svc) =>
      svc.webhooks.create({
        url: o.url,
        ...(Option.isSome(o.events) ? { events: o.events.value.split(",").map((e) => e.trim()) } : {}),
        ...(Option.isSome(o.secret) ? { secret: o.secret.value } : {}),
        ...(o.disabled ? { enabled: false } : {})
      })
    )
    if (o.json) return yield* print(created)
    yield* Console.log(`${created.id}  ${created.url}  events=${created.events.join(",")}  enabled=${created.enabled}`)
    yield* Console.log(`signing secret (shown only now): ${created.secret_returned_once}`)
  })
).pipe(Command.withDescription("Create a webhook; prints its signing secret once"))

const list = Command.make(
  "list",
  { limit: Flag.Int("limit").pipe(Flag.optional), offset: Flag.Int("offset").pipe(Flag.optional), json },
  Effect.fn(function*(o) {
    const page = yield* call((svc) =>
      svc.webhooks.list({ limit: Option.getOrUndefined(o.limit), offset: Option.getOrUndefined(o.offset) })
    )
    if (o.json) return yield* print(page)
    for (const w of page.webhooks) yield* Console.log(webhookLine(w))
    yield* Console.log(`${page.webhooks.length} of ${page.total}`)
  })
).pipe(Command.withDescription("List the org's webhooks"))

const webhookLine = (w: Webhook) => [w.id, w.enabled ? "enabled " : "paused  ", w.events.join(","), w.url].join("  ")

const get = Command.make(
  "get",
  { webhookId, json },
  Effect.fn(function*(o) {
    const w = yield* call((svc) => svc.webhooks.get(o.webhookId))
    yield* o.json ? print(w) : Console.log(webhookLine(w))
  })
).pipe(Command.withDescription("Show one webhook (never its secret)"))

const update = Command.make(
  "update",
  {
    webhookId,
    url: Flag.String("url").pipe(Flag.withDescription("A new http(s) URL"), Flag.optional),
    events: Flag.String("events").pipe(
      Flag.withDescription("Comma-separated exact event names, or *"),
      Flag.optional
    ),
    enable: Flag.Boolean("enable").pipe(Flag.withDescription("Deliver again"), Flag.withDefault(false)),
    disable: Flag.Boolean("disable").pipe(Flag.withDescription("Pause deliveries"), Flag.withDefault(false)),
    json
  },
  Effect.fn(function*(o) {
    if (o.enable && o.disable) return yield* new CliError({ message: "error: --enable or --disable, not both" })
    const patch = {
      ...(Option.isSome(o.url) ? { url: o.url.value } : {}),
      ...(Option.isSome(o.events) ? { events: o.events.value.split(",").map((e) => e.trim()) } : {}),
      ...(o.enable ? { enabled: true } : o.disable ? { enabled: false } : {})
    }
    const w = yield* call((svc) => svc.webhooks.update(o.webhookId, patch))
    yield* o.json ? print(w) : Console.log(webhookLine(w))
  })
).pipe(Command.withDescription("Change a webhook's URL, events, or pause/resume it"))

const test = Command.make(
  "test",
  {
    webhookId,
    wait: Flag.Boolean("wait").pipe(
      Flag.withDescription("Wait for the first attempt's outcome"),
      Flag.withDefault(false)
    ),
    json
  },
  Effect.fn(function*(o) {
    const { delivery_id } = yield* call((svc) => svc.webhooks.test(o.webhookId))
    if (!o.wait && o.json) return yield* print({ delivery_id })
    ;(o.json ? process.stderr : process.stdout).write(`ping queued: delivery ${delivery_id}\n`)
    if (!o.wait) return
    for (let i = 0; i < 150; i++) {
      const page = yield* call((svc) => svc.webhooks.deliveries(o.webhookId, { limit: 50 }))
      const row = page.deliveries.find((d) => d.delivery_id === delivery_id && d.status !== "pending")
      if (row !== undefined) {
        yield* o.json ? print(row) : Console.log(attemptLine(row))
        if (row.status !== "succeeded") {
          return yield* new CliError({ message: `ping not delivered: ${row.error ?? row.status}` })
        }
        return
      }
      yield* Effect.sleep("200 millis")
    }
    return yield* new CliError({ message: "no outcome after 30 s; see `svc webhook deliveries`" })
  })
).pipe(Command.withDescription("Send a ping through the real delivery path"))

const deliveries = Command.make(
  "deliveries",
  {
    webhookId,
    status: Flag.Literals("status", ["pending", "succeeded", "failed", "dead_letter", "retried"]).pipe(Flag.optional),
    limit: Flag.Int("limit").pipe(Flag.optional),
    offset: Flag.Int("offset").pipe(Flag.optional),
    json
  },
  Effect.fn(function*(o) {
    const page = yield* call((svc) =>
      svc.webhooks.deliveries(o.webhookId, {
        status: Option.getOrUndefined(o.status),
        limit: Option.getOrUndefined(o.limit),
        offset: Option.getOrUndefined(o.offset)
      })
    )
    if (o.json) return yield* print(page)
    for (const row of page.deliveries) yield* Console.log(attemptLine(row))
    yield* Console.log(`${page.deliveries.length} of ${page.total} attempts`)
  })
).pipe(Command.withDescription("List delivery attempts, newest first"))

const retry = Command.make(
  "retry",
  {
    webhookId,
    deliveryId: Argument.String("delivery-id").pipe(Argument.withDescription("The delivery's id (whd_...)")),
    json
  },
  Effect.fn(function*(o) {
    const result = yield* call((svc) => svc.webhooks.retry(o.webhookId, o.deliveryId))
    if (o.json) return yield* print(result)
    yield* Console.log(`${result.delivery_id} ${result.status}`)
  })
).pipe(Command.withDescription("Retry a failed or dead_letter delivery (its attempt counter restarts)"))

const remove = Command.make(
  "delete",
  { webhookId, json },
  Effect.fn(function*(o) {
    yield* call((svc) => svc.webhooks.delete(o.webhookId))
    if (o.json) return yield* print({ id: o.webhookId, deleted: true })
    yield* Console.log(`${o.webhookId} deleted`)
  })
).pipe(Command.withDescription("Delete a webhook"))

export const webhook = Command.make("webhook").pipe(
  Command.withDescription("Webhooks: subscriptions, test pings, deliveries"),
  Command.withSubcommands([create, list, get, update, test, deliveries, retry, remove])
)
