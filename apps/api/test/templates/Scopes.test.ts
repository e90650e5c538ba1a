/**
 * Templates scopes route by route over the real API (docs/contract.md#templates,
 * docs/contract.md#single-sandbox-scope): what `templates:read`, `templates:write`, `templates`,
 * `*`, `sandboxes:write`, a `sandbox:<id>` key alone and one with `templates:read` or
 * `templates:write` added may do with each template route and with
 * `POST /v1/sandboxes/{id}/snapshot` (it makes an org template: `sandboxes:write` and
 * `templates:write`, then the single-sandbox policy). Each call that changes something gets a
 * template or name of its own: every cell is independent.
 */
import { expect, layer } from "@effect/vitest"
import { Duration, Effect } from "effect"
import { randomBytes } from "node:crypto"
import { eventually, Identity } from "../../testing/Sandboxes.ts"
import { api, create, Env, EnvLayer, waitState } from "../../testing/SandboxesEnv.ts"

type Route = "list" | "get" | "logs" | "create" | "delete" | "snapshot" | "snapshotOther"
const ROUTES: ReadonlyArray<Route> = ["list", "get", "logs", "create", "delete", "snapshot", "snapshotOther"]

type Expect = "ok" | `403 ${string}`

const name = () => `t-${randomBytes(5).toString("hex")}`

/** A ready template of the org, made with its `*` key. */
const readyTemplate = Effect.gen(function*() {
  const made = yield* api("POST", "/v1/templates", { body: { name: name() } })
  expect(made.status, made.text).toBe(202)
  const ready = yield* eventually(
    api("GET", `/v1/templates/${made.json.id}`),
    (r) => r.json?.state !== "building",
    Duration.seconds(60)
  )
  expect(ready.json.state).toBe("ready")
  return made.json.id as string
})

const outcome = (res: { status: number; body: any }): Expect =>
  res.status >= 200 && res.status < 300
    ? "ok"
    : `${res.status} ${res.body?.code}${res.body?.required_scope ? ` ${res.body.required_scope}` : ""}` as Expect

const row = (templates: Expect, write: Expect, snapshot: Expect, snapshotOther: Expect = snapshot) =>
  ({
    list: templates,
    get: templates,
    logs: templates,
    create: write,
    delete: write,
    snapshot,
    snapshotOther
  }) satisfies Record<Route, Expect>

layer(EnvLayer, { excludeTestServices: true, timeout: 300_000 })("templates scopes", (it) => {
  it.effect("each scope set on each route: templates:read/write, *, sandboxes:write, a sandbox:<id> key", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const identity = yield* Identity
      const mine = yield* create({})
      const other = yield* create({})
      yield* waitState(mine.id, "running")
      yield* waitState(other.id, "running")
      const existing = yield* readyTemplate

      const callRoute = (token: string, route: Route) =>
        Effect.gen(function*() {
          switch (route) {
            case "list":
              return yield* api("GET", "/v1/templates", { token })
            case "get":
              return yield* api("GET", `/v1/templates/${existing}`, { token })
            case "logs":
              return yield* api("GET", `/v1/templates/${existing}/logs`, { token })
            case "create":
              return yield* api("POST", "/v1/templates", { token, body: { name: name() } })
            case "delete":
              return yield* api("DELETE", `/v1/templates/${yield* readyTemplate}`, { token })
            case "snapshot":
              return yield* api("POST", `/v1/sandboxes/${mine.id}/snapshot`, { token, body: { name: name() } })
            case "snapshotOther":
              return yield* api("POST", `/v1/sandboxes/${other.id}/snapshot`, { token, body: { name: name() } })
          }
        })

      const table: ReadonlyArray<readonly [ReadonlyArray<string>, Record<Route, Expect>]> = [
        [["*"], row("ok", "ok", "ok")],
        [
          ["templates:read"],
          row("ok", "403 insufficient_scope templates:write", "403 insufficient_scope sandboxes:write")
        ],
        [["templates:write"], row("ok", "ok", "403 insufficient_scope sandboxes:write")],
        [["templates"], row("ok", "ok", "403 insufficient_scope sandboxes:write")],
        // A snapshot makes an org template: sandboxes:write alone does not (issue 25, item 6).
        [
          ["sandboxes:write"],
          row(
            "403 insufficient_scope templates:read",
            "403 insufficient_scope templates:write",
            "403 insufficient_scope templates:write"
          )
        ],
        [["sandboxes:write", "templates:write"], row("ok", "ok", "ok")],
        // The key injected into a sandbox is refused as on /v1/templates, its own sandbox included.
        [
          [`sandbox:${mine.id}`],
          row(
            "403 insufficient_scope templates:read",
            "403 insufficient_scope templates:write",
            "403 insufficient_scope templates:write"
          )
        ],
        [
          [`sandbox:${mine.id}`, "templates:read"],
          row("ok", "403 insufficient_scope templates:write", "403 insufficient_scope templates:write")
        ],
        [
          [`sandbox:${mine.id}`, "templates:write"],
          row("ok", "ok", "ok", "403 sandbox_out_of_scope")
        ]
      ]
      const seen: Array<string> = []
      const expected: Array<string> = []
      for (const [scopes, expectations] of table) {
        const token = yield* identity.key(env.org.id, scopes)
        for (const route of ROUTES) {
          const res = yield* callRoute(token, route)
          seen.push(`${scopes.join(",")} ${route}: ${outcome(res)}`)
          expected.push(`${scopes.join(",")} ${route}: ${expectations[route]}`)
        }
      }
      expect(seen).toEqual(expected)
    }))
})
