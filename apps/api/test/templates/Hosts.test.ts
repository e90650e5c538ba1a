/**
 * Templates across hosts, through the API with real agents on this machine (each with a data
 * folder of its own): a template built on one agent starts on a second, which pulls the layers
 * from the image store and checks each against its digest (a layer whose bytes in the store were
 * replaced is refused: the sandbox ends in error); a build whose host dies ends `failed` instead
 * of staying `building`; a warm pool whose host dies is made again on a live host, which serves
 * the template's creates from it. About 75 s alone on a loaded 2-core machine (over the usual
 * 60 s): three agents start, two templates build, and two hosts must be seen down.
 */
import { expect, layer } from "@effect/vitest"
import { ensureObjectStore } from "@svc/bus/Objects"
import { ensureBucket } from "@svc/bus/Topology"
import { IMAGES_OBJECT_STORE } from "@svc/host-protocol/Images"
import { PoolEntry, poolKey, POOLS_BUCKET_SPEC } from "@svc/host-protocol/Pools"
import { HostRecord, HOSTS_BUCKET_SPEC } from "@svc/host-protocol/Protocol"
import { Duration, Effect, Schema } from "effect"
import * as Fs from "node:fs/promises"
import * as NodePath from "node:path"
import { eventually, makeHost, startAgent } from "../../testing/Sandboxes.ts"
import { api, Env, EnvLayer, waitState } from "../../testing/SandboxesEnv.ts"

const build = (body: Record<string, unknown>) =>
  Effect.gen(function*() {
    const res = yield* api("POST", "/v1/templates", { body })
    expect(res.status, res.text).toBe(202)
    return res.json.id as string
  })

const settled = (id: string) =>
  Effect.map(
    eventually(api("GET", `/v1/templates/${id}`), (r) => r.json?.state !== "building", Duration.seconds(120)),
    (r) => r.json as Record<string, any>
  )

/** The layers extracted on a host (its `<dataDir>/layers/<hex>` folders). */
const layersOn = (dataDir: string) =>
  Effect.promise(async () =>
    (await Fs.readdir(NodePath.join(dataDir, "layers")).catch(() => [] as Array<string>))
      .filter((name) => /^[0-9a-f]{64}$/.test(name))
      .sort()
  )

const sh = (id: string, script: string) =>
  Effect.map(api("POST", `/v1/sandboxes/${id}/exec`, { body: { cmd: ["sh", "-c", script] } }), (r) => {
    expect(r.status, r.text).toBe(200)
    return r.json as { exit_code: number; stdout: string }
  })

const decodeHost = Schema.decodeUnknownSync(Schema.fromJsonString(HostRecord))
const decodePool = Schema.decodeUnknownSync(Schema.fromJsonString(PoolEntry))
/** How many ready pool sandboxes of the template the host's record lists (what placement reads). */
const pooledOn = (hostId: string, templateId: string) =>
  Effect.gen(function*() {
    const kv = yield* ensureBucket(HOSTS_BUCKET_SPEC)
    const entry = yield* Effect.promise(() => kv.get(hostId))
    if (entry === null || entry.operation !== "PUT") return 0
    return decodeHost(new TextDecoder().decode(entry.value)).pools?.[templateId] ?? 0
  })
/** The host the template's `pools` entry names (what the hosts act on), if any. */
const poolHostOf = (templateId: string) =>
  Effect.gen(function*() {
    const kv = yield* ensureBucket(POOLS_BUCKET_SPEC)
    const entry = yield* Effect.promise(() => kv.get(poolKey(templateId)))
    if (entry === null || entry.operation !== "PUT") return undefined
    return decodePool(new TextDecoder().decode(entry.value)).hostId
  })

