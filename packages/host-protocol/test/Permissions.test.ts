/**
 * NATS authentication per role, against a real nats-server given `authorizationBlock`: the
 * agent of h1, with its own credentials, does what an agent does (declares the AGENT stream and
 * its buckets, its own command consumer, writes its own host record, reports to a sandbox's
 * mailbox on its own host's subject) and cannot act as h2 (write h2's record, create or pull
 * h2's command consumer, report on h2's subject or on a subject naming no host) or destroy
 * anything (delete or purge a stream). The control-plane users are confined to their roles: the
 * dispatcher cannot publish an agent command, an actor message or an event; the api cannot
 * publish a command or a report. A wrong password does not connect.
 */
import { describe, expect, it } from "@effect/vitest"
import { AckPolicy } from "@nats-io/jetstream"
import { Nats } from "@svc/bus/Nats"
import { ensureBucket, ensureConsumer, ensureStream } from "@svc/bus/Topology"
import { agentUser, authorizationBlock, platformUsers } from "@svc/host-protocol/Permissions"
import {
  AGENT_STREAM_SPEC,
  agentConsumer,
  HOSTS_BUCKET_SPEC,
  reportSubject,
  SANDBOX_ACTOR_TYPE
} from "@svc/host-protocol/Protocol"
import {
  controlLogSubject,
  ensureStreams,
  hostLogSubject,
  metricSubject,
  publishLines,
  publishSample,
  purgeSandbox,
  readLines,
  readSamples
} from "@svc/host-protocol/SandboxTelemetry"
import { startNats } from "@svc/local-servers/Servers"
import { Effect, Exit, Layer, Redacted, Stream } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"

const PREFIX = "perm"
const passwordOf = (user: string) => `pw-${user}-secret`

const server = Effect.acquireRelease(
  Effect.promise(async () => {
    const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "svc-nats-perm-"))
    const config = Path.join(dir, "auth.conf")
    const users = platformUsers({
      prefix: PREFIX,
      hostIds: ["h1", "h2"],
      password: (user) => ({ value: passwordOf(user) })
    })
    Fs.writeFileSync(config, authorizationBlock(users) + "\n")
    const nats = await startNats({ config })
    return { ...nats, cleanUp: () => Fs.rmSync(dir, { recursive: true, force: true }) }
  }),
  (s) => Effect.promise(() => s.stop().then(s.cleanUp))
)

const as = (url: string, user: string, password = passwordOf(user)) =>
  Layer.effect(
    Nats,
    Nats.make({ url, prefix: PREFIX, name: user, security: { user, password: Redacted.make(password) } })
  )

const tryPromise = <A>(f: () => Promise<A>) => Effect.exit(Effect.tryPromise(f))

/** The sandbox actors' mailboxes, as `Actors.ensure` declares them. */
const SANDBOX_MAILBOX_STREAM = {
  name: `ACTOR_${SANDBOX_ACTOR_TYPE.toUpperCase()}`,
  subjects: [`actor.${SANDBOX_ACTOR_TYPE}.>`],
  retention: "workqueue" as const
}

/** A JetStream publish as the connected user: the stream's ack, or NATS's refusal. */
const publish = (subject: ReadonlyArray<string> | string) =>
  Effect.gen(function*() {
    const bus = yield* Nats
    const full = typeof subject === "string" ? bus.subject(subject) : bus.subject(...subject)
    return yield* tryPromise(() => bus.js.publish(full, new TextEncoder().encode("{}")))
  })

const refusedByPermissions = (exit: Exit.Exit<unknown, unknown>) => {
  expect(Exit.isFailure(exit)).toBe(true)
  expect(String(Exit.isFailure(exit) ? exit.cause : "")).toMatch(/permission/i)
}

