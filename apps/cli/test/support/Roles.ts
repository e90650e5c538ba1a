/**
 * The platform's roles as an operator deploys them, processes of their own on the test's NATS and
 * Postgres: the environment they share, a host for the agent, and the dev org's key to call the
 * API with.
 */
import * as AuthLayer from "@svc/auth/AuthLayer"
import { ensureDevOrg } from "@svc/auth/DevOrg"
import * as TestDatabase from "@svc/testing/TestDatabase"
import { makeHost } from "@svc/testing/TestHost"
import { call } from "@svc/testing/TestHttp"
import * as TestNats from "@svc/testing/TestNats"
import { freePort } from "@svc/testing/TestProcess"
import { Effect } from "effect"

/**
 * The test's NATS and database, a host (its data folder named `hostPrefix`...) and a free port
 * for the API; `common` is the environment of the API, runtime and dispatcher, `agent` the
 * agent's (its host, a small fixed capacity).
 */
export const rolesSetup = (hostPrefix: string) =>
  Effect.gen(function*() {
    const nats = yield* TestNats.TestNatsServer
    const databaseUrl = yield* TestDatabase.TestDatabaseUrl
    const host = yield* makeHost(hostPrefix)
    const port = yield* freePort
    return {
      nats,
      databaseUrl,
      host,
      port,
      base: `http://127.0.0.1:${port}`,
      common: {
        DATABASE_URL: databaseUrl,
        NATS_URL: nats.url,
        SVC_NATS_PREFIX: nats.prefix,
        // The tests' webhook receivers are on loopback.
        SVC_WEBHOOK_ALLOWED_SUBNETS: "127.0.0.0/8"
      },
      agent: {
        NATS_URL: nats.url,
        SVC_NATS_PREFIX: nats.prefix,
        SVC_HOST_ID: host.hostId,
        SVC_AGENT_DATA_DIR: host.dataDir,
        SVC_HOST_CPU: "16",
        SVC_HOST_RAM_MB: "16384",
        SVC_HOST_DISK_GB: "100"
      }
    }
  })

/** The dev org's key (made as `svc dev` makes it), and a call to the API at `base` with it. */
export const devOrgApi = (base: string) =>
  Effect.gen(function*() {
    const org = yield* ensureDevOrg(null).pipe(Effect.provide(AuthLayer.operatorLayer), Effect.orDie)
    const token = org.api_key
    const api = (method: string, path: string, body?: unknown, headers?: Record<string, string>) =>
      call(base, method, path, {
        token,
        ...(body !== undefined ? { body } : {}),
        ...(headers !== undefined ? { headers } : {})
      })
    return { token, api }
  })
