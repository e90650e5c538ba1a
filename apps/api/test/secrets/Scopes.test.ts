/**
 * docs/contract.md#secrets-scopes route by route over the real API: what `secrets:read`, `secrets:write`, `secrets:use`,
 * `secrets`, `secrets:*`, `*` and a `sandbox:<id>` key may do with secrets and with bindings; and
 * the service-key rule: a userless key manages secrets only when its id is listed in
 * `SVC_SECRET_MANAGER_API_KEY_IDS` (or the file of `SVC_SECRET_MANAGER_API_KEY_IDS_FILE`, re-read
 * at every check: a listed key is rotated with no restart) and it holds write and use.
 *
 * The expectations are written from the contract, one row per scope set: each route is called with a
 * fresh secret where it changes one, so every cell is independent.
 */
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { randomBytes } from "node:crypto"
import { type Org, request, Stack, StackLayer } from "./Secrets.support.ts"

type Route = "list" | "get" | "create" | "rotate" | "patchFormat" | "patchHosts" | "patchHeader" | "delete"
const ROUTES: ReadonlyArray<Route> = [
  "list",
  "get",
  "create",
  "rotate",
  "patchFormat",
  "patchHosts",
  "patchHeader",
  "delete"
]

/** An expected answer: a 2xx, or 403 with its code and (for insufficient_scope) the missing scope. */
type Expect = "ok" | `403 ${string}`

const body = () => ({
  name: `s-${randomBytes(6).toString("hex")}`,
  value: `v-${randomBytes(8).toString("hex")}`,
  allowed_hosts: ["api.example.com"]
})

/** Calls `route` with `token` on a fresh secret of `org` (made with its user's `*` key). */
const callRoute = (org: Org, token: string, route: Route) =>
  Effect.gen(function*() {
    const { base, key } = yield* Stack
    const owner = (yield* key(org, ["*"])).token
    const made = yield* request(base, owner, "POST", "/v1/secrets", body())
    expect(made.status).toBe(201)
    const id = made.body.id as string
    switch (route) {
      case "list":
        return yield* request(base, token, "GET", "/v1/secrets")
      case "get":
        return yield* request(base, token, "GET", `/v1/secrets/${id}`)
      case "create":
        return yield* request(base, token, "POST", "/v1/secrets", body())
      case "rotate":
        return yield* request(base, token, "PUT", `/v1/secrets/${id}/value`, { value: "next-value" })
      case "patchFormat":
        return yield* request(base, token, "PATCH", `/v1/secrets/${id}`, { header_format: "Token {value}" })
      case "patchHosts":
        return yield* request(base, token, "PATCH", `/v1/secrets/${id}`, { allowed_hosts: ["b.example.com"] })
      case "patchHeader":
        return yield* request(base, token, "PATCH", `/v1/secrets/${id}`, { header_name: "X-Key" })
      case "delete":
        return yield* request(base, token, "DELETE", `/v1/secrets/${id}`)
    }
  })

const outcome = (res: { status: number; body: any }): Expect =>
  res.status >= 200 && res.status < 300
    ? "ok"
    : `${res.status} ${res.body?.code}${res.body?.required_scope ? ` ${res.body.required_scope}` : ""}` as Expect

const READ: Record<Route, Expect> = {
  list: "ok",
  get: "ok",
  create: "403 insufficient_scope secrets:write",
  rotate: "403 insufficient_scope secrets:write",
  patchFormat: "403 insufficient_scope secrets:write",
  patchHosts: "403 insufficient_scope secrets:write",
  patchHeader: "403 insufficient_scope secrets:write",
  delete: "403 insufficient_scope secrets:write"
}
const WRITE: Record<Route, Expect> = {
  list: "ok",
  get: "ok",
  create: "ok",
  rotate: "ok",
  patchFormat: "ok",
  patchHosts: "403 insufficient_scope secrets:use",
  patchHeader: "403 insufficient_scope secrets:use",
  delete: "ok"
}
const USE: Record<Route, Expect> = {
  list: "403 insufficient_scope secrets:read",
  get: "403 insufficient_scope secrets:read",
  create: "403 insufficient_scope secrets:write",
  rotate: "403 insufficient_scope secrets:write",
  patchFormat: "403 insufficient_scope secrets:write",
  patchHosts: "403 insufficient_scope secrets:write",
  patchHeader: "403 insufficient_scope secrets:write",
  delete: "403 insufficient_scope secrets:write"
}
const every = (answer: Expect) => Object.fromEntries(ROUTES.map((r) => [r, answer])) as Record<Route, Expect>
const ALL = every("ok")
/** A userless key not allowed to manage secrets: reads pass, every change is refused. */
const NOT_A_MANAGER: Record<Route, Expect> = { ...every("403 secret_manager_not_allowed"), list: "ok", get: "ok" }

