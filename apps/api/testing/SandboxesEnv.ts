/**
 * One platform for the sandbox API tests of a file: the API served over HTTP, the runtime role
 * (its supervisor with a short transition timeout), a real agent in region `local`, two orgs
 * with a key each, the EVENTS stream read back; and the calls those tests make through it.
 */
import { expect } from "@effect/vitest"
import { SecretBox } from "@svc/crypto/SecretBox"
import type { OrgId } from "@svc/domain/Ids"
import * as Runtime from "@svc/runtime/Runtime"
import * as TestDatabase from "@svc/testing/TestDatabase"
import * as TestNats from "@svc/testing/TestNats"
import { Context, Duration, Effect, Layer } from "effect"
import { type Answer, call, EventLog, eventually, Identity, makeHost, serveApi, startAgent } from "./Sandboxes.ts"

export const TRANSITION_TIMEOUT_MS = 4_000

export class Env extends Context.Service<Env, {
  readonly base: string
  readonly prefix: string
  readonly hostId: string
  /** The agent's data dir (its sandboxes' folders and run records). */
  readonly dataDir: string
  readonly org: { readonly id: OrgId; readonly token: string }
  readonly other: { readonly id: OrgId; readonly token: string }
}>()("@svc/api/testing/SandboxesEnv/Env") {}

/** The platform with its agent's settings: `metricsIntervalMs` (default 5 s) between two samples of a sandbox. */
export const makeEnvLayer = (agent: { readonly metricsIntervalMs?: number } = {}) =>
  Layer.effect(
    Env,
    Effect.gen(function*() {
      const base = yield* serveApi
      const identity = yield* Identity
      const host = yield* makeHost
      yield* startAgent(host, { region: "local", ...agent })
      const server = yield* TestNats.TestNatsServer
      return {
        base,
        prefix: server.prefix,
        hostId: host.hostId,
        dataDir: host.dataDir,
        org: yield* identity.org("sandboxes-a"),
        other: yield* identity.org("sandboxes-b")
      }
    })
  ).pipe(
    Layer.provideMerge(Layer.mergeAll(
      Runtime.make({ supervisor: { intervalMs: 200, transitionTimeoutMs: TRANSITION_TIMEOUT_MS } }),
      Identity.layer,
      EventLog.layer
    )),
    Layer.provideMerge(Layer.mergeAll(TestDatabase.layerWithUrl, TestNats.layer, SecretBox.layer))
  )

export const EnvLayer = makeEnvLayer()

export const api = (method: string, path: string, options: Parameters<typeof call>[3] = {}) =>
  Effect.flatMap(Effect.service(Env), (env) => call(env.base, method, path, { token: env.org.token, ...options }))

export const create = (body: Record<string, unknown>, token?: string) =>
  Effect.gen(function*() {
    const res = yield* api("POST", "/v1/sandboxes", { body, ...(token !== undefined ? { token } : {}) })
    expect(res.status, res.text).toBe(201)
    return res.json as { id: string; [k: string]: any }
  })

export const get = (id: string, token?: string) =>
  api("GET", `/v1/sandboxes/${id}`, token !== undefined ? { token } : {})

export const waitState = (id: string, state: string, timeout: Duration.Input = Duration.seconds(30), token?: string) =>
  Effect.map(
    eventually(
      get(id, token),
      (r) => r.json?.state === state || (r.json?.state === "error" && state !== "error"),
      timeout
    ),
    (r) => {
      expect(r.json.state, JSON.stringify(r.json)).toBe(state)
      return r.json as Record<string, any>
    }
  )

/** The sandbox's events as `name` or `name:state`, once `until` is among them. */
export const eventsOf = (id: string, until: string) =>
  Effect.gen(function*() {
    const log = yield* EventLog
    const label = (e: { event: string; data: any }) =>
      e.event === "sandbox.state_updated" ? `${e.event}:${e.data.state}` : e.event
    const events = yield* eventually(log.of(id), (es) => es.some((e) => label(e) === until))
    return { events, labels: events.map(label) }
  })

export const expectError = (res: Answer, status: number, code: string) => {
  expect(res.status, res.text).toBe(status)
  expect(res.json.code, res.text).toBe(code)
  expect(typeof res.json.error).toBe("string")
}
