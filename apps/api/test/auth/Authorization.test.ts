/**
 * The authorization matrix, generated from the `Api` definition itself: every endpoint of every
 * group (routes added later join automatically) × every kind of credential → the status and code
 * that docs/contract.md#authentication, #scopes say, over real HTTP against a real Postgres and
 * NATS.
 *
 * The expectations are written here from the rules (not by calling the implementation's
 * `decide`): `Access.public` lets everything through; otherwise no, malformed, unknown,
 * expired and revoked credentials are 401 `unauthenticated`; `Access.account` needs `*` or a
 * session (403 `full_access_required`); `Access.resource(r)` needs `r:read` for GET/HEAD and
 * `r:write` otherwise (`write` implies `read`, a `sandbox:<id>` key holds sandboxes only),
 * else 403 `insufficient_scope` naming `required_scope`. Path parameters get well-formed ids of
 * the kind their schema accepts; where a fixture can create one in org A, org B's `*` key must
 * get exactly the answer of an id that exists nowhere (404 where the request is otherwise
 * valid; never 403, never 2xx). `?token=` is 401 `token_in_query_not_allowed` on every route but
 * /terminal.
 */
import { assert, expect, layer } from "@effect/vitest"
import { ApiKeys } from "@svc/auth/ApiKeys"
import { operatorContext } from "@svc/auth/Audit"
import * as AuthLayer from "@svc/auth/AuthLayer"
import { Sessions } from "@svc/auth/Sessions"
import { Users } from "@svc/auth/Users"
import { SecretBox } from "@svc/crypto/SecretBox"
import { Api } from "@svc/domain/Api"
import { Access, type AccessRule, accessRuleOf, Authorization, SESSION_COOKIE } from "@svc/domain/Api/Auth"
import * as Token from "@svc/domain/ApiKeyToken"
import { ID_PREFIXES, type IdKind, makeId, type OrgId, SandboxId } from "@svc/domain/Ids"
import { ACTIONS_OF, type Resource, RESOURCES } from "@svc/domain/Scopes"
import * as TestDatabase from "@svc/testing/TestDatabase"
import { serve } from "@svc/testing/TestHttp"
import * as TestNats from "@svc/testing/TestNats"
import { ConfigProvider, Context, Effect, Layer, Schema, type SchemaAST } from "effect"
import { HttpRouter } from "effect/http"
import { HttpApi, HttpApiBuilder, HttpApiEndpoint, HttpApiGroup } from "effect/http-api"
import { SqlClient } from "effect/sql"
import { AuthorizationLayer } from "../../src/Http/Authorization.ts"
import { ApiMiddleware } from "../../src/Http/Middleware.ts"
import * as Server from "../../src/Server.ts"

// ---------------------------------------------------------------------------------------------
// The routes, from the Api definition

interface Route {
  readonly name: string
  readonly method: string
  readonly path: string
  readonly group: HttpApiGroup.Top
  readonly endpoint: HttpApiEndpoint.Top
  readonly rule: AccessRule | undefined
  /** Path parameter name → the id kind its schema accepts (undefined: not an id). */
  readonly params: ReadonlyArray<{ readonly name: string; readonly kind: IdKind | undefined }>
}

const ID_KINDS = Object.keys(ID_PREFIXES) as Array<IdKind>

const paramKinds = (endpoint: HttpApiEndpoint.Top): Route["params"] => {
  // `params` is the endpoint's struct wrapped for path decoding: its properties' own schemas.
  const ast = endpoint.params?.ast as SchemaAST.Objects | undefined
  return (ast?.propertySignatures ?? []).map((ps) => ({
    name: String(ps.name),
    kind: ID_KINDS.find((kind) => Schema.is(Schema.make(ps.type))(makeId(kind)))
  }))
}

const routesOf = (api: { readonly groups: unknown }): Array<Route> =>
  Object.values(api.groups as unknown as Record<string, HttpApiGroup.Top>).flatMap((group) =>
    Object.values(group.endpoints as Record<string, HttpApiEndpoint.Top>).map((endpoint) => ({
      name: `${endpoint.method} ${endpoint.path}`,
      method: endpoint.method,
      path: endpoint.path,
      group,
      endpoint,
      rule: accessRuleOf(group, endpoint),
      params: paramKinds(endpoint)
    }))
  )

const routes = routesOf(Api)

/**
 * Routes of every resource kind, declared like the resource groups will be, served with the real
 * middleware: the resource rules are exercised before those groups exist (and keep being).
 */
