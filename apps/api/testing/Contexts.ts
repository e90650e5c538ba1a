/**
 * Test support for the code-context tests (apps/api/test/sandboxes/Contexts*.test.ts): the API in
 * the test's process and a real agent whose roots come from the run's image cache
 * (`@svc/testing/ImageCache`), the runtime that waits as long as a first root build takes, and
 * the calls every such test makes (a running sandbox of a template, a run of code answered 200).
 */
import { expect } from "@effect/vitest"
import { startAgent } from "@svc/agent/testing/Agent"
import { SecretBox } from "@svc/crypto/SecretBox"
import * as Runtime from "@svc/runtime/Runtime"
import { TEST_IMAGE_CACHE_DIR } from "@svc/testing/ImageCache"
import * as TestDatabase from "@svc/testing/TestDatabase"
import * as TestNats from "@svc/testing/TestNats"
import { Duration, Effect, Layer } from "effect"
import { execFile } from "node:child_process"
import { fileURLToPath } from "node:url"
import { type Answer, eventually, Identity, makeHost, serveApi } from "./Sandboxes.ts"

/** The API served in this process and a real agent on a host of the test's own; the API's URL. */
export const serveWithAgent = Effect.gen(function*() {
  const base = yield* serveApi
  const host = yield* makeHost
  yield* startAgent(host, {
    region: "local",
    capacity: { cpu: 64, ramMb: 64 * 1024, diskGb: 500 },
    imageCacheDir: TEST_IMAGE_CACHE_DIR
  })
  return base
})

/**
 * What `env` (a layer built with `serveWithAgent`) needs: the runtime (its transitions may wait
 * for a root's first build, 9 min), orgs and keys, Postgres and NATS.
 */
export const provideContextsEnv = <A, E, R>(env: Layer.Layer<A, E, R>) =>
  env.pipe(
    Layer.provideMerge(
      Layer.mergeAll(
        Runtime.make({ supervisor: { intervalMs: 200, transitionTimeoutMs: 540_000 } }),
        Identity.layer
      )
    ),
    Layer.provideMerge(Layer.mergeAll(TestDatabase.layerWithUrl, TestNats.layer, SecretBox.layer))
  )

const PYTHON_SDK = fileURLToPath(new URL("../../../sdks/python/src", import.meta.url))

/**
 * `python3 -c script args...` (or SVC_PYTHON) with the Python SDK (sdks/python/src) on its path
 * and `api`'s address and key in its environment; its stdout, or a death with its stderr.
 */
export const runPythonSdk = (
  api: { readonly base: string; readonly token: string },
  script: string,
  args: ReadonlyArray<string>
) =>
  Effect.callback<string>((resume) => {
    execFile(
      process.env["SVC_PYTHON"] ?? "python3",
      ["-c", script, ...args],
      { env: { ...process.env, PYTHONPATH: PYTHON_SDK, SVC_API_URL: api.base, SVC_API_KEY: api.token } },
      (error, stdout, stderr) =>
        resume(error ? Effect.die(new Error(`${error.message}\n${stderr}`)) : Effect.succeed(stdout))
    )
  })

/** A run's answer (docs/contract.md#code-contexts). */
export interface Run {
  readonly execution_count: number
  readonly results: ReadonlyArray<{ type: string; data: string }>
  readonly stdout: string
  readonly stderr: string
  readonly error: { name: string; value: string; traceback: ReadonlyArray<string> } | null
  readonly duration_ms: number
  readonly truncated: boolean
}

/** The text/plain values of a run's results. */
export const plain = (r: Run) => r.results.filter((x) => x.type === "text/plain").map((x) => x.data)

/** The calls of the context tests, made through `api` (the test's own: its org's key, its API). */
export const contextCalls = <R>(
  api: (method: string, path: string, body?: unknown) => Effect.Effect<Answer, never, R>
) => ({
  /** A sandbox of `template`, created and waited for until running. */
  running: (template: string, ram_mb: number) =>
    Effect.gen(function*() {
      const created = yield* api("POST", "/v1/sandboxes", { template, ram_mb, region: "local" })
      expect(created.status, created.text).toBe(201)
      const id = created.json.id as string
      // A root never built on this machine is built first (mmdebstrap: minutes on busy cores).
      const ready = yield* eventually(
        api("GET", `/v1/sandboxes/${id}`),
        (r) => r.json?.state === "running" || r.json?.state === "error",
        Duration.minutes(9)
      )
      expect(ready.json.state, ready.text).toBe("running")
      return id
    }),
  /** A run of `code` in the context, answered 200. */
  run: (id: string, ctx: string, code: string, extra: Record<string, unknown> = {}) =>
    Effect.map(api("POST", `/v1/sandboxes/${id}/contexts/${ctx}/run`, { code, ...extra }), (r) => {
      expect(r.status, r.text).toBe(200)
      return r.json as Run
    })
})
