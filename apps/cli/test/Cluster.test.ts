/**
 * The platform scaled out on one machine (`@svc/testing/TestCluster`): a 3-node NATS cluster with a
 * user per role and per host, clients over TLS only (a throwaway CA; every process presents a
 * client certificate), 2 api, 2 runtime, 2 dispatcher and 2 agent processes, one Postgres.
 *
 * - TLS: every role works over it (all of what follows); a client speaking plain text is cut off
 *   before it can say anything (no PONG to its PING).
 * - The end-to-end flow: a sandbox through either API process reaches running on one of the
 *   agents, runs a command, and its events reach a webhook receiver.
 * - Under a sustained mix (creates, execs, deletes, key creations and revocations), one NATS node
 *   stopped for a while and every role's processes killed -9 in turn (each started again; kills of
 *   different roles overlap): every committed event is delivered (by `x-svc-delivery-id`), no
 *   sandbox is left in a transitional state, every version of every sandbox was stored by exactly
 *   one message (the actors' own log), every key creation and revocation is audited and every
 *   revoked key refused, and no answer is a 5xx other than 503.
 * - Permissions: every role runs under its own NATS user, and no node logged a permissions
 *   violation during all of the above (each user is allowed what its role does). The agent of one
 *   host, with its own credentials, cannot write the other host's record in the `hosts` bucket,
 *   nor report on the other host's subject (NATS refuses); a report on its own subject whose body
 *   names the other host is ignored by the sandbox actor.
 */
import { expect, layer } from "@effect/vitest"
import * as Mailbox from "@svc/bus/Mailbox"
import { Nats } from "@svc/bus/Nats"
import { ensureBucket } from "@svc/bus/Topology"
import * as Database from "@svc/db/Database"
import { agentUser } from "@svc/host-protocol/Permissions"
import { AgentReport, HOSTS_BUCKET_SPEC, reportSender, SANDBOX_MAILBOX } from "@svc/host-protocol/Protocol"
import { check, makeClient, makeOrg, makeStats, runFaults, runLoad } from "@svc/testing/Chaos"
import { startTestCluster } from "@svc/testing/TestCluster"
import * as TestDatabase from "@svc/testing/TestDatabase"
import { receiver } from "@svc/testing/WebhookReceiver"
import { Duration, Effect, Exit, Layer } from "effect"
import { SqlClient } from "effect/sql"
import * as Fs from "node:fs"
import * as Net from "node:net"
import * as Path from "node:path"

const log = (line: string) => process.stderr.write(`[cluster] ${line}\n`)

/** What a NATS node answers a client that speaks plain text: its INFO, then a PONG only if it let it in. */
const plainTextAnswer = (url: string) =>
  new Promise<string>((resolve) => {
    const { hostname, port } = new URL(url)
    const socket = Net.connect(Number(port), hostname)
    let answer = ""
    let spoke = false
    const done = () => resolve(answer)
    socket.on("data", (chunk) => {
      answer += chunk.toString("latin1")
      if (!spoke && answer.includes("\r\n")) {
        spoke = true
        socket.write(`CONNECT {"verbose":false,"pedantic":false}\r\nPING\r\n`)
      }
    })
    socket.on("close", done)
    socket.on("error", done)
    socket.setTimeout(60_000, () => socket.destroy())
  })

/** The permission violations the NATS nodes logged so far, as `<user> <what>`. */
const violations = (dirs: ReadonlyArray<string>) =>
  dirs.flatMap((dir) => {
    const file = Path.join(dir, "nats.log")
    const text = Fs.existsSync(file) ? Fs.readFileSync(file, "utf8") : ""
    return text.split("\n").filter((l) => /violation/i.test(l)).map((l) => {
      const user = /User "([^"]+)"/.exec(l)?.[1] ?? "?"
      return `${user} ${l.slice(l.search(/\w+ Violation/i))}`
    })
  })

