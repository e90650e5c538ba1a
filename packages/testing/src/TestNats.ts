/**
 * The bus for a test: the run's shared NATS (`NATS_URL`, or the one GlobalSetup started) under a
 * random prefix of its own, so that tests sharing a server never see each other's streams,
 * subjects or buckets. Its streams and buckets are deleted at the end of the scope.
 */
import { Nats } from "@svc/bus/Nats"
import { startNats } from "@svc/local-servers/Servers"
import { Context, Effect, Layer } from "effect"
import { randomBytes } from "node:crypto"

const serverUrl = Effect.acquireRelease(
  Effect.promise(async () => {
    const url = process.env.NATS_URL ?? process.env.SVC_TEST_NATS_URL
    if (url) return { url, stop: async () => {} }
    const nats = await startNats()
    return { url: nats.url, stop: nats.stop }
  }),
  (server) => Effect.promise(server.stop)
)

export const randomPrefix = () => `t${randomBytes(4).toString("hex")}`

export class TestNatsServer
  extends Context.Service<TestNatsServer, { readonly url: string; readonly prefix: string }>()(
    "@svc/testing/TestNatsServer"
  )
{}

const cleanUp = (nats: Nats["Service"]) =>
  Effect.ignore(Effect.tryPromise(async () => {
    for await (const name of nats.jsm.streams.names()) {
      if (name.startsWith(`${nats.prefix}_`) || name.startsWith(`KV_${nats.prefix}_`)) {
        await nats.jsm.streams.delete(name).catch(() => {})
      }
    }
  }))

/** `Nats` under a fresh prefix, plus `TestNatsServer` (url and prefix, for other processes). */
export const layer = Layer.unwrap(
  Effect.gen(function*() {
    const server = yield* serverUrl
    const prefix = randomPrefix()
    const natsLayer = Layer.effect(
      Nats,
      Effect.tap(
        Nats.make({ url: server.url, prefix, name: "svc-test" }),
        (nats) => Effect.addFinalizer(() => cleanUp(nats))
      )
    )
    return Layer.merge(natsLayer, Layer.succeed(TestNatsServer, { url: server.url, prefix }))
  })
).pipe(Layer.orDie)
