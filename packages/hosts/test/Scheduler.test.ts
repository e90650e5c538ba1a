/**
 * Placement: the pure choice (liveness, region, room, preference order, the reasons given), and
 * `place` under concurrency against a real Postgres: creates racing for the last room on a host
 * never overcommit it; the same for the create's split path (`placementLock`, then
 * `usageExpression` in a later statement, then `placeWith`).
 */
import { describe, expect, it, layer } from "@effect/vitest"
import type { HostRecord } from "@svc/host-protocol/Protocol"
import * as TestDatabase from "@svc/testing/TestDatabase"
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import { choose, place, placementLock, placeWith, type Usage, usageExpression } from "../src/Scheduler.ts"

const NOW = 1_800_000_000_000

const host = (hostId: string, patch: Partial<HostRecord> = {}): HostRecord => ({
  hostId,
  region: "local",
  datacenter: "dc",
  version: "1",
  capacity: { cpu: 4, ramMb: 4096, diskGb: 100 },
  endpoint: "http://127.0.0.1:1",
  token: "t",
  heartbeatAt: NOW - 1_000,
  startedAt: NOW - 60_000,
  ...patch
})

const ask = { region: null, cpu: 1, ramMb: 512, diskGb: 1 }
const picked = (p: ReturnType<typeof choose>) => (p._tag === "Placed" ? p.host.hostId : p.reason)

