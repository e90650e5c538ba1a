/**
 * The stack the process benchmarks (files, tti, pools) start before their agent: a throwaway NATS
 * and Postgres, then the API and runtime roles as processes of their own (so each one's CPU reads
 * apart), the API on a free port.
 */
import { freePort, startNats, startPostgres } from "@svc/local-servers/Servers"
import { appMain, readyEvent, spawnRole } from "@svc/testing/TestProcess"
import { Effect } from "effect"

/** A throwaway NATS and Postgres, started together, stopped at the end of the scope. */
export const startServers = Effect.acquireRelease(
  Effect.promise(() => Promise.all([startNats(), startPostgres()])),
  ([nats, pg]) => Effect.promise(() => Promise.all([nats.stop(), pg.close()]))
).pipe(Effect.map(([nats, pg]) => ({ nats, pg })))

export const startControlPlane = (options: {
  /** Every role's environment (NATS, limits, telemetry). */
  readonly common: Record<string, string>
  readonly databaseUrl: string
  /** The API's own additions (`NODE_OPTIONS` for a profile). */
  readonly apiEnv?: Record<string, string>
}) =>
  Effect.gen(function*() {
    const { common, databaseUrl } = options
    const port = yield* Effect.promise(freePort)
    const api = yield* spawnRole({
      main: appMain("api"),
      env: { ...common, ...options.apiEnv, DATABASE_URL: databaseUrl, SVC_HOST: "127.0.0.1", SVC_PORT: String(port) },
      ready: readyEvent("api_ready"),
      timeout: "120 seconds"
    })
    const runtime = yield* spawnRole({
      main: appMain("runtime"),
      env: { ...common, DATABASE_URL: databaseUrl },
      ready: (out) => out.includes("runtime ready") ? true : undefined,
      timeout: "120 seconds"
    })
    return { api, runtime, port, base: `http://127.0.0.1:${port}` }
  })
