/**
 * What each role reads, seen rather than declared: each role's layer (as `svc <role>` runs it)
 * is built against the test's NATS and Postgres with a ConfigProvider that notes every variable
 * asked for, and the set must be the role's `Config.ts` list (with the former names of renamed
 * variables, which are asked for to refuse them). So the README's "read by" column, checked
 * against those lists, is what the roles do.
 */
import { describe, expect, layer } from "@effect/vitest"
import * as AgentConfig from "@svc/agent/Config"
import * as ApiConfig from "@svc/api/Config"
import type * as Env from "@svc/config/Env"
import * as DispatcherConfig from "@svc/dispatcher/Config"
import { freePort } from "@svc/local-servers/Servers"
import * as RuntimeConfig from "@svc/runtime/Config"
import * as TestDatabase from "@svc/testing/TestDatabase"
import { makeHost } from "@svc/testing/TestHost"
import * as TestNats from "@svc/testing/TestNats"
import { testEncryptionKeys } from "@svc/testing/TestSecrets"
import { ConfigProvider, Effect, Layer } from "effect"
import { AgentRoleLayer, ApiRole, DispatcherRole, RuntimeRole } from "../src/Platform.ts"

const expected = (settings: ReadonlyArray<Env.AnySetting>) =>
  [
    ...new Set(settings.flatMap(({ variable }) =>
      variable.formerly === undefined ? [variable.name] : [variable.name, variable.formerly]
    ))
  ].sort()

/** Builds `role` with `env` as its whole environment; the platform's variables it asked for. */
const readsOf = <A, E>(role: Layer.Layer<A, E, never>, env: Record<string, string>) =>
  Effect.gen(function*() {
    const asked = new Set<string>()
    const base = ConfigProvider.fromEnv({ env })
    const provider = ConfigProvider.make((path) => {
      asked.add(path.join("_"))
      return base.load(path)
    })
    yield* Effect.scoped(Layer.build(role.pipe(Layer.provide(ConfigProvider.layer(provider)))))
    return [...asked].filter((name) => /^(SVC|NATS|DATABASE|OTEL)_/.test(name)).sort()
  })

describe("what each role reads", () => {
  layer(Layer.mergeAll(TestNats.layer, TestDatabase.layerWithUrl), { excludeTestServices: true, timeout: 300_000 })(
    (it) => {
      const environment = Effect.gen(function*() {
        const nats = yield* TestNats.TestNatsServer
        return {
          NATS_URL: nats.url,
          SVC_NATS_PREFIX: nats.prefix,
          DATABASE_URL: yield* TestDatabase.TestDatabaseUrl,
          SVC_ENCRYPTION_KEYS: testEncryptionKeys()
        }
      })

      // Generous limits: under a loaded machine a role's start (streams, consumers, migrations) is slow.
      it.effect("api: its Config.ts list, no more, no less", () =>
        Effect.gen(function*() {
          const env = yield* environment
          const port = yield* Effect.promise(freePort)
          expect(yield* readsOf(ApiRole, { ...env, SVC_PORT: String(port) })).toEqual(expected(ApiConfig.settings))
        }), 300_000)

      it.effect("runtime: its Config.ts list, no more, no less", () =>
        Effect.gen(function*() {
          const env = yield* environment
          expect(yield* readsOf(RuntimeRole, env)).toEqual(expected(RuntimeConfig.settings))
        }), 300_000)

      it.effect("dispatcher: its Config.ts list, no more, no less", () =>
        Effect.gen(function*() {
          const env = yield* environment
          expect(yield* readsOf(DispatcherRole, env)).toEqual(expected(DispatcherConfig.settings))
        }), 300_000)

      it.effect("agent: its Config.ts list, no more, no less", () =>
        Effect.gen(function*() {
          const env = yield* environment
          const host = yield* makeHost("svc-role-settings-")
          const reads = yield* readsOf(AgentRoleLayer, {
            NATS_URL: env.NATS_URL,
            SVC_NATS_PREFIX: env.SVC_NATS_PREFIX,
            SVC_ENCRYPTION_KEYS: env.SVC_ENCRYPTION_KEYS,
            SVC_HOST_ID: host.hostId,
            SVC_AGENT_DATA_DIR: host.dataDir,
            SVC_AGENT_POOL_SIZE: "0"
          })
          expect(reads).toEqual(expected(AgentConfig.settings))
        }), 300_000)
    }
  )
})