describe("Scheduler.choose", () => {
  it("no host, or only stale ones: no live host", () => {
    expect(picked(choose([], new Map(), ask, NOW))).toBe("no live host")
    expect(picked(choose([host("h1", { heartbeatAt: NOW - 10_001 })], new Map(), ask, NOW))).toBe("no live host")
    // Exactly at the limit is still live.
    expect(picked(choose([host("h1", { heartbeatAt: NOW - 10_000 })], new Map(), ask, NOW))).toBe("h1")
  })

  it("a region with no live host names the live regions", () => {
    const hosts = [
      host("h1", { region: "us" }),
      host("h2", { region: "local" }),
      host("h3", { region: "eu", heartbeatAt: 0 })
    ]
    expect(picked(choose(hosts, new Map(), { ...ask, region: "eu" }, NOW))).toBe(
      "no live host in region eu (live regions: local, us)"
    )
    expect(picked(choose(hosts, new Map(), { ...ask, region: "us" }, NOW))).toBe("h1")
  })

  it("prefers the host holding most of the image (its root and layers), among those with room", () => {
    const [l1, l2, l3] = ["1", "2", "3"].map((c) => c.repeat(64))
    const roomy = { cpu: 8, ramMb: 8192, diskGb: 10 }
    const hosts = [
      host("empty", { capacity: { cpu: 64, ramMb: 65_536, diskGb: 100 } }),
      host("some", { capacity: roomy, layers: [l1!], roots: ["debian"] }),
      host("all", { capacity: roomy, layers: [l1!, l2!, l3!] }),
      host("full", { capacity: { cpu: 1, ramMb: 256, diskGb: 1 }, layers: [l1!, l2!], roots: ["debian"] })
    ]
    const image = (root: string, layers: ReadonlyArray<string>) => ({ ...ask, image: { root, layers } })
    // `all` lacks only the debian root, `some` two layers; `full` has it all but no room.
    expect(picked(choose(hosts, new Map(), image("debian", [l1!, l2!]), NOW))).toBe("all")
    expect(picked(choose(hosts, new Map(), image("base", [l1!, l2!]), NOW))).toBe("all")
    expect(picked(choose(hosts, new Map(), image("debian", []), NOW))).toBe("some")
    // Nobody holds it: the most free memory, as without an image.
    expect(picked(choose(hosts, new Map(), image("base", ["4".repeat(64)]), NOW))).toBe("empty")
    expect(picked(choose(hosts, new Map(), ask, NOW))).toBe("empty")
  })

  it("prefers the most free memory, then cpu, then the id; any region when none is asked", () => {
    const hosts = [
      host("b", { region: "us", capacity: { cpu: 8, ramMb: 8192, diskGb: 10 } }),
      host("a", { capacity: { cpu: 8, ramMb: 8192, diskGb: 10 } }),
      host("c", { capacity: { cpu: 16, ramMb: 4096, diskGb: 10 } })
    ]
    expect(picked(choose(hosts, new Map(), ask, NOW))).toBe("a")
    const used = new Map<string, Usage>([["a", { cpu: 1, ramMb: 0, diskGb: 0 }]])
    expect(picked(choose(hosts, used, ask, NOW))).toBe("b")
    const busy = new Map<string, Usage>([["a", { cpu: 0, ramMb: 6000, diskGb: 0 }], ["b", {
      cpu: 0,
      ramMb: 6000,
      diskGb: 0
    }]])
    expect(picked(choose(hosts, busy, ask, NOW))).toBe("c")
  })

  it("room: usage is subtracted, an exact fit is taken, one unit over is refused (the most free host only in the detail)", () => {
    const hosts = [host("h1"), host("h2", { capacity: { cpu: 2, ramMb: 1024, diskGb: 5 } })]
    const usage = new Map<string, Usage>([
      ["h1", { cpu: 3, ramMb: 3584, diskGb: 99 }],
      ["h2", { cpu: 2, ramMb: 0, diskGb: 0 }]
    ])
    expect(picked(choose(hosts, usage, { region: null, cpu: 1, ramMb: 512, diskGb: 1 }, NOW))).toBe("h1")
    const refused = choose(hosts, usage, { region: null, cpu: 1, ramMb: 513, diskGb: 1 }, NOW)
    // The reason is the tenant's errorMessage: what it asked for, no host ids or capacities.
    expect(refused).toEqual({
      _tag: "Unplaceable",
      kind: "no_room",
      reason: "no live host has room for cpu 1, ram_mb 513, disk_gb 1",
      detail:
        "no live host has room for cpu 1, ram_mb 513, disk_gb 1 (most free: h2 with cpu 0, ram_mb 1024, disk_gb 5)"
    })
    expect(picked(choose(hosts, usage, { region: null, cpu: 2, ramMb: 1, diskGb: 1 }, NOW))).toMatch(
      /^no live host has room/
    )
    expect(picked(choose(hosts, usage, { region: "local", cpu: 1, ramMb: 512, diskGb: 2 }, NOW))).toMatch(
      /^no live host in region local has room for cpu 1, ram_mb 512, disk_gb 2/
    )
  })

  it("why it is unplaceable: the platform's capacity (no room, no live host at all) apart from the request's region or volumes' host", () => {
    const kind = (p: ReturnType<typeof choose>) => (p._tag === "Unplaceable" ? p.kind : "placed")
    const request = { region: null, cpu: 1, ramMb: 512, diskGb: 1 }
    const full = new Map<string, Usage>([["h1", { cpu: 64, ramMb: 0, diskGb: 0 }]])
    expect(kind(choose([host("h1")], full, request, NOW))).toBe("no_room")
    expect(kind(choose([], new Map(), request, NOW))).toBe("no_host")
    expect(kind(choose([host("h1")], new Map(), { ...request, region: "mars" }, NOW))).toBe("no_host_in_region")
    expect(kind(choose([host("h1")], new Map(), { ...request, hostId: "h9" }, NOW))).toBe("pinned_host_down")
  })
})

