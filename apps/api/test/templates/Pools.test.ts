/**
 * Warm pools per template through the API with a real agent (which also keeps a `base` pool of
 * one): `pool_size` on create and PATCH; the pool filled on the template's host (its record lists
 * the ready sandboxes) and handed out (running with runtime_ready at once, its start_cmd's work
 * there), refilled; pool sandboxes neither listed nor counted nor metered; PATCH to 0 and the
 * template's delete drain it; bad input. And issue 29's bug: a template with only a start_cmd
 * and a ready_cmd (no steps: its image is `base`'s), served by the `base` pool, boots.
 */
import { expect, layer } from "@effect/vitest"
import { ensureBucket } from "@svc/bus/Topology"
import { SecretBox } from "@svc/crypto/SecretBox"
import { HostRecord, HOSTS_BUCKET_SPEC } from "@svc/host-protocol/Protocol"
import * as Runtime from "@svc/runtime/Runtime"
import * as TestDatabase from "@svc/testing/TestDatabase"
import * as TestNats from "@svc/testing/TestNats"
import { Context, Duration, Effect, Layer, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { call, eventually, Identity, makeHost, serveApi, startAgent } from "../../testing/Sandboxes.ts"

class PoolEnv extends Context.Service<PoolEnv, {
  readonly base: string
  readonly hostId: string
  readonly token: string
}>()("@svc/api/test/templates/Pools/PoolEnv") {}

const EnvLayer = Layer.effect(
  PoolEnv,
  Effect.gen(function*() {
    const base = yield* serveApi
    const identity = yield* Identity
    const host = yield* makeHost
    yield* startAgent(host, { region: "local", poolSize: 1 })
    return { base, hostId: host.hostId, token: (yield* identity.org("pools")).token }
  })
).pipe(
  Layer.provideMerge(Layer.mergeAll(
    Runtime.make({ supervisor: { intervalMs: 200, transitionTimeoutMs: 4_000 } }),
    Identity.layer
  )),
  Layer.provideMerge(Layer.mergeAll(TestDatabase.layerWithUrl, TestNats.layer, SecretBox.layer))
)

const api = (method: string, path: string, body?: unknown) =>
  Effect.flatMap(
    Effect.service(PoolEnv),
    (env) => call(env.base, method, path, { token: env.token, ...(body !== undefined ? { body } : {}) })
  )

const decodeHost = Schema.decodeUnknownSync(Schema.fromJsonString(HostRecord))
/** How many ready pool sandboxes of the template the host's record lists (what placement reads). */
const pooledOnHost = (templateId: string) =>
  Effect.gen(function*() {
    const env = yield* PoolEnv
    const kv = yield* ensureBucket(HOSTS_BUCKET_SPEC)
    const entry = yield* Effect.promise(() => kv.get(env.hostId))
    if (entry === null) return 0
    return decodeHost(new TextDecoder().decode(entry.value)).pools?.[templateId] ?? 0
  })

const built = (body: Record<string, unknown>) =>
  Effect.gen(function*() {
    const res = yield* api("POST", "/v1/templates", body)
    expect(res.status, res.text).toBe(202)
    const ready = yield* eventually(
      api("GET", `/v1/templates/${res.json.id}`),
      (r) => r.json?.state !== "building",
      Duration.seconds(120)
    )
    expect(ready.json.state, ready.text).toBe("ready")
    return ready.json as { id: string; pool_size: number }
  })

const running = (body: Record<string, unknown>) =>
  Effect.gen(function*() {
    const res = yield* api("POST", "/v1/sandboxes", body)
    expect(res.status, res.text).toBe(201)
    const up = yield* eventually(
      api("GET", `/v1/sandboxes/${res.json.id}`),
      (r) => r.json?.state === "running" || r.json?.state === "error",
      Duration.seconds(60)
    )
    expect(up.json.state, up.text).toBe("running")
    return up.json as Record<string, any>
  })

const sh = (id: string, script: string) =>
  Effect.map(api("POST", `/v1/sandboxes/${id}/exec`, { cmd: ["sh", "-c", script] }), (r) => {
    expect(r.status, r.text).toBe(200)
    return r.json as { exit_code: number; stdout: string }
  })

const remove = (id: string) =>
  Effect.gen(function*() {
    yield* api("DELETE", `/v1/sandboxes/${id}`)
    yield* eventually(api("GET", `/v1/sandboxes/${id}`), (r) => r.json?.state === "deleted", Duration.seconds(30))
  })

layer(EnvLayer, { excludeTestServices: true, timeout: 300_000 })("template warm pools", (it) => {
  it.effect("a template with only start_cmd and ready_cmd, served by the base pool, runs its start_cmd and gets ready", () =>
    Effect.gen(function*() {
      const template = yield* built({
        name: "bare",
        start_cmd: "echo started > /tmp/s; sleep inf",
        ready_cmd: "test -f /tmp/go"
      })
      const sandbox = yield* running({ template: template.id })
      const started = yield* eventually(sh(sandbox.id, "cat /tmp/s 2>/dev/null"), (r) => r.exit_code === 0)
      expect(started.stdout).toBe("started\n")
      const waiting = yield* api("GET", `/v1/sandboxes/${sandbox.id}`)
      expect(waiting.json).toMatchObject({ runtime_ready: false, runtime_reason: "ready_cmd has not passed yet" })
      yield* sh(sandbox.id, "touch /tmp/go")
      const ready = yield* eventually(
        api("GET", `/v1/sandboxes/${sandbox.id}`),
        (r) => r.json?.runtime_ready === true,
        Duration.seconds(30)
      )
      expect(ready.json.runtime_reason).toBe(null)
      yield* remove(sandbox.id)
    }))

  it.effect("pool_size: filled on the host, handed out ready, refilled, not counted or metered; PATCH 0 and delete drain", () =>
    Effect.gen(function*() {
      const listed = Effect.map(api("GET", "/v1/sandboxes"), (r) => r.json.total as number)
      const before = yield* listed
      const template = yield* built({
        name: "pooled",
        start_cmd: "date +%s > /tmp/booted; sleep inf",
        ready_cmd: "test -f /tmp/booted",
        pool_size: 2
      })
      expect(template.pool_size).toBe(2)
      yield* eventually(pooledOnHost(template.id), (n) => n === 2, Duration.seconds(60))
      // Pool sandboxes are no org's: not listed, so not counted against any quota.
      expect(yield* listed).toBe(before)

      const sandbox = yield* running({ template: "pooled" })
      // Handed out booted: ready at once (a cold boot reports `ready_cmd has not passed yet` first).
      expect(sandbox).toMatchObject({ runtime_ready: true, runtime_reason: null, templateId: template.id })
      const booted = yield* sh(sandbox.id, "cat /tmp/booted")
      expect(booted.stdout).toMatch(/^\d+\n$/)
      // Refilled in the background.
      yield* eventually(pooledOnHost(template.id), (n) => n === 2, Duration.seconds(60))
      expect(yield* listed).toBe(before + 1)
      // Metered from its hand-out only: one billed run, the handed-out sandbox's.
      const sql = yield* SqlClient.SqlClient
      const runs = yield* sql<{ sandbox_id: string }>`SELECT r.sandbox_id FROM billing_runs r
        LEFT JOIN sandboxes s ON s.id = r.sandbox_id WHERE s.id IS NULL OR s.template_id = ${template.id}`
      expect(runs.map((r) => r.sandbox_id)).toEqual([sandbox.id])

      // PATCH: bad input, then down to 0: drained.
      for (const bad of [{ pool_size: 51 }, { pool_size: -1 }, { pool_size: 1.5 }, {}]) {
        const res = yield* api("PATCH", `/v1/templates/${template.id}`, bad)
        expect(res.status, res.text).toBe(400)
        expect(res.json.code).toBe("invalid_request")
      }
      expect((yield* api("PATCH", "/v1/templates/no-such-template", { pool_size: 1 })).status).toBe(404)
      expect((yield* api("PATCH", "/v1/templates/base", { pool_size: 1 })).status).toBe(409)
      const drained = yield* api("PATCH", `/v1/templates/${template.id}`, { pool_size: 0 })
      expect(drained.status, drained.text).toBe(200)
      expect(drained.json).toMatchObject({ id: template.id, pool_size: 0 })
      yield* eventually(pooledOnHost(template.id), (n) => n === 0, Duration.seconds(30))

      // Up again, then the template's delete drains it.
      expect((yield* api("PATCH", `/v1/templates/${template.id}`, { pool_size: 1 })).json.pool_size).toBe(1)
      yield* eventually(pooledOnHost(template.id), (n) => n === 1, Duration.seconds(60))
      yield* remove(sandbox.id)
      const deleted = yield* api("DELETE", `/v1/templates/${template.id}`)
      expect(deleted.status, deleted.text).toBe(200)
      yield* eventually(pooledOnHost(template.id), (n) => n === 0, Duration.seconds(30))
    }))

  it.effect("pool_size at create is bounded", () =>
    Effect.gen(function*() {
      for (const pool_size of [51, -1, "2"]) {
        const res = yield* api("POST", "/v1/templates", { name: "bounded", pool_size })
        expect(res.status, res.text).toBe(400)
        expect(res.json.code).toBe("invalid_request")
      }
    }))
})
