/**
 * GET /v1/health (a real Postgres and NATS behind it) against a raw node:http hello-world, both
 * served by this process and loaded from a second one at 32 connections. Target: ratio >= 0.5.
 *   npm run bench health     (or: node bench/health.ts)
 */
import * as Server from "@svc/api/Server"
import { startNats, startPostgres } from "@svc/local-servers/Servers"
import * as TestDatabase from "@svc/testing/TestDatabase"
import { serve } from "@svc/testing/TestHttp"
import * as TestNats from "@svc/testing/TestNats"
import { useTestEncryptionKeys } from "@svc/testing/TestSecrets"
import { Duration, Effect, Layer, Result } from "effect"
import { HttpRouter } from "effect/http"
import { parseDuration } from "../packages/config/src/Env.ts"
import { SecretBox } from "../packages/crypto/src/SecretBox.ts"
import { compare, load, rawServer } from "./lib/load.ts"

const CONNECTIONS = 32
/** BENCH_DURATION: run length, a duration in the platform's format (`3s`, `500ms`). */
const DURATION_MS = Duration.toMillis(Result.getOrThrow(parseDuration(process.env.BENCH_DURATION ?? "3s")))
const RUNS = Number(process.env.BENCH_RUNS ?? 3)

const [nats, pg] = await Promise.all([startNats(), startPostgres()])
process.env.SVC_TEST_NATS_URL = nats.url
process.env.SVC_TEST_DATABASE_URL = pg.url
useTestEncryptionKeys()

await Effect.runPromise(
  Effect.gen(function*() {
    const api = HttpRouter.serve(Server.Routes, { disableLogger: true, disableListenLog: true }).pipe(
      Layer.provide(Layer.mergeAll(TestDatabase.layer, TestNats.layer, SecretBox.layer))
    )
    const base = yield* serve(api)
    const raw = yield* Effect.acquireRelease(Effect.promise(rawServer), (s) => Effect.promise(s.close))
    // Warm-up: JIT, pool connections.
    yield* Effect.promise(() => load({ url: `${base}/v1/health`, connections: CONNECTIONS, durationMs: 1000 }))
    yield* Effect.promise(() => load({ url: raw.url, connections: CONNECTIONS, durationMs: 1000 }))
    yield* Effect.promise(() =>
      compare({
        title: `GET /v1/health vs raw node:http, ${CONNECTIONS} connections, ${DURATION_MS} ms per run`,
        runs: RUNS,
        baseline: () => load({ url: raw.url, connections: CONNECTIONS, durationMs: DURATION_MS }),
        subject: () => load({ url: `${base}/v1/health`, connections: CONNECTIONS, durationMs: DURATION_MS }),
        target: 0.5
      })
    )
  }).pipe(Effect.scoped)
)
await Promise.all([nats.stop(), pg.close()])