layer(EnvLayer, { excludeTestServices: true, timeout: 300_000 })("templates across hosts", (it) => {
  it.effect("a template built on one agent starts on a second one, which pulls its layers and verifies them", () =>
    Effect.gen(function*() {
      const env = yield* Env
      // Both built on the first agent (the only one so far).
      const app = yield* build({
        name: "moved",
        steps: [{ file: { path: "/srv/moved.txt", content: "built elsewhere\n" } }, { run: "echo ran > /srv/ran" }]
      })
      expect((yield* settled(app)).state).toBe("ready")
      const appLayers = yield* layersOn(env.dataDir)
      expect(appLayers.length).toBe(2)
      const tampered = yield* build({ name: "tampered", steps: [{ run: "echo two > /two" }] })
      expect((yield* settled(tampered)).state).toBe("ready")
      const tamperedLayer = (yield* layersOn(env.dataDir)).find((hex) => !appLayers.includes(hex))
      expect(tamperedLayer).toMatch(/^[0-9a-f]{64}$/)
      // Someone with access to the store replaces that layer's bytes under its name.
      const store = yield* ensureObjectStore(IMAGES_OBJECT_STORE)
      yield* Effect.promise(async () => {
        await store.delete(tamperedLayer!)
        await store.putBlob({ name: tamperedLayer! }, new TextEncoder().encode("not the layer"))
      })

      // The second agent: a data folder of its own, a region of its own so the sandboxes go there.
      const second = yield* makeHost
      yield* startAgent(second, { region: "second" })
      expect(yield* layersOn(second.dataDir)).toEqual([])

      const created = yield* api("POST", "/v1/sandboxes", { body: { template: "moved", region: "second" } })
      expect(created.status, created.text).toBe(201)
      const running = yield* waitState(created.json.id, "running", Duration.seconds(60))
      expect(running.hostId).toBe(second.hostId)
      const seen = yield* sh(created.json.id, "cat /srv/moved.txt /srv/ran")
      expect(seen.stdout).toBe("built elsewhere\nran\n")
      expect(yield* layersOn(second.dataDir)).toEqual(appLayers)

      const refused = yield* api("POST", "/v1/sandboxes", { body: { template: "tampered", region: "second" } })
      expect(refused.status, refused.text).toBe(201)
      const failed = yield* waitState(refused.json.id, "error", Duration.seconds(60))
      expect(failed.errorMessage).toBe(
        `host ${second.hostId} could not start the sandbox: the template's image could not be prepared on this host`
      )
      expect(yield* layersOn(second.dataDir)).toEqual(appLayers)
    }))

  it.effect("a build whose host dies ends failed, not building", () =>
    Effect.gen(function*() {
      // The roomiest host takes the build: this one, stopped mid-step.
      const doomed = yield* makeHost
      const agent = yield* startAgent(doomed, { region: "doomed", capacity: { ramMb: 1024 * 1024 } })
      const id = yield* build({ name: "orphan", steps: [{ run: "sleep 600" }] })
      const started = yield* eventually(
        api("GET", `/v1/templates/${id}/logs`),
        (r) => r.text.includes("step 1/1 run: sleep 600"),
        Duration.seconds(60)
      )
      expect(started.text).toContain(`on ${doomed.hostId}`)
      yield* agent.stop
      const failed = yield* settled(id)
      expect(failed).toMatchObject({ state: "failed", image: null, errorMessage: "the build's host went down" })
      // The log so far is kept.
      expect((yield* api("GET", `/v1/templates/${id}/logs`)).text).toContain("step 1/1 run: sleep 600")
    }))

  it.effect("a warm pool whose host dies is made on a live host, and the template's creates are served there", () =>
    Effect.gen(function*() {
      // The roomiest host builds (and so keeps the pool): this one, stopped once its pool is full.
      const doomed = yield* makeHost
      const agent = yield* startAgent(doomed, { region: "pool-doomed", capacity: { ramMb: 2 * 1024 * 1024 } })
      // The start_cmd writes when it ran: an entry's ran before the create that takes it.
      const id = yield* build({
        name: "pooled-away",
        steps: [{ file: { path: "/srv/pooled.txt", content: "pooled\n" } }],
        start_cmd: "date +%s > /tmp/started; sleep inf",
        ready_cmd: "test -f /tmp/started",
        pool_size: 2
      })
      expect((yield* settled(id)).state).toBe("ready")
      expect(yield* poolHostOf(id)).toBe(doomed.hostId)
      yield* eventually(pooledOn(doomed.hostId, id), (n) => n === 2, Duration.seconds(90))

      yield* agent.stop
      // Down (no heartbeat for 10 s, or its record gone); then the pool is put on a live host,
      // which makes it.
      const newHost = (yield* eventually(
        poolHostOf(id),
        (host) => host !== undefined && host !== doomed.hostId,
        Duration.seconds(60)
      ))!
      yield* eventually(pooledOn(newHost, id), (n) => n >= 1, Duration.seconds(90))

      // Seconds are what the image's date gives: a second and a half of margin tells an entry
      // booted before the create from one booted for it.
      yield* Effect.sleep(Duration.millis(1500))
      const before = Date.now()
      const created = yield* api("POST", "/v1/sandboxes", { body: { template: id } })
      expect(created.status, created.text).toBe(201)
      const running = yield* waitState(created.json.id, "running", Duration.seconds(60))
      expect(running.hostId).toBe(newHost)
      // From the pool: its start_cmd ran before the create, and it was ready at `running`.
      expect(running.runtime_ready).toBe(true)
      const started = Number((yield* sh(created.json.id, "cat /tmp/started")).stdout.trim()) * 1000
      expect(started).toBeLessThan(before - 1000)
      expect((yield* sh(created.json.id, "cat /srv/pooled.txt")).stdout).toBe("pooled\n")
      expect((yield* api("DELETE", `/v1/sandboxes/${created.json.id}`)).status).toBe(202)
      expect((yield* api("PATCH", `/v1/templates/${id}`, { body: { pool_size: 0 } })).status).toBe(200)
    }))
})
