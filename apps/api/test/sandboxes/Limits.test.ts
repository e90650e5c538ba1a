/**
 * Limits and dead sandboxes through the public API, on the real platform (Postgres, NATS, the
 * runtime role, real agents running bubblewrap): a sandbox whose init is killed from the host or
 * by the OOM killer goes to `error` with the reason and its event, and start brings it back; a
 * host with 2 cores takes many `cpu: 1` sandboxes (cpu is a cap, offered 8 times over) while its
 * memory is offered as it is.
 */
import { expect, layer } from "@effect/vitest"
import { Duration, Effect } from "effect"
import * as FsSync from "node:fs"
import * as NodePath from "node:path"
import { makeHost, startAgent } from "../../testing/Sandboxes.ts"
import { api, create, Env, EnvLayer, eventsOf, expectError, waitState } from "../../testing/SandboxesEnv.ts"

/** pid 1 of the sandbox as its host sees it (the driver's run record). */
const initPid = (dataDir: string, id: string) =>
  (JSON.parse(FsSync.readFileSync(NodePath.join(dataDir, "sandboxes", id, "run.json"), "utf8")) as { pid: number }).pid

/** The host notices within about a second; the bound only keeps a broken build from hanging. */
const NOTICED_WITHIN = Duration.seconds(10)

const exec = (id: string, cmd: ReadonlyArray<string>) => api("POST", `/v1/sandboxes/${id}/exec`, { body: { cmd } })

layer(EnvLayer, { excludeTestServices: true, timeout: 180_000 })("sandboxes API: limits and dead sandboxes", (it) => {
  it.effect("an init killed from the host: error with the signal and its event; start brings it back with its files", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const created = yield* create({ region: "local", ram_mb: 128 })
      const running = yield* waitState(created.id, "running")
      const put = yield* api("PUT", `/v1/sandboxes/${created.id}/files?path=/root/kept.txt`, {
        raw: new TextEncoder().encode("survives"),
        headers: { "content-type": "application/octet-stream" }
      })
      expect(put.status, put.text).toBe(204)

      process.kill(initPid(env.dataDir, created.id), "SIGKILL")
      const failed = yield* waitState(created.id, "error", NOTICED_WITHIN)
      expect(failed).toMatchObject({ state: "error", errorMessage: "killed by signal 9", agent_ready: false })
      const { events } = yield* eventsOf(created.id, "sandbox.state_updated:error")
      expect(events.at(-1)!.data).toEqual({
        sandbox_id: created.id,
        state: "error",
        internal_ip: running.internalIp,
        reason: "error"
      })
      expect(failed.stop_reason).toBe("error")
      expectError(yield* exec(created.id, ["true"]), 409, "conflict")

      const starting = yield* api("POST", `/v1/sandboxes/${created.id}/start`)
      expect(starting.status, starting.text).toBe(202)
      expect(starting.json).toMatchObject({ state: "starting", errorMessage: null })
      const back = yield* waitState(created.id, "running")
      expect(back.agent_ready).toBe(true)
      const read = yield* exec(created.id, ["cat", "/root/kept.txt"])
      expect(read.json).toMatchObject({ exit_code: 0, stdout: "survives" })
      const after = yield* eventsOf(created.id, "sandbox.state_updated:running")
      expect(after.labels.slice(-4)).toEqual([
        "sandbox.state_updated:running",
        "sandbox.state_updated:error",
        "sandbox.state_updated:starting",
        "sandbox.state_updated:running"
      ])
    }))

  it.effect("an init OOM-killed (an allocation past ram_mb): error 'out of memory at ram_mb 64', then start", () =>
    Effect.gen(function*() {
      const created = yield* create({ region: "local", ram_mb: 64 })
      yield* waitState(created.id, "running")
      // From inside: the init made the OOM killer's first choice (raising a score needs no
      // privilege), then eight dd's hold 16 MB each (blocked on a pipe nobody reads) under
      // ram_mb 64. The exec's own answer does not matter. (/dev/shm holds at most half of
      // ram_mb: it cannot get there.)
      yield* exec(created.id, [
        "sh",
        "-c",
        "echo 1000 > /proc/1/oom_score_adj && for i in 1 2 3 4 5 6 7 8; do dd if=/dev/zero bs=16M count=1 2>/dev/null | sleep 30 & done; wait"
      ])
      const failed = yield* waitState(created.id, "error", NOTICED_WITHIN)
      expect(failed.errorMessage).toBe("out of memory at ram_mb 64")
      // The init was the OOM killer's victim: `oom`, on the record and in the event.
      expect(failed.stop_reason).toBe("oom")
      const { events } = yield* eventsOf(created.id, "sandbox.state_updated:error")
      expect(events.at(-1)!.data.reason).toBe("oom")

      expect((yield* api("POST", `/v1/sandboxes/${created.id}/start`)).status).toBe(202)
      expect((yield* waitState(created.id, "running")).stop_reason).toBe(null)
      // A fresh run: /dev/shm is empty again.
      expect((yield* exec(created.id, ["ls", "/dev/shm"])).json).toMatchObject({ exit_code: 0, stdout: "" })
    }))

  it.effect("a host with 2 cores takes 16 cpu-1 sandboxes at once (cpu offered 8 times over), memory as it is", () =>
    Effect.gen(function*() {
      const region = `twocore${Date.now().toString(36)}`
      const host = yield* makeHost
      yield* startAgent(host, { region, capacity: { cpu: 2, ramMb: 4096, diskGb: 100 } })
      // Memory is not overcommitted: a sandbox asking for more than the host has finds no room.
      const tooBig = yield* api("POST", "/v1/sandboxes", { body: { region, cpu: 1, ram_mb: 4097 } })
      expect(tooBig.status, tooBig.text).toBe(503)
      expect(tooBig.json.code).toBe("no_capacity")
      const sandboxes = yield* Effect.forEach(Array.from({ length: 16 }), () => create({ region, cpu: 1, ram_mb: 128 }))
      for (const s of sandboxes) expect(s.hostId).toBe(host.hostId)
      yield* Effect.forEach(sandboxes, (s) => waitState(s.id, "running"), { concurrency: 4 })
      const busy = yield* exec(sandboxes[15]!.id, ["true"])
      expect(busy.json).toMatchObject({ exit_code: 0 })
      // The 17th cpu finds the offer used up.
      const more = yield* api("POST", "/v1/sandboxes", { body: { region, cpu: 1, ram_mb: 128 } })
      expect(more.status, more.text).toBe(503)
      // The tenant reads what it asked for, never the host or its free capacity.
      expect(more.json).toMatchObject({
        code: "no_capacity",
        error: `no live host in region ${region} has room for cpu 1, ram_mb 128, disk_gb 1`
      })
      yield* Effect.forEach(sandboxes, (s) => api("DELETE", `/v1/sandboxes/${s.id}`), { concurrency: 4 })
      yield* Effect.forEach(sandboxes, (s) => waitState(s.id, "deleted"), { concurrency: 4 })
    }))
})
