/**
 * One org cannot starve another's file transfers (issue 25, item 9), against the real processes:
 * the API (apps/api/src/main.ts) and a host agent (apps/agent/src/main.ts) run as child
 * processes with small transfer bounds (4 slots each, 2 per org) and a short idle timeout.
 *
 * The attack as it was found: an org uploads into FIFOs in its sandbox that nobody reads, so
 * each upload holds a slot for as long as its client keeps the connection open. Here org A opens
 * as many such uploads as the API and the host have slots. Org A gets its share and a 429 for
 * the rest; org B's read completes while A's uploads are still held; A's uploads are ended once
 * they moved nothing for the idle timeout, and their slots are A's again.
 */
import { expect, layer } from "@effect/vitest"
import { SecretBox } from "@svc/crypto/SecretBox"
import * as Runtime from "@svc/runtime/Runtime"
import * as TestDatabase from "@svc/testing/TestDatabase"
import * as TestNats from "@svc/testing/TestNats"
import { Context, Effect, Layer } from "effect"
import { call, eventually, Identity } from "../../testing/Sandboxes.ts"
import { spawnPlatform } from "../support/Roles.ts"
import { type Ended, stalledUpload } from "../support/Uploads.ts"

const SLOTS = 4
const PER_ORG = 2
const IDLE = "2s"
/** The host's backstop, after the API's (which ends them first, and can still answer). */
const HOST_IDLE = "4s"

class Env extends Context.Service<Env, {
  readonly base: string
  readonly a: string
  readonly b: string
}>()("TransfersFairness.test/Env") {}

const EnvLayer = Layer.effect(
  Env,
  Effect.gen(function*() {
    const { base } = yield* spawnPlatform({
      agent: {
        SVC_AGENT_MAX_TRANSFERS: String(SLOTS),
        SVC_AGENT_MAX_TRANSFERS_PER_ORG: String(PER_ORG),
        SVC_AGENT_TRANSFER_IDLE_TIMEOUT: HOST_IDLE
      },
      api: {
        SVC_API_MAX_TRANSFERS: String(SLOTS),
        SVC_API_MAX_TRANSFERS_PER_ORG: String(PER_ORG),
        SVC_API_TRANSFER_IDLE_TIMEOUT: IDLE
      }
    })
    const identity = yield* Identity
    return {
      base,
      a: (yield* identity.org("transfers-a")).token,
      b: (yield* identity.org("transfers-b")).token
    }
  })
).pipe(
  Layer.provideMerge(Layer.mergeAll(Runtime.make({ supervisor: { intervalMs: 200 } }), Identity.layer)),
  Layer.provideMerge(Layer.mergeAll(TestDatabase.layerWithUrl, TestNats.layer, SecretBox.layer))
)

layer(EnvLayer, { excludeTestServices: true, timeout: 300_000 })("file transfers across orgs", (it) => {
  it.effect(
    "an org's uploads into FIFOs get its share of the slots and a 429 past it; another org's read completes meanwhile; the stalled uploads end after the idle timeout and free their slots",
    () =>
      Effect.gen(function*() {
        const env = yield* Env
        const as = (token: string) => (method: string, path: string, body?: unknown) =>
          call(env.base, method, path, { token, ...(body !== undefined ? { body } : {}) })
        const a = as(env.a)
        const b = as(env.b)
        const running = (api: typeof a) =>
          Effect.gen(function*() {
            const created = yield* api("POST", "/v1/sandboxes", { ram_mb: 256 })
            expect(created.status, created.text).toBe(201)
            const id = created.json.id as string
            yield* eventually(api("GET", `/v1/sandboxes/${id}`), (r) => r.json?.state === "running")
            return id
          })
        const exec = (api: typeof a, id: string, script: string) =>
          Effect.map(api("POST", `/v1/sandboxes/${id}/exec`, { cmd: ["sh", "-c", script] }), (res) => {
            expect(res.status, res.text).toBe(200)
            expect(res.json.exit_code, res.text).toBe(0)
            return res.json.stdout as string
          })

        const sandboxA = yield* running(a)
        const sandboxB = yield* running(b)
        yield* exec(a, sandboxA, `for i in 1 2 3 4; do mkfifo /tmp/fifo$i; done; echo a > /tmp/a.txt`)
        yield* exec(b, sandboxB, "echo 'org b reads this' > /tmp/b.txt")

        // As many uploads as the API and the host have slots, each into a FIFO nobody reads.
        const uploads = [1, 2, 3, 4].map((i) =>
          stalledUpload(env.base, env.a, sandboxA, `/tmp/fifo${i}`, { declared: 1024 * 1024, sent: 256 * 1024 })
        )
        // Past its share: two are answered at once, 429 with Retry-After; two stay held.
        const refused = yield* Effect.promise(() =>
          new Promise<Array<Ended>>((resolve) => {
            const first: Array<Ended> = []
            for (const u of uploads) {
              void u.ended.then((ended) => {
                first.push(ended)
                if (first.length === 2) resolve(first)
              })
            }
          })
        )
        for (const ended of refused) {
          expect(ended._tag === "Answer" && ended.status, JSON.stringify(ended)).toBe(429)
          expect(ended._tag === "Answer" && JSON.parse(ended.body).code).toBe("rate_limited")
          expect(ended._tag === "Answer" && Number(ended.retryAfter)).toBeGreaterThanOrEqual(1)
        }
        const held = uploads.filter((u) => !u.settled())
        expect(held.length).toBe(2)

        // Org B's read is served while org A's uploads still hold their slots.
        const read = yield* b("GET", `/v1/sandboxes/${sandboxB}/files?path=/tmp/b.txt`)
        const stillHeld = held.map((u) => u.settled())
        expect(read.status, read.text).toBe(200)
        expect(read.text).toBe("org b reads this\n")
        expect(stillHeld).toEqual([false, false])

        // Nothing moves: the idle timeout ends both, and their connections are closed.
        const stalled = yield* Effect.promise(() => Promise.all(held.map((u) => u.ended)))
        // Ended by the API (its connection closed), or, should the host's backstop act first,
        // answered 503: either way not left hanging.
        for (const ended of stalled) {
          expect(ended._tag === "Closed" || ended.status === 503, JSON.stringify(ended)).toBe(true)
        }
        // Their slots are free again (the host lets go of its side once it sees the cut, a
        // moment later): org A runs two transfers at once, its share, not a 429.
        const again = yield* eventually(
          Effect.all([1, 2].map(() => a("GET", `/v1/sandboxes/${sandboxA}/files?path=/tmp/a.txt`)), {
            concurrency: 2
          }),
          (rs) => rs.every((r) => r.status === 200)
        )
        expect(again.map((r) => [r.status, r.text])).toEqual([[200, "a\n"], [200, "a\n"]])
        // And no writer of theirs is left in the sandbox: a reader of each FIFO gets nothing.
        yield* eventually(
          a("POST", `/v1/sandboxes/${sandboxA}/exec`, {
            cmd: [
              "sh",
              "-c",
              "for i in 1 2 3 4; do cat /tmp/fifo$i & p=$!; sleep 0.3; kill $p; done 2>/dev/null | wc -c"
            ]
          }),
          (r) => r.json?.stdout?.trim() === "0"
        )
        yield* a("DELETE", `/v1/sandboxes/${sandboxA}`)
        yield* b("DELETE", `/v1/sandboxes/${sandboxB}`)
      }),
    240_000
  )
})
