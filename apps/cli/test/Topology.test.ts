/**
 * The platform scaled out on one machine (`@svc/testing/Topology`): a 3-node NATS cluster with a
 * user per role and per host, 2 api, 2 runtime, 2 dispatcher and 2 agent processes, one Postgres.
 *
 * - The end-to-end flow: a sandbox through either API process reaches running on one of the
 *   agents, runs a command, and its events reach a webhook receiver.
 * - Under a sustained mix (creates, execs, deletes, key revocations), one NATS node stopped for a
 *   while and each role's process killed -9 once (and started again): every committed event is
 *   delivered (by `x-svc-delivery-id`), no sandbox is left in a transitional state, no transition
 *   is committed twice, every revocation is audited and refused, and no answer is a 5xx other
 *   than 503.
 * - Permissions: the agent of one host, with its own credentials, cannot write the other host's
 *   record in the `hosts` bucket.
 */
import { expect, layer } from "@effect/vitest"
import { Nats } from "@svc/bus/Nats"
import { ensureBucket } from "@svc/bus/Topology"
import { agentUser } from "@svc/host-protocol/Permissions"
import { HOSTS_BUCKET_SPEC } from "@svc/host-protocol/Protocol"
import { check, makeClient, makeOrg, makeStats, runFaults, runLoad } from "@svc/testing/Chaos"
import * as TestDatabase from "@svc/testing/TestDatabase"
import { startTopology } from "@svc/testing/Topology"
import { Duration, Effect, Exit, Layer, Redacted } from "effect"
import { receiver } from "../../../packages/webhooks/test/Receiver.ts"

const log = (line: string) => process.stderr.write(`[topology] ${line}\n`)

layer(TestDatabase.layerWithUrl, { excludeTestServices: true })("the platform scaled out", (it) => {
  it.effect(
    "2 of each role on a 3-node cluster: the flow end to end; a NATS node lost and each role killed -9 under load lose nothing; an agent cannot write another host's record",
    () =>
      Effect.gen(function*() {
        const databaseUrl = yield* TestDatabase.TestDatabaseUrl
        const topology = yield* startTopology({
          databaseUrl,
          env: { SVC_WEBHOOK_ALLOWED_SUBNETS: "127.0.0.0/8" },
          log
        })
        const org = yield* makeOrg(databaseUrl)
        const token = org.api_key
        const stats = makeStats()
        const client = makeClient(topology.apiUrls, stats)
        const rx = yield* receiver()
        const hook = yield* Effect.promise(() =>
          client("POST", "/v1/webhooks", { token, body: { url: rx.url, events: ["*"] } })
        )
        expect(hook.status).toBe(201)

        // End to end, once through each API process.
        for (const api of topology.apiUrls) {
          const one = makeClient([api], stats)
          const created = yield* Effect.promise(() => one("POST", "/v1/sandboxes", { token, body: { name: "e2e" } }))
          expect(created.status).toBe(201)
          const id = created.json.id as string
          let state = ""
          for (let i = 0; i < 240 && state !== "running"; i++) {
            state = (yield* Effect.promise(() => one("GET", `/v1/sandboxes/${id}`, { token }))).json?.state
            if (state !== "running") yield* Effect.sleep(Duration.millis(250))
          }
          expect(state).toBe("running")
          const exec = yield* Effect.promise(() =>
            one("POST", `/v1/sandboxes/${id}/exec`, { token, body: { cmd: ["echo", "hello"] } })
          )
          expect(exec.status).toBe(200)
          expect(exec.json.stdout).toBe("hello\n")
        }

        // Load with faults: the NATS node goes at 4 s for 12 s; a process of each role dies in turn.
        const start = Date.now()
        const until = start + 30_000
        const [faults] = yield* Effect.all([
          runFaults({
            topology,
            startMs: start,
            untilMs: until,
            everyMs: 5_000,
            natsDownAtMs: 4_000,
            natsDownForMs: 12_000,
            log
          }),
          Effect.promise(() => runLoad({ client, token, untilMs: until, workers: 2, stats, log }))
        ], { concurrency: "unbounded" })
        const outcome = yield* check({
          databaseUrl,
          orgId: org.org_id,
          webhookId: hook.json.id,
          receiver: rx,
          stats,
          settleMs: 90_000
        })
        log(JSON.stringify({ faults, stats, outcome: { ...outcome, lost: outcome.lost.length } }))
        expect(new Set(faults.killed.map((n) => n.split("-")[0]))).toEqual(
          new Set(["api", "runtime", "dispatcher", "agent"])
        )
        expect(faults.natsStops.length).toBe(1)
        expect(stats.created).toBeGreaterThan(0)
        expect(outcome.sent).toBeGreaterThan(stats.created)
        expect(outcome.lost).toEqual([])
        expect(outcome.stuck).toEqual([])
        expect(outcome.repeatedTransitions).toEqual([])
        expect(outcome.auditMissing).toBe(0)
        expect(stats.wrong).toEqual([])
        expect(stats.revokedAccepted).toBe(0)

        // Permissions: agent 1's credentials cannot write agent 2's host record.
        const [h1, h2] = topology.hosts
        const user = agentUser(h1!.hostId)
        const forged = yield* Effect.gen(function*() {
          const hosts = yield* ensureBucket(HOSTS_BUCKET_SPEC)
          return yield* Effect.exit(Effect.tryPromise(() => hosts.put(h2!.hostId, new TextEncoder().encode("{}"))))
        }).pipe(
          Effect.provide(Layer.effect(
            Nats,
            Nats.make({
              url: topology.natsUrl,
              replicas: 3,
              security: { user, password: Redacted.make(topology.passwords[user]!) }
            })
          ))
        )
        expect(Exit.isFailure(forged)).toBe(true)
      }).pipe(Effect.scoped),
    300_000
  )
})
