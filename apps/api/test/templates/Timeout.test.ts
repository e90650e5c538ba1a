/**
 * A template build past `SVC_TEMPLATE_BUILD_TIMEOUT` (2 s here): `failed` with the reason, its
 * build sandbox gone from the host, `template.state_updated` sent.
 */
import { expect, layer } from "@effect/vitest"
import { SecretBox } from "@svc/crypto/SecretBox"
import * as Runtime from "@svc/runtime/Runtime"
import * as TestDatabase from "@svc/testing/TestDatabase"
import * as TestNats from "@svc/testing/TestNats"
import { ConfigProvider, Context, Duration, Effect, Layer } from "effect"
import * as Fs from "node:fs/promises"
import * as NodePath from "node:path"
import { call, EventLog, eventually, Identity, makeHost, serveApi, startAgent } from "../../testing/Sandboxes.ts"

class Env extends Context.Service<Env, {
  readonly base: string
  readonly token: string
  readonly dataDir: string
}>()("test/TemplatesTimeout/Env") {}

const EnvLayer = Layer.effect(
  Env,
  Effect.gen(function*() {
    const base = yield* serveApi
    const host = yield* makeHost
    yield* startAgent(host, { region: "local" })
    const identity = yield* Identity
    const org = yield* identity.org("templates-timeout")
    return { base, token: org.token, dataDir: host.dataDir }
  })
).pipe(
  Layer.provideMerge(Layer.mergeAll(Runtime.make({ supervisor: { intervalMs: 200 } }), Identity.layer, EventLog.layer)),
  Layer.provideMerge(Layer.mergeAll(TestDatabase.layerWithUrl, TestNats.layer, SecretBox.layer)),
  // The platform's setting, for the API and the runtime alike (both run the templates' loops).
  Layer.provide(
    ConfigProvider.layerAdd(ConfigProvider.fromUnknown({ SVC_TEMPLATE_BUILD_TIMEOUT: "2s" }), { asPrimary: true })
  )
)

layer(EnvLayer, { excludeTestServices: true, timeout: 120_000 })("templates: build time limit", (it) => {
  it.effect("a build past SVC_TEMPLATE_BUILD_TIMEOUT fails with the reason and leaves no build sandbox", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const made = yield* call(env.base, "POST", "/v1/templates", {
        token: env.token,
        body: { name: "slow", steps: [{ run: "echo started; sleep 60" }] }
      })
      expect(made.status, made.text).toBe(202)
      const id = made.json.id as string
      const failed = yield* eventually(
        call(env.base, "GET", `/v1/templates/${id}`, { token: env.token }),
        (r) => r.json?.state !== "building",
        Duration.seconds(60)
      )
      expect(failed.json).toMatchObject({ state: "failed", image: null })
      expect(failed.json.errorMessage).toMatch(
        /^(step 1\/1 \(run\) ran past the build's time limit|the build ran past its time limit \(2 s\))$/
      )
      const log = yield* EventLog
      const events = yield* eventually(
        Effect.map(log.all, (all) => all.filter((e) => e.event === "template.state_updated")),
        (es) => es.length > 0
      )
      expect(events[0]!.data).toEqual({ template_id: id, state: "failed", image: null })
      // The agent cut it too: no build sandbox stays on the host.
      const left = yield* eventually(
        Effect.promise(() => Fs.readdir(NodePath.join(env.dataDir, "sandboxes")).catch(() => [] as Array<string>)),
        (names) => !names.some((name) => name.startsWith("build-")),
        Duration.seconds(30)
      )
      expect(left.filter((name) => name.startsWith("build-"))).toEqual([])
    }))
})