const probe = <const R extends Resource>(resource: R) =>
  HttpApiGroup.make(`probe_${resource}` as `probe_${R}`)
    .add(
      HttpApiEndpoint.get("list", `/v1/probe/${resource}`, { success: Ok }),
      HttpApiEndpoint.post("create", `/v1/probe/${resource}`, { success: Ok }),
      HttpApiEndpoint.get("get", `/v1/probe/${resource}/:id`, { params: { id: SandboxId }, success: Ok }),
      HttpApiEndpoint.delete("remove", `/v1/probe/${resource}/:id`, { params: { id: SandboxId }, success: Ok })
    )
    .annotateMerge(Access.resource(resource))
const Ok = Schema.Struct({ ok: Schema.Boolean })
class ProbeApi extends HttpApi.make("probe")
  .add(probe("sandboxes"), probe("templates"), probe("volumes"), probe("apps"), probe("secrets"))
  .add(
    HttpApiGroup.make("probe_extra").add(
      HttpApiEndpoint.post("bind", "/v1/probe/sandboxes/:id/secrets", { params: { id: SandboxId }, success: Ok })
        .annotateMerge(Access.resource("sandboxes", { also: ["secrets:use"] })),
      HttpApiEndpoint.post("use", "/v1/probe/secrets-use", { success: Ok })
        .annotateMerge(Access.resource("secrets", { action: "use" })),
      HttpApiEndpoint.get("anyone", "/v1/probe/any", { success: Ok }).annotateMerge(Access.any),
      HttpApiEndpoint.get("undeclared", "/v1/probe/undeclared", { success: Ok })
    )
  )
  .middleware(Authorization)
{}
const ok = () => Effect.succeed({ ok: true })
const probeHandlers = Layer.mergeAll(
  HttpApiBuilder.group(
    ProbeApi,
    "probe_sandboxes",
    (h) => h.handle("list", ok).handle("create", ok).handle("get", ok).handle("remove", ok)
  ),
  HttpApiBuilder.group(
    ProbeApi,
    "probe_templates",
    (h) => h.handle("list", ok).handle("create", ok).handle("get", ok).handle("remove", ok)
  ),
  HttpApiBuilder.group(
    ProbeApi,
    "probe_volumes",
    (h) => h.handle("list", ok).handle("create", ok).handle("get", ok).handle("remove", ok)
  ),
  HttpApiBuilder.group(
    ProbeApi,
    "probe_apps",
    (h) => h.handle("list", ok).handle("create", ok).handle("get", ok).handle("remove", ok)
  ),
  HttpApiBuilder.group(
    ProbeApi,
    "probe_secrets",
    (h) => h.handle("list", ok).handle("create", ok).handle("get", ok).handle("remove", ok)
  ),
  HttpApiBuilder.group(
    ProbeApi,
    "probe_extra",
    (h) => h.handle("bind", ok).handle("use", ok).handle("anyone", ok).handle("undeclared", ok)
  )
)
const probeRoutes = routesOf(ProbeApi)

// ---------------------------------------------------------------------------------------------
// Credentials

type CredentialKind =
  | { readonly _tag: "None" }
  | { readonly _tag: "Invalid"; readonly header: string }
  | { readonly _tag: "Session" }
  | { readonly _tag: "Full" }
  | { readonly _tag: "OtherOrg" }
  | { readonly _tag: "Scoped"; readonly resource: Resource; readonly action: string }
  | { readonly _tag: "Sandbox" }

interface Credential {
  readonly label: string
  readonly kind: CredentialKind
  /** The token of key credentials. */
  readonly token?: string
}

type Expected =
  | { readonly _tag: "Refused"; readonly status: number; readonly code: string; readonly requiredScope?: string }
  /** Authorization let it through: the handler answers (2xx, 400, 404, ...), never 401/403/429/5xx. */
  | { readonly _tag: "Passes" }

const refused = (status: number, code: string, requiredScope?: string): Expected =>
  requiredScope === undefined ? { _tag: "Refused", status, code } : { _tag: "Refused", status, code, requiredScope }
const PASSES: Expected = { _tag: "Passes" }

const readOrWrite = (method: string) => (method === "GET" || method === "HEAD" ? "read" : "write")

/**
 * Whether a credential holds `resource:action` (docs/contract.md#scope-tokens), written from the
 * spec.
 */
