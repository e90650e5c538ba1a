/**
 * The API as the benchmarks use it: its routes served in this process (on the in-process
 * platform, ./InProcess.ts) with an org and a key of their own, JSON calls with that key, and
 * removing what a run made when it ends.
 */
import { serve } from "@svc/testing/TestHttp"
import { Effect } from "effect"
import { HttpRouter } from "effect/http"
import * as Server from "../../apps/api/src/Server.ts"
import { ApiKeys } from "../../packages/auth/src/ApiKeys.ts"
import { operatorContext } from "../../packages/auth/src/Audit.ts"
import { Orgs } from "../../packages/auth/src/Orgs.ts"

export interface Answer {
  readonly status: number
  readonly text: string
  /** The body as JSON; undefined when it is not JSON. */
  readonly json: any
  /** When the answer was read (`performance.now()`). */
  readonly at: number
}

export type Call = (method: string, path: string, body?: unknown) => Effect.Effect<Answer>

/** A JSON request to `base` with `key`; the answer's body read whole. */
export const apiCall = (base: string, key: string): Call => (method, path, body) =>
  Effect.promise(async () => {
    const response = await fetch(`${base}${path}`, {
      method,
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {})
    })
    const text = await response.text()
    let json: any
    try {
      json = JSON.parse(text)
    } catch {
      json = undefined
    }
    return { status: response.status, text, json, at: performance.now() }
  })

/**
 * The API's routes on a free loopback port of this process, an org named `orgName` and a key of
 * it minted by the operator (no sign-up: the in-process platform has the services at hand).
 */
export const serveApi = (orgName = "bench") =>
  Effect.gen(function*() {
    const base = yield* serve(HttpRouter.serve(Server.Routes, { disableLogger: true, disableListenLog: true }))
    const org = yield* (yield* Orgs).create(orgName, operatorContext)
    const key = (yield* (yield* ApiKeys).mint({ orgId: org.id, userId: null, name: "bench" }, operatorContext)).token
    return { base, key, call: apiCall(base, key) }
  })

/**
 * At the end of the scope: deletes `sandboxes` (waiting up to a minute for them to be `deleted`),
 * then `templates`; the arrays are read then, so a run pushes to them as it makes things.
 */
export const removeAtEnd = (
  call: Call,
  made: { readonly sandboxes: ReadonlyArray<string>; readonly templates: ReadonlyArray<string> }
) =>
  Effect.addFinalizer(() =>
    Effect.gen(function*() {
      for (const id of made.sandboxes) yield* call("DELETE", `/v1/sandboxes/${id}`)
      const deadline = Date.now() + 60_000
      for (const id of made.sandboxes) {
        while (Date.now() < deadline && (yield* call("GET", `/v1/sandboxes/${id}`)).json.state !== "deleted") {
          yield* Effect.sleep("200 millis")
        }
      }
      for (const id of made.templates) yield* call("DELETE", `/v1/templates/${id}`)
    }).pipe(Effect.ignore)
  )
