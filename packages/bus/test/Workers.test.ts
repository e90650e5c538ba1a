/**
 * Worker heartbeats in the `workers` KV on a real NATS: a process is listed while it beats,
 * gone once its layer closes, and records that are stale, from the future or not records at
 * all are never listed.
 */
import { expect, layer } from "@effect/vitest"
import { Nats } from "@svc/bus/Nats"
import { ensureBucket } from "@svc/bus/Topology"
import * as TestNats from "@svc/testing/TestNats"
import { Effect, Layer } from "effect"
import { listWorkers, WORKER_FRESH_MS, WorkerHeartbeat, WORKERS_BUCKET } from "../src/Workers.ts"

layer(TestNats.layer, { excludeTestServices: true })("worker heartbeats", (it) => {
  it.effect("listed while beating, with its role's prefix; removed when it stops", () =>
    Effect.gen(function*() {
      const nats = yield* Nats
      const names = Effect.map(listWorkers(), (ws) => ws.map((w) => w.name))
      yield* Effect.scoped(Effect.gen(function*() {
        yield* Layer.build(Layer.mergeAll(
          WorkerHeartbeat.layer("runtime", { name: "runtime-a" }),
          WorkerHeartbeat.layer("dispatcher", { name: "dispatcher-a", version: "9.9.9" }),
          WorkerHeartbeat.layer("api", { name: "api a/1" })
        ))
        const workers = yield* listWorkers()
        expect(workers.map(({ seenAt: _, ...w }) => w)).toEqual([
          { name: "api a/1", script_name: "api", version: expect.any(String), prefix: "", cells: null },
          {
            name: "dispatcher-a",
            script_name: "dispatcher",
            version: "9.9.9",
            prefix: `${nats.prefix}.whd.`,
            cells: null
          },
          {
            name: "runtime-a",
            script_name: "runtime",
            version: expect.any(String),
            prefix: `${nats.prefix}.actor.`,
            cells: null
          }
        ])
      }))
      expect(yield* names).toEqual([])
    }))

  it.effect("stale records, records from the future and garbage are not listed", () =>
    Effect.gen(function*() {
      const kv = yield* ensureBucket({ name: WORKERS_BUCKET, history: 1, ttlMs: 60_000 })
      const record = (name: string, seenAt: number) =>
        JSON.stringify({ name, script_name: "runtime", version: "1", prefix: "", cells: null, seenAt })
      yield* Effect.promise(() => kv.put("old", record("old", Date.now() - WORKER_FRESH_MS - 1_000)))
      yield* Effect.promise(() => kv.put("future", record("future", Date.now() + 10 * WORKER_FRESH_MS)))
      yield* Effect.promise(() => kv.put("fresh", record("fresh", Date.now())))
      yield* Effect.promise(() => kv.put("junk", "not json"))
      yield* Effect.promise(() =>
        kv.put("shape", JSON.stringify({ name: "x", script_name: "nope", seenAt: Date.now() }))
      )
      expect((yield* listWorkers()).map((w) => w.name)).toEqual(["fresh"])
    }))
})