layer(TestDatabase.layerWithUrl, { excludeTestServices: true })("the platform scaled out", (it) => {
  it.effect(
    "2 of each role on a 3-node cluster over TLS: the flow end to end; a NATS node lost and each role killed -9 under load lose nothing; each role within its NATS permissions; an agent cannot act as another host",
    () =>
      Effect.gen(function*() {
        const databaseUrl = yield* TestDatabase.TestDatabaseUrl
        const testCluster = yield* startTestCluster({
          databaseUrl,
          env: { SVC_WEBHOOK_ALLOWED_SUBNETS: "127.0.0.0/8" },
          tls: true,
          log
        })
        // Plain text: each node announces that it requires TLS and closes on the first clear byte.
        for (const url of testCluster.cluster.urls) {
          const answer = yield* Effect.promise(() => plainTextAnswer(url))
          expect(answer).toMatch(/^INFO .*"tls_required":true/)
          expect(answer).not.toContain("PONG")
        }
        const org = yield* makeOrg(databaseUrl)
        const token = org.api_key
        const stats = makeStats()
        const client = makeClient(testCluster.apiUrls, stats)
        const rx = yield* receiver()
        const hook = yield* Effect.promise(() =>
          client("POST", "/v1/webhooks", { token, body: { url: rx.url, events: ["*"] } })
        )
        expect(hook.status).toBe(201)

        // End to end, once through each API process.
        for (const api of testCluster.apiUrls) {
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

        // Load with faults: the NATS node goes at 4 s for 12 s; each role's processes die in turn, every 5 s or so.
        const start = Date.now()
        const until = start + 30_000
        const [faults] = yield* Effect.all([
          runFaults({
            testCluster,
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
        log(JSON.stringify({
          faults,
          stats: { ...stats, keyIds: stats.keyIds.length, revokedKeyIds: stats.revokedKeyIds.length },
          outcome: { ...outcome, lost: outcome.lost.length }
        }))
        expect(new Set(faults.killed.map((n) => n.split("-")[0]))).toEqual(
          new Set(["api", "runtime", "dispatcher", "agent"])
        )
        expect(faults.natsStops.length).toBe(1)
        expect(stats.created).toBeGreaterThan(0)
        expect(outcome.sent).toBeGreaterThan(stats.created)
        expect(outcome.lost).toEqual([])
        expect(outcome.stuck).toEqual([])
        expect(outcome.repeatedTransitions).toEqual([])
        expect(outcome.transitionsChecked.sandboxes).toBeGreaterThan(stats.created)
        expect(outcome.auditMissing).toEqual([])
        expect(outcome.auditChecked).toBeGreaterThanOrEqual(2 * stats.keysRevoked)
        expect(stats.wrong).toEqual([])
        expect(stats.revokedAccepted).toBe(0)

        // Every role did all of that under its own user: nothing was refused.
        const nodeDirs = testCluster.cluster.nodes.map((n) => n.dir)
        expect(violations(nodeDirs)).toEqual([])

        const asAgent = (hostId: string) =>
          Layer.effect(
            Nats,
            Nats.make({ url: testCluster.natsUrl, replicas: 3, security: testCluster.security(agentUser(hostId)) })
          )
        // Permissions: agent 1's credentials cannot write agent 2's host record.
        const [h1, h2] = testCluster.hosts
        const forged = yield* Effect.gen(function*() {
          const hosts = yield* ensureBucket(HOSTS_BUCKET_SPEC)
          return yield* Effect.exit(Effect.tryPromise(() => hosts.put(h2!.hostId, new TextEncoder().encode("{}"))))
        }).pipe(Effect.provide(asAgent(h1!.hostId)))
        expect(Exit.isFailure(forged)).toBe(true)

        // Reports: a running sandbox's host is A; the agent of the other host, B, reports it gone.
        const sandboxOf = (id: string) =>
          Effect.gen(function*() {
            const sql = yield* SqlClient.SqlClient
            const [row] = yield* sql<{ host_id: string; state: string }>`
              SELECT host_id, state FROM sandboxes WHERE id = ${id}`
            return row!
          }).pipe(Effect.provide(Database.layerFromUrl(databaseUrl)), Effect.orDie)
        const fresh = yield* Effect.promise(() => client("POST", "/v1/sandboxes", { token, body: { name: "perm" } }))
        expect(fresh.status).toBe(201)
        const lastId = fresh.json.id as string
        for (let i = 0; i < 240 && (yield* sandboxOf(lastId)).state !== "running"; i++) {
          yield* Effect.sleep(Duration.millis(250))
        }
        const placed = yield* sandboxOf(lastId)
        expect(placed.state).toBe("running")
        const a = placed.host_id
        const b = testCluster.hosts.map((h) => h.hostId).find((h) => h !== a)!
        const gone = (msgID: string, sender: string) =>
          Mailbox.send(SANDBOX_MAILBOX, AgentReport, lastId, {
            _tag: "AgentReport",
            sandboxId: lastId,
            hostId: a,
            status: "destroyed",
            at: Date.now() + 3_600_000
          }, { msgID, sender: reportSender(sender) })
        // On A's subject with B's credentials: NATS refuses it (no stream ack; the node logs why, below).
        const asA = yield* Effect.exit(gone("forged-as-a", a)).pipe(Effect.provide(asAgent(b)))
        expect(Exit.isFailure(asA)).toBe(true)
        // On B's own subject, the body naming A: delivered, applied as B's, so ignored.
        yield* gone("forged-body", b).pipe(Effect.provide(asAgent(b)), Effect.orDie)
        const applied = Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          return yield* sql`SELECT 1 FROM actor_inbox WHERE type = 'sandbox' AND entity_id = ${lastId}
            AND msg_id = 'forged-body'`
        }).pipe(Effect.provide(Database.layerFromUrl(databaseUrl)), Effect.orDie)
        for (let i = 0; i < 240 && (yield* applied).length === 0; i++) yield* Effect.sleep(Duration.millis(250))
        expect((yield* applied).length).toBe(1)
        expect(yield* sandboxOf(lastId)).toEqual({ host_id: a, state: "running" })
        // The refusals above are the only violations the nodes logged, each by the agent that tried.
        const refused = violations(nodeDirs)
        expect(new Set(refused.map((v) => v.split(" ")[0]))).toEqual(new Set([agentUser(h1!.hostId), agentUser(b)]))
        const forgedSubject = Mailbox.mailboxTokens(SANDBOX_MAILBOX, lastId, reportSender(a)).join(".")
        expect(refused.some((v) => v.startsWith(agentUser(b)) && /publish/i.test(v) && v.includes(forgedSubject)))
          .toBe(true)
      }).pipe(Effect.scoped),
    300_000
  )
})
