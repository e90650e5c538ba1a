/**
 * The host's own share per org, seen through the API (the real API and agent processes): where
 * the API would let an org run more transfers than the host does, the host's 429 reaches the
 * client as the API's own `rate_limited` (with Retry-After), for a transfer the host splices (a
 * body of 1 MiB or more) and for one it takes plainly alike, and the refused upload wrote
 * nothing. The API's own shares are `Fairness.test.ts`'s.
 */
import { expect, layer } from "@effect/vitest"
import { SecretBox } from "@svc/crypto/SecretBox"
import * as Runtime from "@svc/runtime/Runtime"
import * as TestDatabase from "@svc/testing/TestDatabase"
import * as TestNats from "@svc/testing/TestNats"
import { Context, Effect, Layer } from "effect"
import { call, eventually, Identity } from "../../testing/Sandboxes.ts"
import { spawnPlatform } from "../support/Roles.ts"
import { stalledUpload } from "../support/Uploads.ts"

class Env extends Context.Service<Env, { readonly base: string; readonly token: string }>()(
  "HostShares.test/Env"
) {}

const EnvLayer = Layer.effect(
  Env,
  Effect.gen(function*() {
    const { base } = yield* spawnPlatform({
      agent: { SVC_AGENT_MAX_TRANSFERS: "4", SVC_AGENT_MAX_TRANSFERS_PER_ORG: "1" },
      api: { SVC_API_MAX_TRANSFERS: "8", SVC_API_MAX_TRANSFERS_PER_ORG: "8", SVC_API_TRANSFER_IDLE_TIMEOUT: "30s" }
    })
    const identity = yield* Identity
    return { base, token: (yield* identity.org("host-shares")).token }
  })
).pipe(
  Layer.provideMerge(Layer.mergeAll(Runtime.make({ supervisor: { intervalMs: 200 } }), Identity.layer)),
  Layer.provideMerge(Layer.mergeAll(TestDatabase.layerWithUrl, TestNats.layer, SecretBox.layer))
)

layer(EnvLayer, { excludeTestServices: true, timeout: 180_000 })("the host's transfer share through the API", (it) => {
  it.effect("past the host's share of an org, a spliced and a plain upload are the API's 429 rate_limited, and write nothing", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const api = (method: string, path: string, body?: unknown) =>
        call(env.base, method, path, { token: env.token, ...(body !== undefined ? { body } : {}) })
      const created = yield* api("POST", "/v1/sandboxes", { ram_mb: 256 })
      expect(created.status, created.text).toBe(201)
      const id = created.json.id as string
      yield* eventually(api("GET", `/v1/sandboxes/${id}`), (r) => r.json?.state === "running")
      expect((yield* api("POST", `/v1/sandboxes/${id}/exec`, { cmd: ["mkfifo", "/tmp/fifo"] })).status).toBe(200)

      // The org's one slot on the host: a spliced upload into a FIFO nobody reads, held.
      const held = stalledUpload(env.base, env.token, id, "/tmp/fifo", { declared: 8 * 1024 * 1024, sent: 64 * 1024 })
      yield* eventually(
        // Its writer inside, waiting for a reader of the FIFO.
        api("POST", `/v1/sandboxes/${id}/exec`, { cmd: ["sh", "-c", "ps -o args | grep -c '[/]tmp/fifo'"] }),
        (r) => Number(r.json?.stdout?.trim()) >= 1
      )
      // Past it, whatever the path: the host's 429, as the API's, before any byte is written.
      for (const declared of [4 * 1024 * 1024, 128 * 1024]) {
        const refused = stalledUpload(env.base, env.token, id, `/tmp/refused-${declared}`, {
          declared,
          sent: 64 * 1024
        })
        const answer = yield* Effect.promise(() => refused.ended)
        expect(answer._tag === "Answer" && answer.status, `${declared}: ${JSON.stringify(answer)}`).toBe(429)
        expect(answer._tag === "Answer" && JSON.parse(answer.body).code).toBe("rate_limited")
        expect(answer._tag === "Answer" && Number(answer.retryAfter)).toBeGreaterThanOrEqual(1)
        refused.destroy()
      }
      const listed = yield* api("POST", `/v1/sandboxes/${id}/exec`, { cmd: ["ls", "-A", "/tmp"] })
      expect(listed.json.stdout).toBe("fifo\n")
      held.destroy()
      yield* api("DELETE", `/v1/sandboxes/${id}`)
    }))
})
