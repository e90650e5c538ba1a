/**
 * The API on a Node server of its own (`Server.makeNodeServer`, as the role runs it) for tests
 * that talk to it over real HTTP with settings of their own, and an account on it made as a user
 * makes one.
 */
import { SecretBox } from "@svc/crypto/SecretBox"
import * as TestDatabase from "@svc/testing/TestDatabase"
import { call, serve } from "@svc/testing/TestHttp"
import * as TestNats from "@svc/testing/TestNats"
import { ConfigProvider, type Context, Effect, Layer } from "effect"
import { HttpRouter } from "effect/http"
import * as Server from "../../src/Server.ts"

/** The test's database and NATS and the secret box, built once for the servers of a test file. */
export const buildPlatform = Layer.build(Layer.mergeAll(TestDatabase.layer, TestNats.layer, SecretBox.layer))

export type Platform = Effect.Success<typeof buildPlatform> extends Context.Context<infer A> ? A : never

/**
 * The API's routes on a free loopback port over `platform`, `settings` taking precedence over the
 * environment; `fresh` builds the API's own layers anew (./TestHttp.ts's `serve`). Its base URL.
 */
export const serveOwnApi = (
  platform: Context.Context<Platform>,
  settings: Record<string, string>,
  options: { readonly fresh?: boolean } = {}
) =>
  serve(
    HttpRouter.serve(Server.Routes, { disableLogger: true, disableListenLog: true }).pipe(
      Layer.provide(ConfigProvider.layerAdd(ConfigProvider.fromUnknown(settings), { asPrimary: true })),
      Layer.provide(Layer.succeedContext(platform))
    ),
    { server: Server.makeNodeServer, ...options }
  )

/** Signs up (a user, their org and a session) and mints a `*` key with the session. */
export const signUpWithKey = (base: string, email: string, orgName: string) =>
  Effect.gen(function*() {
    const up = yield* call(base, "POST", "/v1/auth/sign-up", {
      body: { email, password: "a long password", org_name: orgName }
    })
    const cookie = up.headers.get("set-cookie")!.split(";")[0]!
    const key = yield* call(base, "POST", "/v1/auth/api-keys", {
      body: { name: "k" },
      headers: { cookie, origin: base }
    })
    return { token: key.json.token as string, cookie }
  })
