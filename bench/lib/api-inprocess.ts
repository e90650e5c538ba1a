/**
 * The API's routes without sockets, in a process of its own (bench/api.ts starts it): the API
 * role's `Routes` (apps/api/src/Server.ts, the same middleware, handlers and services, on the
 * DATABASE_URL and NATS_URL it is given) and the one-endpoint HttpApi floor (Floors.ts), each
 * through `HttpRouter.toWebHandler`, 32 requests in flight, CPU time of this process per request.
 *
 * What it separates: over a socket, the time of every request also holds Node's HTTP parsing and
 * the kernel's writes, and those grow as the server gets slower (wrk's connections wait more, so
 * each answer wakes a sleeping reader: bench/README.md); here only JavaScript of the routes and
 * the framework is left, so a change to the API's own path shows at its size. Prints one JSON
 * line: per case, the median and each run (µs per request).
 *   BENCH_INPROCESS_REQUESTS (20000) per run, BENCH_RUNS (5) runs after a warm-up.
 */
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { Layer } from "effect"
import { HttpRouter } from "effect/http"
import { NodeHooks } from "../../apps/api/src/Preview.ts"
import * as Server from "../../apps/api/src/Server.ts"
import { Nats } from "../../packages/bus/src/Nats.ts"
import { SecretBox } from "../../packages/crypto/src/SecretBox.ts"
import * as Database from "../../packages/db/src/Database.ts"
import * as Telemetry from "../../packages/telemetry/src/Telemetry.ts"
import { mintKey } from "./ApiRole.ts"
import { HelloApi } from "./Floors.ts"
import { median } from "./Stats.ts"

const IN_FLIGHT = 32
const REQUESTS = Number(process.env.BENCH_INPROCESS_REQUESTS ?? 20_000)
const RUNS = Number(process.env.BENCH_RUNS ?? 5)
// Not a socket: the URL only names the route.
const BASE = "http://127.0.0.1:8080"

type Handler = (request: Request) => Promise<Response>

// The routes' types still name, as requirements of each request, services the layer itself
// builds and provides (HttpRouter.serve takes them from the same layer in the API's tests).
const routes = Server.Routes.pipe(
  Layer.provide(Layer.succeed(NodeHooks, { preview: undefined })),
  Layer.provide(SecretBox.layer),
  Layer.provide(Layer.mergeAll(Database.layer, Nats.layer)),
  Layer.provide(Telemetry.layer("svc-api")),
  Layer.provide(NodeHttpServer.layerHttpServices)
) as unknown as Layer.Layer<never, never, HttpRouter.HttpRouter>
const api = HttpRouter.toWebHandler(routes, { disableLogger: true })
const floor = HttpRouter.toWebHandler(HelloApi.pipe(Layer.provide(NodeHttpServer.layerHttpServices)), {
  disableLogger: true
})

const call = (handler: Handler, path: string, init: RequestInit = {}) => handler(new Request(BASE + path, init))

/** CPU µs of this process per request, `IN_FLIGHT` at a time; every answer must be 200. */
const run = async (handler: Handler, path: string, headers: Record<string, string>, requests: number) => {
  let left = requests
  const before = process.cpuUsage()
  await Promise.all(Array.from({ length: IN_FLIGHT }, async () => {
    while (left-- > 0) {
      const response = await call(handler, path, { headers })
      if (response.status !== 200) throw new Error(`${path} answered ${response.status}`)
      await response.arrayBuffer()
    }
  }))
  const used = process.cpuUsage(before)
  return (used.user + used.system) / requests
}

try {
  // Host is what the API's CSRF check compares the Origin with (fetch sets it over a socket).
  const token = await mintKey(BASE, (url, init) => {
    const headers = new Headers(init.headers)
    headers.set("host", new URL(BASE).host)
    return api.handler(new Request(url, { ...init, headers }))
  })
  const cases = [
    { name: "HttpApi of one endpoint (the floor)", handler: floor.handler, path: "/", headers: {} },
    { name: "GET /v1/health", handler: api.handler, path: "/v1/health", headers: {} },
    {
      name: "authenticated GET /v1/auth/me",
      handler: api.handler,
      path: "/v1/auth/me",
      headers: { authorization: `Bearer ${token}` }
    }
  ]
  for (const c of cases) await run(c.handler, c.path, c.headers, REQUESTS) // warm-up: JIT, caches
  const runs = cases.map(() => [] as Array<number>)
  // Case by case within each round, so that drift hits all alike.
  for (let i = 0; i < RUNS; i++) {
    for (const [k, c] of cases.entries()) runs[k]!.push(await run(c.handler, c.path, c.headers, REQUESTS))
  }
  process.stdout.write(
    JSON.stringify(cases.map((c, k) => ({ name: c.name, median: median(runs[k]!), runs: runs[k] }))) + "\n"
  )
} finally {
  await Promise.all([api.dispose(), floor.dispose()])
}
