/**
 * Per-org quotas and the bound of `paginated=false`, through the public API on the platform of
 * testing/SandboxesEnv.ts (runtime, a real agent in region `local`): 429 `quota_exceeded` at create
 * and at start, exactly the quota admitted when creates race, and an unpaginated list cut at
 * about 8 MiB with `has_more` (paging on from `offset + limit` reaches every row).
 * Each test serves an API of its own with the quotas it is about, beside the shared one.
 */
import { expect, layer } from "@effect/vitest"
import { UNPAGINATED_MAX_BYTES } from "@svc/domain/Sandbox"
import { serve } from "@svc/testing/TestHttp"
import { ConfigProvider, Effect, Layer } from "effect"
import { HttpRouter } from "effect/http"
import { SqlClient } from "effect/sql"
import * as Server from "../../src/Server.ts"
import { type Answer, call, fakeHost, Identity } from "../../testing/Sandboxes.ts"
import { EnvLayer, waitState } from "../../testing/SandboxesEnv.ts"

/** An API with these settings beside the file's platform (same database, bus and runtime). */
const apiWith = (settings: Record<string, string>) =>
  serve(
    HttpRouter.serve(Server.Routes, { disableLogger: true, disableListenLog: true }).pipe(
      Layer.provide(ConfigProvider.layerAdd(ConfigProvider.fromUnknown(settings), { asPrimary: true }))
    ),
    { fresh: true }
  )

const expectQuota = (res: Answer, quota: string, limit: number) => {
  expect(res.status, res.text).toBe(429)
  expect(res.json).toEqual({ error: expect.stringContaining(String(limit)), code: "quota_exceeded", quota, limit })
}

/** `count` creates at once; their answers. */
const race = (base: string, token: string, count: number, body: Record<string, unknown>) =>
  Effect.forEach(
    Array.from({ length: count }, (_, i) => i),
    (i) => call(base, "POST", "/v1/sandboxes", { token, body: { ...body, name: `racer-${i}` } }),
    { concurrency: "unbounded" }
  )

