/**
 * Images on every host, through the API with real agents: layers no template refers to are
 * removed from the image store, from the hosts and from the layer cache (`SVC_IMAGE_GC_GRACE`
 * 0 here), while a layer a live template still lists stays; and the scheduler places a
 * template's sandbox on the host that holds its image rather than on a roomier one without it.
 */
import { expect, layer } from "@effect/vitest"
import { ensureObjectStore } from "@svc/bus/Objects"
import { ensureBucket } from "@svc/bus/Topology"
import { SecretBox } from "@svc/crypto/SecretBox"
import { IMAGES_OBJECT_STORE } from "@svc/host-protocol/Images"
import { HostRecord, HOSTS_BUCKET_SPEC } from "@svc/host-protocol/Protocol"
import * as Runtime from "@svc/runtime/Runtime"
import * as TestDatabase from "@svc/testing/TestDatabase"
import * as TestNats from "@svc/testing/TestNats"
import { ConfigProvider, Context, Duration, Effect, Layer, Schema } from "effect"
import * as Fs from "node:fs/promises"
import * as NodePath from "node:path"
import { call, EventLog, eventually, Identity, makeHost, serveApi, startAgent } from "../../testing/Sandboxes.ts"

class Env extends Context.Service<Env, {
  readonly base: string
  readonly token: string
  readonly hostId: string
  readonly dataDir: string
}>()("test/TemplatesImages/Env") {}

const EnvLayer = Layer.effect(
  Env,
  Effect.gen(function*() {
    const base = yield* serveApi
    const host = yield* makeHost
    yield* startAgent(host, { region: "local" })
    const identity = yield* Identity
    const org = yield* identity.org("templates-images")
    return { base, token: org.token, hostId: host.hostId, dataDir: host.dataDir }
  })
).pipe(
  Layer.provideMerge(Layer.mergeAll(Runtime.make({ supervisor: { intervalMs: 200 } }), Identity.layer, EventLog.layer)),
  Layer.provideMerge(Layer.mergeAll(TestDatabase.layerWithUrl, TestNats.layer, SecretBox.layer)),
  // The platform's setting, for the API and the runtime alike (both run the templates' loops).
  Layer.provide(ConfigProvider.layerAdd(ConfigProvider.fromUnknown({ SVC_IMAGE_GC_GRACE: "0s" }), { asPrimary: true }))
)

const api = (method: string, path: string, body?: unknown) =>
  Effect.flatMap(
    Effect.service(Env),
    (env) => call(env.base, method, path, { token: env.token, ...(body !== undefined ? { body } : {}) })
  )

const build = (body: Record<string, unknown>) =>
  Effect.gen(function*() {
    const res = yield* api("POST", "/v1/templates", body)
    expect(res.status, res.text).toBe(202)
    const id = res.json.id as string
    const done = yield* eventually(
      api("GET", `/v1/templates/${id}`),
      (r) => r.json?.state !== "building",
      Duration.seconds(120)
    )
    expect(done.json.state, done.text).toBe("ready")
    return id
  })

const waitState = (id: string, state: string) =>
  Effect.map(
    eventually(api("GET", `/v1/sandboxes/${id}`), (r) => r.json?.state === state || r.json?.state === "error"),
    (r) => {
      expect(r.json.state, r.text).toBe(state)
      return r.json as Record<string, any>
    }
  )

const layersOn = (dataDir: string) =>
  Effect.promise(async () =>
    (await Fs.readdir(NodePath.join(dataDir, "layers")).catch(() => [] as Array<string>))
      .filter((name) => /^[0-9a-f]{64}$/.test(name))
      .sort()
  )

const stored = Effect.gen(function*() {
  const store = yield* ensureObjectStore(IMAGES_OBJECT_STORE)
  const listed = yield* Effect.promise(() => store.list())
  return listed.filter((o) => !o.deleted).map((o) => o.name).sort()
})

