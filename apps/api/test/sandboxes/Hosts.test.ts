/**
 * Placement and lost hosts through the public API: no live host in the region (created, then
 * error naming the live regions), a full host and a burst beyond the room (refused at once with
 * 503 `no_capacity`, nothing created), a
 * host that goes down or never answers. Fake hosts (a `hosts` record nobody serves) stand in;
 * the supervisor of the runtime role moves the sandboxes to `error` with the reason.
 */
import { expect, layer } from "@effect/vitest"
import { Duration, Effect } from "effect"
import { fakeHost } from "../../testing/Sandboxes.ts"
import { api, create, EnvLayer, eventsOf, TRANSITION_TIMEOUT_MS, waitState } from "../../testing/SandboxesEnv.ts"

layer(EnvLayer, { excludeTestServices: true, timeout: 180_000 })("sandboxes API: placement and lost hosts", (it) => {
  it.effect("no live host in the region: the sandbox ends in error with the reason, never stuck pending", () =>
    Effect.gen(function*() {
      const created = yield* create({ region: "mars" })
      expect(created).toMatchObject({ state: "pending", hostId: null, region: "mars", datacenter: null })
      const failed = yield* waitState(created.id, "error")
      expect(failed.errorMessage).toMatch(/^no live host in region mars \(live regions: .*local.*\)$/)
      const { labels, events } = yield* eventsOf(created.id, "sandbox.state_updated:error")
      expect(labels).toEqual(["sandbox.state_updated:error"])
      expect(events[0]!.data).toEqual({ sandbox_id: created.id, state: "error", internal_ip: null, reason: "error" })
      // Deleting one that never reached a host: deleted at once.
      const gone = yield* api("DELETE", `/v1/sandboxes/${created.id}`)
      expect(gone.json.state).toBe("deleted")
      const after = yield* eventsOf(created.id, "sandbox.deleted")
      expect(after.events.at(-1)!.data).toEqual({ sandbox_id: created.id, host_id: null })
    }))

  it.effect("a full host: the next sandbox that does not fit is refused naming what it asked for, not the host", () =>
    Effect.gen(function*() {
      const region = `full${Date.now().toString(36)}`
      const host = yield* fakeHost({ region, capacity: { cpu: 2, ramMb: 1024, diskGb: 10 } })
      const first = yield* create({ region, cpu: 2, ram_mb: 512 })
      expect(first.hostId).toBe(host.hostId)
      const second = yield* api("POST", "/v1/sandboxes", { body: { region, cpu: 1, ram_mb: 256 } })
      expect(second.status, second.text).toBe(503)
      // Which host came closest and what it has free is other tenants' business: the log's only.
      expect(second.json).toEqual({
        code: "no_capacity",
        error: `no live host in region ${region} has room for cpu 1, ram_mb 256, disk_gb 1`,
        retry_after_s: 1
      })
      expect(second.text).not.toContain(host.hostId)
    }))

  it.effect("a burst beyond the hosts' room: each create is placed (201 on the host) or refused (503), never over-admitted", () =>
    Effect.gen(function*() {
      const region = `burst${Date.now().toString(36)}`
      // Disk is the bound: every sandbox not deleted holds its disk, so one that ends in error
      // meanwhile (the fake host never starts them) frees no room during the burst.
      const host = yield* fakeHost({ region, capacity: { cpu: 64, ramMb: 64 * 1024, diskGb: 4 } })
      const answers = yield* Effect.forEach(
        Array.from({ length: 12 }),
        () => api("POST", "/v1/sandboxes", { body: { region, cpu: 1, ram_mb: 256, disk_gb: 1 } }),
        { concurrency: "unbounded" }
      )
      const placed = answers.filter((a) => a.status === 201)
      const refused = answers.filter((a) => a.status === 503)
      expect(placed.length + refused.length, answers.map((a) => a.text).join("\n")).toBe(answers.length)
      // Room for exactly four: the placements reserve it one at a time.
      expect(placed.length).toBe(4)
      for (const a of placed) expect(a.json).toMatchObject({ hostId: host.hostId })
      for (const a of refused) {
        expect(a.json).toMatchObject({ code: "no_capacity", retry_after_s: 1 })
        expect(a.headers.get("retry-after")).toBe("1")
      }
      // Only the placed ones exist.
      const listed = yield* api("GET", "/v1/sandboxes?paginated=false")
      const rows = listed.json.rows as Array<{ id: string; region: string }>
      const inRegion = rows.filter((s) => s.region === region)
      expect(inRegion.map((s) => s.id).sort()).toEqual(placed.map((a) => a.json.id).sort())
    }))

  it.effect("a host that goes down: its sandboxes end in error; deleting one is immediate", () =>
    Effect.gen(function*() {
      const region = `down${Date.now().toString(36)}`
      const gone = yield* fakeHost({ region })
      const a = yield* create({ region })
      yield* waitState(a.id, "starting")
      yield* gone.remove
      const failed = yield* waitState(a.id, "error")
      expect(failed.errorMessage).toBe(`host ${gone.hostId} is down (its record is gone)`)

      const stale = yield* fakeHost({ region: `${region}s` })
      const b = yield* create({ region: `${region}s` })
      yield* waitState(b.id, "starting")
      yield* stale.staleBy(60_000)
      const failedB = yield* waitState(b.id, "error")
      expect(failedB.errorMessage).toMatch(new RegExp(`^host ${stale.hostId} is down \\(last heartbeat \\d{4}-.*Z\\)$`))

      const deleted = yield* api("DELETE", `/v1/sandboxes/${b.id}`)
      expect(deleted.status).toBe(202)
      expect(deleted.json.state).toBe("deleted")
      const { labels, events } = yield* eventsOf(b.id, "sandbox.deleted")
      expect(labels).toEqual([
        "sandbox.state_updated:starting",
        "sandbox.state_updated:error",
        "sandbox.state_updated:deleted",
        "sandbox.deleted"
      ])
      expect(events.at(-1)!.data).toEqual({ sandbox_id: b.id, host_id: stale.hostId })
    }))

  it.effect("a host that never answers: the sandbox ends in error after the transition timeout", () =>
    Effect.gen(function*() {
      const region = `mute${Date.now().toString(36)}`
      yield* fakeHost({ region })
      const created = yield* create({ region })
      yield* waitState(created.id, "starting")
      const failed = yield* waitState(created.id, "error", Duration.millis(TRANSITION_TIMEOUT_MS * 4))
      expect(failed.errorMessage).toBe(`the sandbox did not start within ${TRANSITION_TIMEOUT_MS / 1000} s`)
    }))
})