layer(EnvLayer, { excludeTestServices: true })("sandbox limits", (it) => {
  it.effect("creates racing for an org's last sandboxes: exactly SVC_ORG_MAX_SANDBOXES are admitted", () =>
    Effect.gen(function*() {
      const base = yield* apiWith({ SVC_ORG_MAX_SANDBOXES: "5", SVC_ORG_MAX_RUNNING_SANDBOXES: "1000" })
      const org = yield* (yield* Identity).org("quota-total")
      // No live host in that region: each ends in error at once (it still counts, it has a record).
      const answers = yield* race(base, org.token, 20, { region: "nowhere" })
      const created = answers.filter((a) => a.status === 201)
      expect(created.length).toBe(5)
      for (const refused of answers.filter((a) => a.status !== 201)) expectQuota(refused, "sandboxes", 5)
      const sql = yield* SqlClient.SqlClient
      const rows = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM sandboxes WHERE org_id = ${org.id}`
      expect(rows[0]!.n).toBe(5)
      // Deleting one makes room for one.
      const gone = yield* call(base, "DELETE", `/v1/sandboxes/${created[0]!.json.id}`, { token: org.token })
      expect(gone.json.state).toBe("deleted")
      expect((yield* call(base, "POST", "/v1/sandboxes", { token: org.token, body: { region: "nowhere" } })).status)
        .toBe(201)
      expectQuota(
        yield* call(base, "POST", "/v1/sandboxes", { token: org.token, body: { region: "nowhere" } }),
        "sandboxes",
        5
      )
    }))

  it.effect("creates racing for an org's last running slots: exactly SVC_ORG_MAX_RUNNING_SANDBOXES are admitted", () =>
    Effect.gen(function*() {
      const base = yield* apiWith({ SVC_ORG_MAX_RUNNING_SANDBOXES: "3" })
      const org = yield* (yield* Identity).org("quota-running-race")
      // A host that takes them and never answers: they stay starting (running, for the quota).
      const region = `quota${Date.now().toString(36)}`
      yield* fakeHost({ region })
      const answers = yield* race(base, org.token, 12, { region })
      expect(answers.filter((a) => a.status === 201).length).toBe(3)
      for (const refused of answers.filter((a) => a.status !== 201)) expectQuota(refused, "running_sandboxes", 3)
    }))

  it.effect("start counts against the running quota; stopping or deleting one makes room", () =>
    Effect.gen(function*() {
      const base = yield* apiWith({ SVC_ORG_MAX_RUNNING_SANDBOXES: "2" })
      const org = yield* (yield* Identity).org("quota-running")
      const api = (method: string, path: string, body?: unknown) =>
        call(base, method, path, { token: org.token, ...(body !== undefined ? { body } : {}) })
      const first = (yield* api("POST", "/v1/sandboxes", { name: "first" })).json
      yield* waitState(first.id, "running", undefined, org.token)
      expect((yield* api("POST", `/v1/sandboxes/${first.id}/stop`)).status).toBe(202)
      yield* waitState(first.id, "stopped", undefined, org.token)
      const second = (yield* api("POST", "/v1/sandboxes", { name: "second" })).json
      const third = (yield* api("POST", "/v1/sandboxes", { name: "third" })).json
      yield* waitState(second.id, "running", undefined, org.token)
      yield* waitState(third.id, "running", undefined, org.token)
      // Two running: no third, whether created or started.
      expectQuota(yield* api("POST", "/v1/sandboxes", { name: "fourth" }), "running_sandboxes", 2)
      expectQuota(yield* api("POST", `/v1/sandboxes/${first.id}/start`), "running_sandboxes", 2)
      expect((yield* api("GET", `/v1/sandboxes/${first.id}`)).json.state).toBe("stopped")
      expect((yield* api("DELETE", `/v1/sandboxes/${third.id}`)).status).toBe(202)
      yield* waitState(third.id, "deleted", undefined, org.token)
      expect((yield* api("POST", `/v1/sandboxes/${first.id}/start`)).status).toBe(202)
      yield* waitState(first.id, "running", undefined, org.token)
      for (const id of [first.id, second.id]) yield* api("DELETE", `/v1/sandboxes/${id}`)
    }))

  it.effect("paginated=false stops at about 8 MiB of JSON with has_more; paging on from offset + limit reaches every row", () =>
    Effect.gen(function*() {
      // 500 creates with one key as fast as the machine goes: not about the per-key rate limit.
      const base = yield* apiWith({
        SVC_ORG_MAX_SANDBOXES: "10000",
        SVC_ORG_MAX_RUNNING_SANDBOXES: "10000",
        SVC_RATE_LIMIT_PER_SECOND: "100000",
        SVC_RATE_LIMIT_BURST: "100000"
      })
      const org = yield* (yield* Identity).org("big-lists")
      // 500 records of 16 KiB of metadata each: about 8.5 MB of JSON.
      const metadata = { blob: "m".repeat(16 * 1024 - 16) }
      // The per-key bucket may live in a process-wide limiter these settings do not reach: a 429
      // is waited out as a client would (Retry-After), since this test is not about it.
      const create = (i: number): Effect.Effect<string, unknown, never> =>
        Effect.flatMap(
          call(base, "POST", "/v1/sandboxes", {
            token: org.token,
            body: { region: "nowhere", name: `big-${i}`, metadata }
          }),
          (r) => {
            if (r.status === 429 && r.json?.code === "rate_limited") {
              return Effect.flatMap(Effect.sleep(`${Number(r.json.retry_after_s ?? 1)} seconds`), () => create(i))
            }
            expect(r.status, r.text).toBe(201)
            return Effect.succeed(r.json.id as string)
          }
        )
      const made = yield* Effect.forEach(Array.from({ length: 500 }, (_, i) => i), create, { concurrency: 8 })
      const seen: Array<string> = []
      let offset = 0
      for (let page = 0; page < 10; page++) {
        const res = yield* call(base, "GET", `/v1/sandboxes?paginated=false&offset=${offset}`, { token: org.token })
        expect(res.status).toBe(200)
        expect(res.bytes.length).toBeLessThanOrEqual(UNPAGINATED_MAX_BYTES + 1024)
        const { rows, total, limit, has_more } = res.json
        expect(total).toBe(500)
        expect(limit).toBe(rows.length)
        expect(res.json.offset).toBe(offset)
        seen.push(...rows.map((r: { id: string }) => r.id))
        offset += rows.length
        expect(has_more).toBe(offset < 500)
        if (page === 0) {
          // Cut by bytes, not by the 10,000 rows: most of what fits.
          expect(rows.length).toBeLessThan(500)
          expect(rows.length).toBeGreaterThan(400)
        }
        if (!has_more) break
      }
      // Every row once, newest first.
      expect(seen).toEqual([...made].sort().reverse())
      // Small records: all of them in one answer.
      const small = yield* (yield* Identity).org("small-list")
      for (let i = 0; i < 3; i++) {
        yield* call(base, "POST", "/v1/sandboxes", { token: small.token, body: { region: "nowhere" } })
      }
      const all = yield* call(base, "GET", "/v1/sandboxes?paginated=false", { token: small.token })
      expect(all.json).toMatchObject({ total: 3, offset: 0, limit: 3, has_more: false })
    }))
})