layer(TestDatabase.layer)("Scheduler.place", (it) => {
  it.effect("creates racing for one host's room: exactly as many as fit are placed", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* sql`INSERT INTO orgs (id, name) VALUES ('org_00000000000000000000000001', 'o')`
      const h = host("host_race", { capacity: { cpu: 4, ramMb: 100_000, diskGb: 100 }, heartbeatAt: Date.now() })
      const attempt = (i: number) =>
        sql.withTransaction(Effect.gen(function*() {
          const placement = yield* place([h], { region: null, cpu: 1, ramMb: 64, diskGb: 1 }, Date.now())
          const hostId = placement._tag === "Placed" ? placement.host.hostId : null
          yield* sql`
            INSERT INTO sandboxes (id, org_id, name, template_id, template_name, host_id, state, type, region, cpu, ram_mb,
              disk_gb, created_at, state_since, version)
            VALUES (${`sbx_race_${i}`}, 'org_00000000000000000000000001', 'n', 't', 'base', ${hostId}, 'pending',
              'persistent', 'local', 1, 64, 1, now(), now(), 1)`
          return hostId
        }))
      const results = yield* Effect.forEach(Array.from({ length: 10 }, (_, i) => i), attempt, { concurrency: 10 })
      expect(results.filter((r) => r === "host_race").length).toBe(4)
      // Deleted sandboxes free their room.
      yield* sql`UPDATE sandboxes SET state = 'deleted' WHERE id = (SELECT min(id) FROM sandboxes WHERE host_id = 'host_race')`
      expect(yield* attempt(10)).toBe("host_race")
      expect(yield* attempt(11)).toBe(null)
      // A stopped or failed sandbox keeps its disk but no cpu or memory.
      yield* sql`UPDATE sandboxes SET state = 'stopped' WHERE id = (SELECT min(id) FROM sandboxes WHERE host_id = 'host_race' AND state = 'pending')`
      yield* sql`UPDATE sandboxes SET state = 'error' WHERE id = (SELECT min(id) FROM sandboxes WHERE host_id = 'host_race' AND state = 'pending')`
      expect(yield* attempt(12)).toBe("host_race")
      expect(yield* attempt(13)).toBe("host_race")
      expect(yield* attempt(14)).toBe(null)
      // Six sandboxes hold disk (the stopped and failed ones too): 6 GB is full, 7 GB has room.
      const withDisk = (diskGb: number) =>
        sql.withTransaction(
          place([{ ...h, capacity: { cpu: 100, ramMb: 100_000, diskGb } }], {
            region: null,
            cpu: 1,
            ramMb: 64,
            diskGb: 1
          }, Date.now())
        )
      expect((yield* withDisk(6))._tag).toBe("Unplaceable")
      expect((yield* withDisk(7))._tag).toBe("Placed")
    }))

  it.effect("the split path (placement lock in one statement, usage read by a later one): racing creates never overcommit", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* sql`INSERT INTO orgs (id, name) VALUES ('org_00000000000000000000000002', 'o')`
      const h = host("host_split", { capacity: { cpu: 3, ramMb: 100_000, diskGb: 100 }, heartbeatAt: Date.now() })
      const other = host("host_elsewhere", { region: "eu", heartbeatAt: Date.now() })
      const attempt = (i: number) =>
        sql.withTransaction(Effect.gen(function*() {
          const now = Date.now()
          yield* sql`SELECT ${placementLock(sql)}`
          const [row] = yield* sql<{ readonly usage: unknown }>`
            SELECT ${usageExpression(sql, [h, other], "local", now)} AS usage`
          const placement = yield* placeWith(
            [h, other],
            row!.usage,
            { region: "local", cpu: 1, ramMb: 64, diskGb: 1 },
            now
          )
          const hostId = placement._tag === "Placed" ? placement.host.hostId : null
          yield* sql`
            INSERT INTO sandboxes (id, org_id, name, template_id, template_name, host_id, state, type, region, cpu, ram_mb,
              disk_gb, created_at, state_since, version)
            VALUES (${`sbx_split_${i}`}, 'org_00000000000000000000000002', 'n', 't', 'base', ${hostId}, 'pending',
              'persistent', 'local', 1, 64, 1, now(), now(), 1)`
          return hostId
        }))
      const results = yield* Effect.forEach(Array.from({ length: 8 }, (_, i) => i), attempt, { concurrency: 8 })
      expect(results.filter((r) => r === "host_split").length).toBe(3)
      // A stopped sandbox gives its cpu back: the next one fits, the one after does not.
      yield* sql`UPDATE sandboxes SET state = 'stopped' WHERE id = (SELECT min(id) FROM sandboxes WHERE host_id = 'host_split')`
      expect(yield* attempt(8)).toBe("host_split")
      expect(yield* attempt(9)).toBe(null)
      // No live host in the region: nothing to read, the request's own reason.
      const none = yield* placeWith([other], [], { region: "local", cpu: 1, ramMb: 64, diskGb: 1 }, Date.now())
      expect(picked(none)).toBe("no live host in region local (live regions: eu)")
    }))
})