const decodeHost = Schema.decodeUnknownSync(Schema.fromJsonString(HostRecord))
const hostRecord = (hostId: string) =>
  Effect.gen(function*() {
    const kv = yield* ensureBucket(HOSTS_BUCKET_SPEC)
    const entry = yield* Effect.promise(() => kv.get(hostId))
    return decodeHost(entry!.string())
  })

layer(EnvLayer, { excludeTestServices: true, timeout: 300_000 })("images on every host", (it) => {
  it.effect("layers no template refers to leave the store, the hosts and the layer cache; referenced ones stay", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const steps = [{ run: "echo one > /one" }, { run: "echo two > /two" }]
      const first = yield* build({ name: "first", steps })
      const firstLayers = yield* layersOn(env.dataDir)
      expect(firstLayers.length).toBe(2)
      // A template built on it lists its layers too, plus one of its own.
      const second = yield* build({ name: "second", base: "first", steps: [{ run: "echo three > /three" }] })
      const allLayers = yield* layersOn(env.dataDir)
      expect(allLayers.length).toBe(3)
      expect(yield* stored).toEqual(allLayers)

      // In use: a sandbox of `second` runs; its template cannot go, `first` can.
      const sandbox = yield* api("POST", "/v1/sandboxes", { template: "second" })
      yield* waitState(sandbox.json.id, "running")
      expect((yield* api("DELETE", `/v1/templates/${first}`)).status).toBe(200)
      // Nothing is collected: `second` still lists every layer.
      yield* Effect.sleep(Duration.seconds(3))
      expect(yield* stored).toEqual(allLayers)
      expect(yield* layersOn(env.dataDir)).toEqual(allLayers)
      const seen = yield* api("POST", `/v1/sandboxes/${sandbox.json.id}/exec`, { cmd: ["cat", "/one", "/three"] })
      expect(seen.json.stdout).toBe("one\nthree\n")

      yield* api("DELETE", `/v1/sandboxes/${sandbox.json.id}`)
      yield* waitState(sandbox.json.id, "deleted")
      expect((yield* api("DELETE", `/v1/templates/${second}`)).status).toBe(200)
      // No template refers to any of them now: gone from the store, then from the host.
      yield* eventually(stored, (names) => allLayers.every((hex) => !names.includes(hex)), Duration.seconds(30))
      yield* eventually(layersOn(env.dataDir), (names) => names.length === 0, Duration.seconds(30))

      // The layer cache forgot them: the same steps run again, their new layers in the store.
      const again = yield* build({ name: "again", steps })
      const log = (yield* api("GET", `/v1/templates/${again}/logs`)).text
      expect(log).toMatch(/step 1\/2 run: echo one/)
      expect(log).not.toMatch(/cached/)
      const rebuilt = yield* layersOn(env.dataDir)
      expect(rebuilt.length).toBe(2)
      expect(yield* stored).toEqual(rebuilt)
    }))

  it.effect("the scheduler places a template's sandbox on the host that holds its image", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const app = yield* build({ name: "placed", steps: [{ run: "echo here > /here" }] })
      const imageLayers = yield* layersOn(env.dataDir)
      // The first host says it holds them.
      yield* eventually(
        hostRecord(env.hostId),
        (record) => imageLayers.every((hex) => (record.layers ?? []).includes(hex)),
        Duration.seconds(20)
      )
      // A second host in the same region, with far more room and no image.
      const roomy = yield* makeHost
      yield* startAgent(roomy, { region: "local", capacity: { ramMb: 1024 * 1024 } })

      const templated = yield* api("POST", "/v1/sandboxes", { template: app })
      expect(templated.status, templated.text).toBe(201)
      expect((yield* waitState(templated.json.id, "running")).hostId).toBe(env.hostId)
      // Without an image, room decides.
      const plain = yield* api("POST", "/v1/sandboxes", {})
      expect((yield* waitState(plain.json.id, "running")).hostId).toBe(roomy.hostId)
      expect(yield* layersOn(roomy.dataDir)).toEqual([])
    }))
})
