/**
 * `npm run chaos`: the platform scaled out on this machine (`@svc/testing/TestCluster`: a 3-node NATS
 * cluster with a user per role and per host, 2 processes of each role, one Postgres), a sustained
 * mix of work for CHAOS_DURATION (default 60s: sandbox creates, execs and deletes from
 * CHAOS_WORKERS loops, default 3; webhook events to a receiver; key creations and revocations)
 * while each role, in a loop of its own, has one of its processes killed -9 every
 * CHAOS_KILL_EVERY or so (default 8s, ±50%; each is started again; kills of different roles
 * overlap) and one NATS node is down from a sixth of the run for a third of it.
 *
 * Prints what was sent, delivered, lost and duplicated (by `x-svc-delivery-id`), how long the
 * restarts took, sandboxes left in a transitional state, sandbox versions not produced by exactly
 * one message in the actors' own log (and states committed twice in a row by the events), key
 * creations and revocations without their audit entry, revoked keys still accepted, and the
 * answers by status; exits 1 unless all of those are zero and no answer was a 5xx other than 503.
 * Bounded: one run, then everything it started is stopped.
 */
import { check, makeClient, makeOrg, makeStats, runFaults, runLoad } from "@svc/testing/Chaos"
import { startTestCluster } from "@svc/testing/TestCluster"
import * as TestDatabase from "@svc/testing/TestDatabase"
import { receiver } from "@svc/testing/WebhookReceiver"
import { Duration, Effect, Result } from "effect"
import { parseDuration } from "../packages/config/src/Env.ts"
import { median } from "./lib/Stats.ts"

const ms = (name: string, fallback: string) =>
  Duration.toMillis(Result.getOrThrow(parseDuration(process.env[name] ?? fallback)))
const DURATION_MS = ms("CHAOS_DURATION", "60s")
const KILL_EVERY_MS = ms("CHAOS_KILL_EVERY", "8s")
const WORKERS = Number(process.env.CHAOS_WORKERS ?? 3)

const log = (line: string) => process.stdout.write(`[${new Date().toISOString().slice(11, 19)}] ${line}\n`)

const main = Effect.gen(function*() {
  const databaseUrl = yield* TestDatabase.freshDatabase
  const testCluster = yield* startTestCluster({ databaseUrl, env: { SVC_WEBHOOK_ALLOWED_SUBNETS: "127.0.0.0/8" }, log })
  const org = yield* makeOrg(databaseUrl)
  const stats = makeStats()
  const client = makeClient(testCluster.apiUrls, stats)
  const rx = yield* receiver()
  const hook = yield* Effect.promise(() =>
    client("POST", "/v1/webhooks", { token: org.api_key, body: { url: rx.url, events: ["*"] } })
  )
  if (hook.status !== 201) return yield* Effect.die(new Error(`webhook: ${hook.status}`))
  log(`load for ${DURATION_MS / 1000} s: ${WORKERS} sandbox loops and key revocations`)
  const start = Date.now()
  const until = start + DURATION_MS
  const [faults] = yield* Effect.all([
    runFaults({
      testCluster,
      startMs: start,
      untilMs: until,
      everyMs: KILL_EVERY_MS,
      natsDownAtMs: DURATION_MS / 6,
      natsDownForMs: DURATION_MS / 3,
      log
    }),
    Effect.promise(() => runLoad({ client, token: org.api_key, untilMs: until, workers: WORKERS, stats, log }))
  ], { concurrency: "unbounded" })
  log("load over; waiting for deliveries and sandboxes to settle")
  const outcome = yield* check({
    databaseUrl,
    orgId: org.org_id,
    webhookId: hook.json.id,
    receiver: rx,
    stats,
    settleMs: 120_000
  })
  const lines = [
    `faults        ${faults.killed.length} processes killed -9 (${faults.killed.join(", ")}); NATS node ${
      faults.natsStops.join(", ")
    } down ${DURATION_MS / 3000} s`,
    `restarts      kill to ready, median (max) by role: ${
      Object.entries(faults.restartMs).map(([role, ms]) =>
        `${role} ${(median(ms) / 1000).toFixed(1)} s (${(Math.max(...ms) / 1000).toFixed(1)} s)`
      ).join(", ")
    }`,
    `work          ${stats.created} sandboxes created, ${stats.execs} execs, ${stats.deleted} deleted, ${stats.keysRevoked} keys revoked`,
    `answers       ${JSON.stringify(stats.statuses)}`,
    `webhooks      sent ${outcome.sent}, delivered ${outcome.delivered}, lost ${outcome.lost.length}, duplicated ${outcome.duplicated}`,
    `sandboxes     ${outcome.stuck.length} left in a transitional state${
      outcome.stuck.length ? `: ${outcome.stuck.join(", ")}` : ""
    }`,
    `transitions   ${outcome.repeatedTransitions.length} applied twice or outside the log (${outcome.transitionsChecked.versions} versions of ${outcome.transitionsChecked.sandboxes} sandboxes checked in the actors' log, and the events)${
      outcome.repeatedTransitions.length ? `: ${outcome.repeatedTransitions.join(", ")}` : ""
    }`,
    `audit         ${outcome.auditChecked} entries expected (${stats.keyIds.length} keys created, ${stats.revokedKeyIds.length} revoked), ${outcome.auditMissing.length} missing${
      outcome.auditMissing.length ? `: ${outcome.auditMissing.slice(0, 10).join(", ")}` : ""
    }`,
    `keys          ${stats.revokedAccepted} revoked keys still accepted`,
    `wrong answers ${stats.wrong.length}${stats.wrong.length ? `:\n  ${stats.wrong.slice(0, 10).join("\n  ")}` : ""}`
  ]
  process.stdout.write("\n" + lines.join("\n") + "\n")
  const ok = outcome.lost.length === 0 && stats.wrong.length === 0 && outcome.stuck.length === 0 &&
    outcome.repeatedTransitions.length === 0 && outcome.auditMissing.length === 0 && stats.revokedAccepted === 0
  if (!ok) process.exitCode = 1
})

Effect.runPromise(Effect.scoped(main)).then(
  () => process.exit(),
  (error) => {
    console.error(error)
    process.exit(1)
  }
)
