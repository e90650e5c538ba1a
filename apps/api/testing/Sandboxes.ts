/**
 * Test support for the sandbox control plane through the API: a real Postgres and NATS, the
 * API served over HTTP, orgs and keys, the EVENTS stream read back, real host agents (the
 * agent role with bubblewrap) and fake hosts (a `hosts` record nobody serves), and clean-up of
 * every sandbox, folder and cgroup the hosts made, also when a test fails. Exported, with
 * SandboxesEnv.ts, as `@svc/api/testing/*`: the tests of the CLI, the SDKs and the dashboard run
 * the platform with it.
 */
import { startAgent as startAgentFixture } from "@svc/agent/testing/Agent"
import { ApiKeys } from "@svc/auth/ApiKeys"
import { operatorContext } from "@svc/auth/Audit"
import * as AuthLayer from "@svc/auth/AuthLayer"
import { Orgs } from "@svc/auth/Orgs"
import { Nats } from "@svc/bus/Nats"
import { ensureBucket } from "@svc/bus/Topology"
import { makeHostId, type OrgId } from "@svc/domain/Ids"
import * as Events from "@svc/events/Streams"
import { type HostRecord, HOSTS_BUCKET_SPEC } from "@svc/host-protocol/Protocol"
import { eventually as waitUntil } from "@svc/testing/Eventually"
import { cleanUpHost, makeHost as makeTestHost, type TestHost } from "@svc/testing/TestHost"
import { type Answer, call, serve } from "@svc/testing/TestHttp"
import { Context, Duration, Effect, Fiber, Layer, Schedule } from "effect"
import { HttpRouter } from "effect/http"
import { NodeHooks } from "../src/Preview.ts"
import * as Server from "../src/Server.ts"

// ---------------------------------------------------------------------------------------------
// HTTP

export type { Answer }

export { call }

/** Polls well under the API's per-key rate limit (50/s), even with a few waits at once. */
export const eventually = <A, E, R>(
  observe: Effect.Effect<A, E, R>,
  check: (a: A) => boolean,
  timeout?: Duration.Input
) => waitUntil(observe, check, timeout, Duration.millis(100))

// ---------------------------------------------------------------------------------------------
// Events

export interface Envelope {
  readonly subject: string
  readonly event: string
  readonly org_id: string
  readonly ts: string
  readonly data: any
}

/** Every message of the EVENTS stream (this test's prefix), read with an ordered consumer. */
export class EventLog extends Context.Service<EventLog, {
  readonly all: Effect.Effect<ReadonlyArray<Envelope>>
  /** The events about one sandbox, in stream order. */
  of(sandboxId: string): Effect.Effect<ReadonlyArray<Envelope>>
}>()("@svc/api/test/EventLog") {
  static readonly layer = Layer.effect(
    EventLog,
    Effect.gen(function*() {
      const nats = yield* Nats
      const stream = yield* Events.ensure()
      const received: Array<Envelope> = []
      const consumer = yield* Effect.promise(() => nats.js.consumers.get(stream))
      yield* Effect.acquireRelease(
        Effect.promise(() =>
          consumer.consume({
            callback: (msg) => {
              received.push({ subject: msg.subject, ...JSON.parse(new TextDecoder().decode(msg.data)) })
            }
          })
        ),
        (m) => Effect.promise(() => m.close().catch(() => undefined))
      )
      const of = (sandboxId: string) => Effect.sync(() => received.filter((e) => e.data?.sandbox_id === sandboxId))
      return EventLog.of({ all: Effect.sync(() => [...received]), of })
    })
  )
}

// ---------------------------------------------------------------------------------------------
// Hosts

export type { TestHost }
export { cleanUpHost }
export const makeHost = makeTestHost("svc-sbx-api-test-")

/**
 * A real agent on `host` (@svc/agent/testing/Agent: a NATS connection of its own, as its own
 * process would have), consuming once this returns, in region `local` with room for every test
 * here unless told otherwise. `stop` ends it; the surrounding scope does too.
 */
