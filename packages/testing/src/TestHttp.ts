/**
 * Serving an HTTP layer (an `HttpRouter.serve(...)` app) on a free loopback port for the current
 * scope, so tests talk to it over real HTTP.
 */
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { Context, Effect, Layer } from "effect"
import { HttpServer } from "effect/http"
import type * as Http from "node:http"
import { createServer } from "node:http"

/**
 * Builds `app` on a free port; yields the base URL (`http://127.0.0.1:<port>`). `server` makes
 * the Node server (an app's own, with its listeners), a plain one by default. `fresh` builds the
 * app's own layers anew instead of sharing those the test's environment already built (layers
 * are memoized across one program's builds): an API with settings of its own (quotas, time
 * limits) beside a runtime of the default ones, as two processes would be.
 */
export const serve = <E, R>(
  app: Layer.Layer<never, E, R>,
  options: { readonly server?: () => Http.Server; readonly fresh?: boolean } = {}
) =>
  Effect.gen(function*() {
    const served = Layer.merge(app, HttpServer.layerServices).pipe(
      Layer.provideMerge(NodeHttpServer.layer(options.server ?? createServer, { port: 0, host: "127.0.0.1" }))
    )
    const context = options.fresh
      ? yield* Layer.buildWithMemoMap(served, Layer.makeMemoMapUnsafe(), yield* Effect.scope)
      : yield* Layer.build(served)
    const address = Context.get(context, HttpServer.HttpServer).address as { readonly port: number }
    return `http://127.0.0.1:${address.port}`
  })

/** What a test sees of an API answer. */
export interface Answer {
  readonly status: number
  /** The JSON body, or null when there is none or it is not JSON. */
  readonly body: any
  /** The JSON body when the answer says it is JSON, else undefined. */
  readonly json: any
  readonly text: string
  readonly bytes: Uint8Array
  readonly headers: Headers
}

/**
 * One HTTP call as a client would make it: `token` as a bearer credential, `body` as JSON
 * (a string is sent as it is, for malformed bodies), `raw` bytes as they are.
 */
export const call = (
  base: string,
  method: string,
  path: string,
  options: {
    readonly token?: string
    readonly body?: unknown
    readonly raw?: string | Uint8Array
    readonly headers?: Record<string, string>
  } = {}
) =>
  Effect.promise(async (): Promise<Answer> => {
    const headers: Record<string, string> = { ...options.headers }
    if (options.token !== undefined) headers["authorization"] = `Bearer ${options.token}`
    let payload: string | Uint8Array | undefined = options.raw
    if (options.body !== undefined) {
      payload = typeof options.body === "string" ? options.body : JSON.stringify(options.body)
      headers["content-type"] ??= "application/json"
    }
    const response = await fetch(base + path, { method, headers, ...(payload !== undefined ? { body: payload } : {}) })
    const bytes = new Uint8Array(await response.arrayBuffer())
    const text = Buffer.from(bytes).toString("utf8")
    let body: any = null
    try {
      body = text.length > 0 ? JSON.parse(text) : null
    } catch {
      body = null
    }
    const json = (response.headers.get("content-type") ?? "").includes("json") && text.length > 0 ? body : undefined
    return { status: response.status, body, json, text, bytes, headers: response.headers }
  })
