/**
 * The platform in this process, as several benchmarks run it: a throwaway NATS and Postgres, the
 * runtime (without its heartbeat) and the auth services, with the per-key rate limit and the org
 * quotas raised out of a load test's way (unless the bench set them: they are not what it
 * measures). `program` runs in a scope with those services; the servers stop after it, however
 * it ends.
 */
import { startNats, startPostgres } from "@svc/local-servers/Servers"
import * as TestDatabase from "@svc/testing/TestDatabase"
import * as TestNats from "@svc/testing/TestNats"
import { useTestEncryptionKeys } from "@svc/testing/TestSecrets"
import { Effect, Layer, type Scope } from "effect"
import * as Runtime from "../../apps/runtime/src/Runtime.ts"
import * as AuthLayer from "../../packages/auth/src/AuthLayer.ts"
import { SecretBox } from "../../packages/crypto/src/SecretBox.ts"

type AuthSettings = Parameters<typeof AuthLayer.layerWith>[0]

// `layerWith` reads no environment: the raised rate limit is given to it too.
const services = (auth: AuthSettings) =>
  Layer.mergeAll(
    Runtime.make({ heartbeat: false }),
    AuthLayer.layerWith({ rateLimitPerSecond: 100_000, rateLimitBurst: 100_000, ...auth })
  ).pipe(
    Layer.provideMerge(Layer.mergeAll(TestNats.layer, TestDatabase.layer, SecretBox.layer))
  )

export type InProcessServices = Layer.Success<ReturnType<typeof services>>

const RAISED = [
  "SVC_RATE_LIMIT_PER_SECOND",
  "SVC_RATE_LIMIT_BURST",
  "SVC_ORG_MAX_SANDBOXES",
  "SVC_ORG_MAX_RUNNING_SANDBOXES"
]

export const runInProcess = async <A, E>(
  program: Effect.Effect<A, E, InProcessServices | Scope.Scope>,
  options: { readonly auth?: AuthSettings } = {}
): Promise<A> => {
  for (const name of RAISED) process.env[name] ??= "100000"
  const [natsServer, pg] = await Promise.all([startNats(), startPostgres()])
  process.env["SVC_TEST_NATS_URL"] = natsServer.url
  process.env["SVC_TEST_DATABASE_URL"] = pg.url
  useTestEncryptionKeys()
  try {
    return await Effect.runPromise(Effect.scoped(program).pipe(Effect.provide(services(options.auth ?? {}))))
  } finally {
    await Promise.all([natsServer.stop(), pg.close()])
  }
}