/** No agent serves this stack: its sandboxes ask for a region none serves (created, then error). */
const NOWHERE = "nowhere"

layer(StackLayer, { timeout: 180_000, excludeTestServices: true })("Secrets scopes", (it) => {
  it.effect("user keys: read, write, use, write+use, secrets, secrets:*, *, sandbox:<id>, route by route", () =>
    Effect.gen(function*() {
      const { a, base, key } = yield* Stack
      const sandbox = yield* request(base, (yield* key(a, ["*"])).token, "POST", "/v1/sandboxes", { region: NOWHERE })
      const rows: ReadonlyArray<readonly [ReadonlyArray<string>, Record<Route, Expect>]> = [
        [["secrets:read"], READ],
        [["secrets:write"], WRITE],
        [["secrets:use"], USE],
        [["secrets:write", "secrets:use"], ALL],
        [["secrets"], ALL],
        [["secrets:*"], ALL],
        [["*"], ALL],
        [["sandboxes:write"], USE],
        [[`sandbox:${sandbox.body.id}`], USE],
        [[`sandbox:${sandbox.body.id}`, "secrets:read"], READ]
      ]
      const mismatches: Array<string> = []
      for (const [scopes, expected] of rows) {
        const token = (yield* key(a, scopes)).token
        for (const route of ROUTES) {
          const got = outcome(yield* callRoute(a, token, route))
          if (got !== expected[route]) {
            mismatches.push(`[${scopes.join(" ")}] ${route}: ${got}, expected ${expected[route]}`)
          }
        }
      }
      expect(mismatches).toEqual([])
    }))

  it.effect("bindings: secrets:use with sandboxes:write on that sandbox, at create and after; a sandbox key confined", () =>
    Effect.gen(function*() {
      const { a, base, key } = yield* Stack
      const owner = (yield* key(a, ["*"])).token
      const secret = (yield* request(base, owner, "POST", "/v1/secrets", body())).body.id as string
      const parent = (yield* request(base, owner, "POST", "/v1/sandboxes", { region: NOWHERE })).body.id as string
      const other = (yield* request(base, owner, "POST", "/v1/sandboxes", { region: NOWHERE })).body.id as string
      const bind = (token: string, sandboxId: string) =>
        Effect.map(
          request(base, token, "POST", `/v1/sandboxes/${sandboxId}/secrets`, { secret_id: secret }),
          outcome
        )
      const createWith = (token: string) =>
        Effect.map(request(base, token, "POST", "/v1/sandboxes", { region: NOWHERE, secrets: [secret] }), outcome)
      const cases: ReadonlyArray<readonly [ReadonlyArray<string>, Expect, Expect]> = [
        // scopes, bind to `parent`, create with the secret
        [["secrets:use"], "403 insufficient_scope sandboxes:write", "403 insufficient_scope sandboxes:write"],
        [["sandboxes:write"], "403 insufficient_scope secrets:use", "403 insufficient_scope secrets:use"],
        [
          ["sandboxes:write", "secrets:write"],
          "403 insufficient_scope secrets:use",
          "403 insufficient_scope secrets:use"
        ],
        [
          ["sandboxes:write", "secrets:read"],
          "403 insufficient_scope secrets:use",
          "403 insufficient_scope secrets:use"
        ],
        [["sandboxes:write", "secrets:use"], "ok", "ok"],
        [["sandboxes", "secrets"], "ok", "ok"],
        [["sandboxes:*", "secrets:*"], "ok", "ok"],
        [["*"], "ok", "ok"],
        [[`sandbox:${parent}`], "403 insufficient_scope secrets:use", "403 insufficient_scope secrets:use"],
        [[`sandbox:${parent}`, "secrets:use"], "ok", "ok"]
      ]
      const mismatches: Array<string> = []
      for (const [scopes, bound, created] of cases) {
        const token = (yield* key(a, scopes)).token
        const gotBind = yield* bind(token, parent)
        const gotCreate = yield* createWith(token)
        if (gotBind !== bound) mismatches.push(`[${scopes.join(" ")}] bind: ${gotBind}, expected ${bound}`)
        if (gotCreate !== created) mismatches.push(`[${scopes.join(" ")}] create: ${gotCreate}, expected ${created}`)
      }
      // The single-sandbox policy holds: another sandbox is out of scope.
      const confined = (yield* key(a, [`sandbox:${parent}`, "secrets:use"])).token
      mismatches.push(...[yield* bind(confined, other)].filter((o) => o !== "403 sandbox_out_of_scope"))
      expect(mismatches).toEqual([])
      // An unlisted service key binds: binding uses a secret, it does not manage one.
      const service = (yield* key(a, ["*"], "service")).token
      expect(yield* bind(service, other)).toBe("ok")
    }))

  it.effect("service keys: unlisted refused even with *; listed by the variable; listed without use refused", () =>
    Effect.gen(function*() {
      const { a, key, listedByEnv } = yield* Stack
      const mismatches: Array<string> = []
      const check = (label: string, token: string, expected: Record<Route, Expect>) =>
        Effect.gen(function*() {
          for (const route of ROUTES) {
            const got = outcome(yield* callRoute(a, token, route))
            if (got !== expected[route]) mismatches.push(`${label} ${route}: ${got}, expected ${expected[route]}`)
          }
        })
      yield* check("unlisted *", (yield* key(a, ["*"], "service")).token, NOT_A_MANAGER)
      yield* check("unlisted secrets", (yield* key(a, ["secrets"], "service")).token, NOT_A_MANAGER)
      yield* check("listed * (variable)", listedByEnv.token, ALL)
      expect(mismatches).toEqual([])
    }))

  it.effect("the managers file is read at every check: listed, without use, and a rotation without restart", () =>
    Effect.gen(function*() {
      const { a, base, key, writeManagersFile } = yield* Stack
      const create = (token: string) => Effect.map(request(base, token, "POST", "/v1/secrets", body()), outcome)
      const old = yield* key(a, ["secrets:write", "secrets:use"], "service")
      const replacement = yield* key(a, ["secrets"], "service")
      const writeOnly = yield* key(a, ["secrets:write"], "service")
      const starWithoutSecrets = yield* key(a, ["sandboxes:write", "secrets:read"], "service")

      expect(yield* create(old.token)).toBe("403 secret_manager_not_allowed")
      yield* writeManagersFile([old.id, writeOnly.id, starWithoutSecrets.id])
      expect(yield* create(old.token)).toBe("ok")
      // Listed, but without secrets:use (or without write): still refused.
      expect(yield* create(writeOnly.token)).toBe("403 secret_manager_not_allowed")
      expect(yield* create(starWithoutSecrets.token)).toBe("403 insufficient_scope secrets:write")
      expect(outcome(yield* callRoute(a, writeOnly.token, "delete"))).toBe("403 secret_manager_not_allowed")

      // Rotation: add the replacement, both work; remove the old id, only the replacement works.
      expect(yield* create(replacement.token)).toBe("403 secret_manager_not_allowed")
      yield* writeManagersFile([old.id, replacement.id])
      expect(yield* create(old.token)).toBe("ok")
      expect(yield* create(replacement.token)).toBe("ok")
      yield* writeManagersFile([replacement.id])
      expect(yield* create(old.token)).toBe("403 secret_manager_not_allowed")
      expect(outcome(yield* callRoute(a, old.token, "rotate"))).toBe("403 secret_manager_not_allowed")
      expect(yield* create(replacement.token)).toBe("ok")
      expect(outcome(yield* callRoute(a, replacement.token, "patchHosts"))).toBe("ok")
      // Reads never needed the list.
      expect(outcome(yield* callRoute(a, old.token, "list"))).toBe("ok")

      // A file that is not a list of key ids lists no one (fails closed); the variable still counts.
      yield* writeManagersFile([replacement.id, "not-a-key-id"])
      expect(yield* create(replacement.token)).toBe("403 secret_manager_not_allowed")
      yield* writeManagersFile([])
    }))
})