const holds = (kind: CredentialKind, resource: string, action: string): boolean => {
  switch (kind._tag) {
    case "Session":
    case "Full":
    case "OtherOrg":
      return true
    case "Sandbox":
      return resource === "sandboxes" && (action === "read" || action === "write")
    case "Scoped":
      return kind.resource === resource && (kind.action === action || (kind.action === "write" && action === "read"))
    default:
      return false
  }
}

const expectedFor = (route: Route, kind: CredentialKind): Expected => {
  const rule = route.rule
  if (rule?._tag === "Public") return PASSES
  if (kind._tag === "None" || kind._tag === "Invalid") return refused(401, "unauthenticated")
  // Undeclared: fails closed, as an account-level route.
  switch ((rule ?? { _tag: "Account" })._tag) {
    case "Any":
      return PASSES
    case "Account":
      return kind._tag === "Session" || kind._tag === "Full" || kind._tag === "OtherOrg"
        ? PASSES
        : refused(403, "full_access_required")
    case "Resource": {
      if (rule?._tag !== "Resource") return PASSES
      const action = rule.action ?? readOrWrite(route.method)
      if (!holds(kind, rule.resource, action)) {
        return refused(403, "insufficient_scope", `${rule.resource}:${action}`)
      }
      for (const extra of rule.also ?? []) {
        const [r, a] = extra.split(":") as [string, string]
        if (!holds(kind, r, a)) return refused(403, "insufficient_scope", extra)
      }
      return PASSES
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The environment: one API server, org A (with a user) and org B, and a key of every kind

/**
 * Creates a resource of the given id kind in org A over the API (with org A's `*` key), for the
 * other-org 404 checks. Add a kind here when its routes arrive.
 */
type Fixture = (base: string, token: string) => Promise<string>
const created = (what: string) => async (res: Response): Promise<string> => {
  const body = await res.json() as { id?: string }
  if (res.status >= 300 || typeof body.id !== "string") {
    throw new Error(`fixture ${what}: ${res.status} ${JSON.stringify(body)}`)
  }
  return body.id
}
const post = (base: string, token: string, path: string, body: unknown) =>
  fetch(`${base}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify(body)
  })
const FIXTURES: Partial<Record<IdKind, Fixture>> = {
  apiKey: (base, token) => post(base, token, "/v1/auth/api-keys", { name: "fixture" }).then(created("key")),
  sandbox: (base, token) =>
    post(base, token, "/v1/sandboxes", { name: "fixture", region: "nowhere" }).then(created("sandbox")),
  webhook: (base, token) =>
    post(base, token, "/v1/webhooks", { url: "http://127.0.0.1:9/fixture" }).then(created("webhook"))
}

class Env extends Context.Service<Env, {
  readonly base: string
  readonly probeBase: string
  readonly credentials: ReadonlyArray<Credential>
  readonly freshSession: Effect.Effect<string>
  /** Ids of org A's resources, by kind (where a fixture exists). */
  readonly orgAResources: Partial<Record<IdKind, string>>
  readonly isRevoked: (keyId: string) => Effect.Effect<boolean>
}>()("test/Authorization/Env") {}

// The matrix sends many requests with the same keys, and hundreds of bad credentials from one
// address: no rate limits here (tested in Keys and Abuse). Webhook fixtures point at loopback.
const noRateLimit = ConfigProvider.layerAdd(
  ConfigProvider.fromUnknown({
    SVC_RATE_LIMIT_PER_SECOND: "1000000",
    SVC_RATE_LIMIT_BURST: "1000000",
    SVC_FAILED_AUTH_RATE_PER_MINUTE: "1000000",
    SVC_FAILED_AUTH_RATE_BURST: "1000000",
    SVC_WEBHOOK_ALLOWED_SUBNETS: "127.0.0.0/8"
  }),
  { asPrimary: true }
)

const EnvLayer = Layer.effect(
  Env,
  Effect.gen(function*() {
    const platform = yield* Layer.build(Layer.mergeAll(TestDatabase.layer, TestNats.layer, SecretBox.layer))
    const base = yield* serve(
      HttpRouter.serve(Server.Routes, { disableLogger: true, disableListenLog: true }).pipe(
        Layer.provide(noRateLimit),
        Layer.provide(Layer.succeedContext(platform))
      )
    )
    const probeBase = yield* serve(
      HttpRouter.serve(
        Layer.mergeAll(
          HttpApiBuilder.layer(ProbeApi).pipe(Layer.provide(probeHandlers), Layer.provide(AuthorizationLayer)),
          ApiMiddleware
        ),
        { disableLogger: true, disableListenLog: true }
      ).pipe(Layer.provide(noRateLimit), Layer.provide(Layer.succeedContext(platform)))
    )
    const ops = yield* Layer.build(AuthLayer.operatorLayer.pipe(Layer.provide(Layer.succeedContext(platform))))
    const services = Context.merge(platform, ops)
    const run = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A> =>
      Effect.orDie(Effect.provide(effect, services as Context.Context<R>)) as Effect.Effect<A>
    const keys = Context.get(ops, ApiKeys)
    const sql = Context.get(platform, SqlClient.SqlClient)

    const { org: orgA, user } = yield* run(
      Effect.flatMap(
        Effect.service(Users),
        (u) =>
          u.signUp({ email: "matrix@example.com", password: "correct horse battery", orgName: "A" }, {
            ip: null,
            userAgent: null
          })
      )
    )
    const { org: orgB } = yield* run(
      Effect.flatMap(
        Effect.service(Users),
        (u) =>
          u.signUp({ email: "other@example.com", password: "correct horse battery", orgName: "B" }, {
            ip: null,
            userAgent: null
          })
      )
    )
    const mint = (orgId: OrgId, scopes: ReadonlyArray<string>) =>
      run(keys.mint({ orgId, userId: null, name: scopes.join(" "), scopes }, operatorContext))

    const full = yield* mint(orgA.id, ["*"])
    const other = yield* mint(orgB.id, ["*"])
    const expired = yield* mint(orgA.id, ["*"])
    yield* run(sql`UPDATE api_keys SET expires_at = now() - interval '1 minute' WHERE id = ${expired.id}`)
    const revoked = yield* mint(orgA.id, ["*"])
    yield* run(keys.revoke(orgA.id, revoked.id, operatorContext))
    const sandboxKey = yield* mint(orgA.id, [`sandbox:${makeId("sandbox")}`])
    const unknown = Token.mint().token
    const badChecksum = full.token.slice(0, -1) + (full.token.endsWith("A") ? "B" : "A")

    const credentials: Array<Credential> = [
      { label: "no credential", kind: { _tag: "None" } },
      { label: "malformed (bad checksum)", kind: { _tag: "Invalid", header: `Bearer ${badChecksum}` } },
      { label: "malformed (not svc_live_)", kind: { _tag: "Invalid", header: "Bearer abc.def" } },
      { label: "malformed (Basic scheme)", kind: { _tag: "Invalid", header: `Basic ${full.token}` } },
      { label: "unknown key", kind: { _tag: "Invalid", header: `Bearer ${unknown}` } },
      { label: "expired key", kind: { _tag: "Invalid", header: `Bearer ${expired.token}` } },
      { label: "revoked key", kind: { _tag: "Invalid", header: `Bearer ${revoked.token}` } },
      { label: "session", kind: { _tag: "Session" } },
      { label: "* key", kind: { _tag: "Full" }, token: full.token },
      { label: "another org's * key", kind: { _tag: "OtherOrg" }, token: other.token },
      { label: "sandbox:<id> key", kind: { _tag: "Sandbox" }, token: sandboxKey.token }
    ]
    for (const resource of RESOURCES) {
      for (const action of ACTIONS_OF[resource]) {
        const k = yield* mint(orgA.id, [`${resource}:${action}`])
        credentials.push({
          label: `${resource}:${action} key`,
          kind: { _tag: "Scoped", resource, action },
          token: k.token
        })
      }
    }

    const orgAResources: Partial<Record<IdKind, string>> = {}
    for (const [kind, fixture] of Object.entries(FIXTURES) as Array<[IdKind, Fixture]>) {
      // Only kinds some route of the Api names.
      if (!routes.some((r) => r.params.some((p) => p.kind === kind))) continue
      orgAResources[kind] = yield* Effect.promise(() => fixture(base, full.token))
    }

    const sessions = Context.get(ops, Sessions)
    const freshSession = Effect.map(
      run(sessions.create({ id: user.id, orgId: orgA.id }, operatorContext)),
      (s) => s.token
    )
    const isRevoked = (keyId: string) =>
      Effect.map(
        run(sql<{ revoked: boolean }>`SELECT revoked_at IS NOT NULL AS revoked FROM api_keys WHERE id = ${keyId}`),
        (rows) => rows[0]?.revoked === true
      )

    return Env.of({ base, probeBase, credentials, freshSession, orgAResources, isRevoked })
  })
)

// ---------------------------------------------------------------------------------------------

interface Answer {
  readonly status: number
  readonly body: { readonly code?: string; readonly required_scope?: string } | null
  readonly wwwAuthenticate: string | null
}

const send = (base: string, method: string, path: string, headers: Record<string, string>) =>
  Effect.promise(async (): Promise<Answer> => {
    const hasBody = method !== "GET" && method !== "HEAD"
    const res = await fetch(`${base}${path}`, {
      method,
      headers: { ...headers, ...(hasBody ? { "content-type": "application/json" } : {}) },
      // An invalid body for every route that takes one: authorization runs before decoding,
      // and nothing is created by the matrix.
      ...(hasBody ? { body: "[]" } : {})
    })
    // A stream (GET /v1/events) answers at once and never ends: its status is the answer.
    if ((res.headers.get("content-type") ?? "").startsWith("text/event-stream")) {
      await res.body?.cancel()
      return { status: res.status, body: null, wwwAuthenticate: res.headers.get("www-authenticate") }
    }
    const text = await res.text()
    let body: Answer["body"] = null
    try {
      body = text ? JSON.parse(text) : null
    } catch {
      body = null
    }
    return { status: res.status, body, wwwAuthenticate: res.headers.get("www-authenticate") }
  })

const pathFor = (route: Route, owned: Partial<Record<IdKind, string>> | null) => {
  let path = route.path
  for (const p of route.params) {
    const value = p.kind === undefined ? "x" : owned?.[p.kind] ?? makeId(p.kind)
    path = path.replace(`:${p.name}`, encodeURIComponent(value))
  }
  return path
}

/**
 * Runs every route × credential against `base`; returns the mismatches and the number of checks.
 * `foreign`: also prove that org A's resources are, to another org's key, indistinguishable from
 * missing ones (same answer as for an id that does not exist; never 2xx, never 403).
 */
const runMatrix = (env: Env["Service"], base: string, table: ReadonlyArray<Route>, foreign: boolean) =>
  Effect.gen(function*() {
    const mismatches: Array<string> = []
    let checked = 0
    const foreignChecks = new Set<string>()
    for (const route of table) {
      for (const credential of env.credentials) {
        const headers: Record<string, string> = {}
        const kind = credential.kind
        if (kind._tag === "Invalid") headers.authorization = kind.header
        else if (kind._tag === "Session") {
          headers.cookie = `${SESSION_COOKIE}=${yield* env.freshSession}`
          headers.origin = base
        } else if (credential.token !== undefined) headers.authorization = `Bearer ${credential.token}`

        const expected = expectedFor(route, kind)
        // Another org's key on a route naming org A's resource: 404, never 403 or 2xx.
        const namesOwned = foreign && kind._tag === "OtherOrg" &&
          route.params.some((p) => p.kind && env.orgAResources[p.kind])
        const path = pathFor(route, namesOwned ? env.orgAResources : null)
        const answer = yield* send(base, route.method, path, headers)
        checked++
        const where = `${route.name} with ${credential.label}: got ${answer.status} ${answer.body?.code ?? ""}`
        if (expected._tag === "Refused") {
          const ok = answer.status === expected.status && answer.body?.code === expected.code &&
            (expected.requiredScope === undefined || answer.body?.required_scope === expected.requiredScope) &&
            (expected.status !== 401 || answer.wwwAuthenticate === "Bearer")
          if (!ok) {
            mismatches.push(`${where}, expected ${expected.status} ${expected.code} ${expected.requiredScope ?? ""}`)
          }
        } else if (namesOwned && route.rule?._tag !== "Public") {
          foreignChecks.add(route.name)
          // The same request naming ids that exist nowhere.
          const missing = yield* send(base, route.method, pathFor(route, null), headers)
          if (
            answer.status !== missing.status || answer.body?.code !== missing.body?.code ||
            (answer.status >= 200 && answer.status < 300) || answer.status === 403 || answer.status >= 500
          ) {
            mismatches.push(
              `${where}, expected the answer for a missing id: ${missing.status} ${missing.body?.code ?? ""}`
            )
          }
        } else {
          const code = answer.body?.code
          const sandboxOwn = kind._tag === "Sandbox" && code === "sandbox_out_of_scope"
          const refusedByAuth = answer.status === 401 || answer.status === 429 ||
            (answer.status === 403 && !sandboxOwn)
          if (refusedByAuth || answer.status >= 500) mismatches.push(`${where}, expected to pass authorization`)
          // A plain GET that passes authorization answers (no ids to miss).
          if (
            route.method === "GET" && route.params.length === 0 && answer.status >= 300 && code !== "invalid_request"
          ) {
            mismatches.push(`${where}, expected a 2xx`)
          }
        }
      }
    }
    return { mismatches, checked, foreignChecks }
  })

layer(EnvLayer, { excludeTestServices: true })("authorization matrix", (it) => {
  it.effect("every endpoint goes through the Authorization middleware and declares its access", () =>
    Effect.sync(() => {
      const undeclared = routes.filter((r) => r.rule === undefined).map((r) => r.name)
      const unguarded = routes.filter((r) => !r.endpoint.middlewares.has(Authorization as never)).map((r) => r.name)
      expect(undeclared).toEqual([])
      expect(unguarded).toEqual([])
      // Path parameters are recognised (ids get ids of their kind in the matrix).
      expect(routes.find((r) => r.name === "DELETE /v1/auth/api-keys/:key_id")!.params).toEqual([
        { name: "key_id", kind: "apiKey" }
      ])
      // The routes of this issue are there (the table grows with later issues).
      expect(routes.map((r) => r.name)).toEqual(expect.arrayContaining([
        "GET /v1/health",
        "POST /v1/auth/sign-up",
        "POST /v1/auth/sign-in",
        "POST /v1/auth/sign-out",
        "GET /v1/auth/me",
        "GET /v1/me",
        "POST /v1/auth/api-keys",
        "GET /v1/auth/api-keys",
        "DELETE /v1/auth/api-keys/:key_id",
        "GET /v1/org",
        "PATCH /v1/org",
        "GET /v1/audit"
      ]))
    }))

  it.effect("each route × each credential answers as the rules say", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const { mismatches, checked, foreignChecks } = yield* runMatrix(env, env.base, routes, true)
      expect(mismatches).toEqual([])
      // Every route naming a resource kind that has a fixture was tried with another org's key.
      const withFixture = routes.filter((r) =>
        r.rule?._tag !== "Public" && r.params.some((p) => p.kind && FIXTURES[p.kind])
      )
      expect([...foreignChecks].sort()).toEqual(withFixture.map((r) => r.name).sort())
      expect(foreignChecks).toContain("DELETE /v1/auth/api-keys/:key_id")
      assert.isAtLeast(checked, routes.length * 20)
      // The other org never touched org A's resources.
      if (env.orgAResources.apiKey) expect(yield* env.isRevoked(env.orgAResources.apiKey)).toBe(false)
    }))

  it.effect("resource rules (read, write, implied read, extra scopes, fixed action, sandbox keys), on probe routes", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const { mismatches, checked } = yield* runMatrix(env, env.probeBase, probeRoutes, false)
      expect(mismatches).toEqual([])
      assert.isAtLeast(checked, probeRoutes.length * 20)
      // An endpoint without a declared rule fails closed: account-level.
      const star = env.credentials.find((c) => c.kind._tag === "Full")!.token!
      const scoped = env.credentials.find((c) => c.label === "sandboxes:write key")!.token!
      expect((yield* send(env.probeBase, "GET", "/v1/probe/undeclared", { authorization: `Bearer ${star}` })).status)
        .toBe(200)
      expect(
        (yield* send(env.probeBase, "GET", "/v1/probe/undeclared", { authorization: `Bearer ${scoped}` })).body?.code
      )
        .toBe("full_access_required")
    }))

  it.effect("?token= is refused on every route (it is only for /terminal), even with a valid key", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const full = env.credentials.find((c) => c.kind._tag === "Full")!.token!
      const mismatches: Array<string> = []
      for (const route of routes.filter((r) => r.path !== "/terminal")) {
        const path = `${pathFor(route, null)}?token=${full}`
        const answer = yield* send(env.base, route.method, path, { authorization: `Bearer ${full}` })
        if (answer.status !== 401 || answer.body?.code !== "token_in_query_not_allowed") {
          mismatches.push(`${route.name}: ${answer.status} ${answer.body?.code}`)
        }
      }
      expect(mismatches).toEqual([])
      const empty = yield* send(env.base, "GET", "/v1/health?token=", {})
      expect(empty.body?.code).toBe("token_in_query_not_allowed")
    }))
})