describe("NATS permissions", () => {
  it.live(
    "an agent's credentials act as its own host only; each control-plane user only as its role; a wrong password is refused",
    () =>
      Effect.gen(function*() {
        const nats = yield* server
        const encoder = new TextEncoder()

        // The control plane declares the stream and bucket first (as the api and runtime do).
        yield* Effect.gen(function*() {
          yield* ensureStream(AGENT_STREAM_SPEC)
          yield* ensureBucket(HOSTS_BUCKET_SPEC)
          yield* ensureStream(SANDBOX_MAILBOX_STREAM)
          const bus = yield* Nats
          yield* Effect.promise(() => bus.js.publish(bus.subject("agent", "h2", "create"), encoder.encode("{}")))
        }).pipe(Effect.provide(as(nats.url, "runtime")))
        // h2's consumer exists (its agent made it), with a command waiting: h1 still may not pull it.
        yield* ensureConsumer(AGENT_STREAM_SPEC.name, {
          durable_name: agentConsumer("h2"),
          filter_subject: "agent.h2.>",
          ack_policy: AckPolicy.Explicit
        }).pipe(Effect.provide(as(nats.url, agentUser("h2"))))

        // The agent of h1: everything an agent does at start succeeds.
        yield* Effect.gen(function*() {
          const bus = yield* Nats
          yield* ensureStream(AGENT_STREAM_SPEC)
          const hosts = yield* ensureBucket(HOSTS_BUCKET_SPEC)
          yield* ensureConsumer(AGENT_STREAM_SPEC.name, {
            durable_name: agentConsumer("h1"),
            filter_subject: "agent.h1.>",
            ack_policy: AckPolicy.Explicit
          })
          expect(Exit.isSuccess(yield* tryPromise(() => hosts.put("h1", encoder.encode("{}"))))).toBe(true)
          // A report to a sandbox's mailbox on its own host's subject: stored.
          const own = yield* publish(reportSubject("sbx_1", "h1"))
          expect(Exit.isSuccess(own)).toBe(true)
          // As h2, or on a subject naming no host (where the control plane talks): refused by NATS.
          refusedByPermissions(yield* publish(reportSubject("sbx_1", "h2")))
          refusedByPermissions(yield* publish(["actor", "sandbox", "3", "sbx_1"]))
          refusedByPermissions(yield* publish(["agent", "h2", "create"]))

          // Another host's record is not readable (it holds that host's data-plane token), by a
          // get or by listening to the bucket's subjects.
          refusedByPermissions(yield* tryPromise(() => hosts.get("h2")))
          const listened = bus.connection.subscribe(`$KV.${bus.name("hosts")}.>`)
          const closed = yield* Effect.promise(() => listened.closed.then((e) => e ?? "open", (e) => e))
          expect(String(closed)).toMatch(/permission/i)

          // As h2: refused.
          const forged = yield* tryPromise(() => hosts.put("h2", encoder.encode("{}")))
          expect(Exit.isFailure(forged)).toBe(true)
          expect(String(Exit.isFailure(forged) ? forged.cause : "")).toMatch(/permission/i)
          const stolen = yield* Effect.exit(ensureConsumer(AGENT_STREAM_SPEC.name, {
            durable_name: agentConsumer("h2"),
            filter_subject: "agent.h2.>",
            ack_policy: AckPolicy.Explicit
          }))
          expect(Exit.isFailure(stolen)).toBe(true)
          const pulled = yield* tryPromise(async () => {
            const consumer = await bus.js.consumers.get(bus.name("AGENT"), bus.name(agentConsumer("h2")))
            return consumer.next({ expires: 1_000 })
          })
          expect(Exit.isSuccess(pulled) ? pulled.value : "refused").toBe("refused")
          // Nothing destroyed.
          const deleted = yield* tryPromise(() => bus.jsm.streams.delete(bus.name("AGENT")))
          expect(Exit.isFailure(deleted)).toBe(true)
          const purged = yield* tryPromise(() => bus.jsm.streams.purge(`KV_${bus.name("hosts")}`))
          expect(Exit.isFailure(purged)).toBe(true)
        }).pipe(Effect.provide(as(nats.url, agentUser("h1"))))

        // The control plane sees h1's record and no h2 record; it may write anywhere.
        yield* Effect.gen(function*() {
          const hosts = yield* ensureBucket(HOSTS_BUCKET_SPEC)
          expect((yield* Effect.promise(() => hosts.get("h1")))?.operation).toBe("PUT")
          expect(yield* Effect.promise(() => hosts.get("h2"))).toBe(null)
          yield* Effect.promise(() => hosts.put("h2", encoder.encode("{}")))
        }).pipe(Effect.provide(as(nats.url, "runtime")))

        // The dispatcher publishes delivery jobs only: no agent command, actor message or event.
        yield* Effect.gen(function*() {
          refusedByPermissions(yield* publish(["agent", "h1", "create"]))
          refusedByPermissions(yield* publish(reportSubject("sbx_1", "h1")))
          refusedByPermissions(yield* publish(["actor", "sandbox", "3", "sbx_1"]))
          refusedByPermissions(yield* publish(["evt", "org_1", "sandbox.created"]))
          const bus = yield* Nats
          expect(Exit.isFailure(yield* tryPromise(() => bus.jsm.streams.delete(bus.name("AGENT"))))).toBe(true)
        }).pipe(Effect.provide(as(nats.url, "dispatcher")))
        // The api sends through the outbox: no command or report of its own.
        yield* Effect.gen(function*() {
          refusedByPermissions(yield* publish(["agent", "h1", "create"]))
          refusedByPermissions(yield* publish(["actor", "sandbox", "3", "sbx_1"]))
        }).pipe(Effect.provide(as(nats.url, "api")))
        // The runtime's relay publishes commands and actor messages; only h1's agent pulled h1's.
        yield* Effect.gen(function*() {
          expect(Exit.isSuccess(yield* publish(["agent", "h1", "create"]))).toBe(true)
          expect(Exit.isSuccess(yield* publish(["actor", "sandbox", "3", "sbx_1"]))).toBe(true)
          const bus = yield* Nats
          const info = yield* Effect.promise(() => bus.jsm.streams.info(bus.name("AGENT")))
          // h2's command and the runtime's: none from the dispatcher, the api or the agent of h1.
          expect(info.state.messages).toBe(2)
          const mailbox = yield* Effect.promise(() => bus.jsm.streams.info(bus.name(SANDBOX_MAILBOX_STREAM.name)))
          expect(mailbox.state.messages).toBe(2)
        }).pipe(Effect.provide(as(nats.url, "runtime")))

        // A wrong password: no connection.
        const wrong = yield* Effect.exit(Effect.scoped(Layer.build(as(nats.url, agentUser("h1"), "nope"))))
        expect(Exit.isFailure(wrong)).toBe(true)
      }).pipe(Effect.scoped),
    60_000
  )

  it.live(
    "sandbox logs and metrics: an agent writes on its own host's subjects only, the runtime writes lifecycle lines and purges, the api reads",
    () =>
      Effect.gen(function*() {
        const nats = yield* server
        const sample = {
          ts: "2026-01-01T00:00:00.000Z",
          cpu_pct: 1,
          mem_bytes: 1,
          mem_limit_bytes: 1,
          disk_bytes: 1,
          disk_limit_bytes: 1,
          pids: 1,
          net_rx_bytes: 0,
          net_tx_bytes: 0
        }
        const line = { ts: sample.ts, source: "start_cmd" as const, text: "hello" }
        const readAll = (id: string) =>
          Effect.gen(function*() {
            const samples = yield* Effect.flatMap(readSamples(id, { follow: false }), Stream.runCollect)
            const lines = yield* Effect.flatMap(readLines(id, { follow: false }), Stream.runCollect)
            return { samples: samples.length, lines: Array.from(lines).map((l) => l.entry.text) }
          }).pipe(Effect.scoped)

        yield* Effect.gen(function*() {
          yield* ensureStreams()
          expect(Exit.isSuccess(yield* Effect.exit(publishSample(metricSubject("sbx_1", "h1"), sample)))).toBe(true)
          expect(Exit.isSuccess(yield* Effect.exit(publishLines(hostLogSubject("sbx_1", "h1"), [line])))).toBe(true)
          refusedByPermissions(yield* publish(metricSubject("sbx_1", "h2")))
          refusedByPermissions(yield* publish(hostLogSubject("sbx_1", "h2")))
          refusedByPermissions(yield* publish(controlLogSubject("sbx_1")))
          // Neither read nor purged by an agent.
          expect(Exit.isFailure(yield* Effect.exit(readAll("sbx_1")))).toBe(true)
          expect(Exit.isFailure(yield* Effect.exit(purgeSandbox("sbx_1")))).toBe(true)
        }).pipe(Effect.provide(as(nats.url, agentUser("h1"))))

        yield* Effect.gen(function*() {
          refusedByPermissions(yield* publish(metricSubject("sbx_1", "h1")))
          refusedByPermissions(yield* publish(controlLogSubject("sbx_1")))
          expect(Exit.isFailure(yield* Effect.exit(purgeSandbox("sbx_1")))).toBe(true)
        }).pipe(Effect.provide(as(nats.url, "api")))

        yield* Effect.gen(function*() {
          const started = { ...line, source: "lifecycle" as const, text: "started" }
          expect(Exit.isSuccess(yield* Effect.exit(publishLines(controlLogSubject("sbx_1"), [started])))).toBe(true)
        }).pipe(Effect.provide(as(nats.url, "runtime")))

        const seen = yield* readAll("sbx_1").pipe(Effect.provide(as(nats.url, "api")))
        expect(seen).toEqual({ samples: 1, lines: ["hello", "started"] })

        yield* purgeSandbox("sbx_1").pipe(Effect.provide(as(nats.url, "runtime")))
        expect(yield* readAll("sbx_1").pipe(Effect.provide(as(nats.url, "api")))).toEqual({ samples: 0, lines: [] })
      }).pipe(Effect.scoped),
    60_000
  )
})
