/**
 * The hosts' mirror (`src/Hosts.ts`) against a real NATS: it reads what agents put in the hosts
 * bucket, and a record it cannot take as a host record (a malformed id, a missing field) is not
 * read, so that no answer built from it fails to encode (a create once answered 500 on such a
 * record).
 */
import { expect, layer } from "@effect/vitest"
import { ensureBucket } from "@svc/bus/Topology"
import { makeHostId } from "@svc/domain/Ids"
import { type HostRecord, HOSTS_BUCKET_SPEC } from "@svc/host-protocol/Protocol"
import * as TestNats from "@svc/testing/TestNats"
import { Effect, Layer, Option } from "effect"
import { Hosts } from "../src/Hosts.ts"

const record = (hostId: string): HostRecord => ({
  hostId,
  region: "local",
  datacenter: "dc",
  version: "1",
  capacity: { cpu: 4, ramMb: 4096, diskGb: 100 },
  endpoint: "http://127.0.0.1:1",
  token: "t",
  heartbeatAt: Date.now(),
  startedAt: Date.now()
})

layer(Layer.provideMerge(Hosts.layer, TestNats.layer))("Hosts", (it) => {
  it.effect("reads the agents' records and leaves out what is not a host record", () =>
    Effect.gen(function*() {
      const kv = yield* ensureBucket(HOSTS_BUCKET_SPEC)
      const good = makeHostId()
      const put = (key: string, value: unknown) => Effect.promise(() => kv.put(key, JSON.stringify(value)))
      yield* put(good, record(good))
      yield* put("host_bench_a", record("host_bench_a"))
      yield* put("host_x", { hostId: "host_x" })
      const hosts = yield* Hosts
      yield* hosts.refresh
      expect((yield* hosts.all).map((h) => h.hostId)).toEqual([good])
      expect((yield* hosts.live).map((h) => h.hostId)).toEqual([good])
      expect(Option.isNone(yield* hosts.get("host_bench_a"))).toBe(true)
      expect(yield* hosts.isLive("host_bench_a")).toBe(false)
      expect(yield* hosts.isLive(good)).toBe(true)
    }))
})