export const startAgent = (
  host: TestHost,
  options: {
    readonly region?: string
    readonly capacity?: { cpu?: number; ramMb?: number; diskGb?: number }
    /** Time between two samples of each running sandbox (default 5 s). */
    readonly metricsIntervalMs?: number
    /** The agent's `base` warm pool (none unless asked for). */
    readonly poolSize?: number
  } = {}
) =>
  startAgentFixture(host, {
    region: options.region ?? "local",
    capacity: { cpu: 64, ramMb: 64 * 1024, diskGb: 500, ...options.capacity },
    ...(options.metricsIntervalMs !== undefined ? { metricsIntervalMs: options.metricsIntervalMs } : {}),
    ...(options.poolSize !== undefined ? { poolSize: options.poolSize } : {})
  })

/**
 * A host that only exists as a `hosts` record (heartbeat refreshed until `stop`): placement
 * takes it, nobody carries out its commands.
 */
export const fakeHost = (
  options: {
    readonly region?: string
    readonly heartbeatAt?: number
    readonly capacity?: { readonly cpu: number; readonly ramMb: number; readonly diskGb: number }
  } = {}
) =>
  Effect.gen(function*() {
    const kv = yield* ensureBucket(HOSTS_BUCKET_SPEC)
    const hostId = makeHostId()
    const record = (heartbeatAt: number): HostRecord => ({
      hostId,
      region: options.region ?? "local",
      datacenter: "fake-1",
      version: "test",
      capacity: options.capacity ?? { cpu: 64, ramMb: 64 * 1024, diskGb: 500 },
      endpoint: "http://127.0.0.1:9",
      token: "fake",
      heartbeatAt,
      startedAt: Date.now()
    })
    const put = (at: number) => Effect.promise(() => kv.put(hostId, JSON.stringify(record(at))))
    yield* put(options.heartbeatAt ?? Date.now())
    const beating = options.heartbeatAt === undefined
      ? yield* Effect.forkScoped(
        Effect.repeat(Effect.suspend(() => put(Date.now())), Schedule.spaced(Duration.millis(500)))
      )
      : undefined
    const silence = beating === undefined ? Effect.void : Fiber.interrupt(beating)
    return {
      hostId,
      /** Stops the heartbeat and deletes the record: the host is gone. */
      remove: Effect.andThen(silence, Effect.promise(() => kv.delete(hostId))),
      /** Stops the heartbeat and leaves a record last seen `ago` ms back. */
      staleBy: (ago: number) => Effect.andThen(silence, put(Date.now() - ago))
    }
  })

// ---------------------------------------------------------------------------------------------
// Orgs and keys

/** Mints keys and orgs with the auth services directly (as the operator CLI would). */
export class Identity extends Context.Service<Identity, {
  org(name: string): Effect.Effect<{ readonly id: OrgId; readonly token: string }>
  key(orgId: OrgId, scopes: ReadonlyArray<string>): Effect.Effect<string>
}>()("@svc/api/test/Identity") {
  static readonly layer = Layer.effect(
    Identity,
    Effect.gen(function*() {
      const orgs = yield* Orgs
      const keys = yield* ApiKeys
      const key = (orgId: OrgId, scopes: ReadonlyArray<string>) =>
        Effect.map(
          Effect.orDie(keys.mint({ orgId, userId: null, name: "test", scopes }, operatorContext)),
          (k) => k.token
        )
      return Identity.of({
        org: (name) =>
          Effect.gen(function*() {
            const org = yield* Effect.orDie(orgs.create(name, operatorContext))
            return { id: org.id, token: yield* key(org.id, ["*"]) }
          }),
        key
      })
    })
  ).pipe(Layer.provide(AuthLayer.layerWith({})))
}

/**
 * The API over HTTP on a free port (with the platform's layers provided), on the API's own Node
 * server with its preview proxy (exposed ports); yields its base URL.
 */
export const serveApi = Effect.suspend(() => serveApiOf({}))

const serveApiOf = (options: { readonly fresh?: boolean }) =>
  Effect.suspend(() => {
    const hooks: NodeHooks["Service"] = { preview: undefined }
    return serve(
      HttpRouter.serve(Server.Routes.pipe(Layer.provide(Layer.succeed(NodeHooks, hooks))), {
        disableLogger: true,
        disableListenLog: true
      }),
      { server: () => Server.makeNodeServer(hooks), ...options }
    )
  })
