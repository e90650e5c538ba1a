/**
 * The platform as separate processes for tests that measure one of them or set its environment:
 * a host agent (apps/agent/src/main.ts) and an API (apps/api/src/main.ts) as child processes on
 * the test's NATS and Postgres, each with extra environment variables.
 */
import * as TestDatabase from "@svc/testing/TestDatabase"
import * as TestNats from "@svc/testing/TestNats"
import { freePort, spawnRole } from "@svc/testing/TestProcess"
import { Effect } from "effect"
import { fileURLToPath } from "node:url"
import { makeHost } from "../../testing/Sandboxes.ts"

const AGENT_MAIN = fileURLToPath(new URL("../../../agent/src/main.ts", import.meta.url))
const API_MAIN = fileURLToPath(new URL("../../src/main.ts", import.meta.url))

/** A host agent process on the test's NATS, with `env` added; yields its pid. */
export const spawnAgent = (env: Record<string, string> = {}) =>
  Effect.gen(function*() {
    const nats = yield* TestNats.TestNatsServer
    const host = yield* makeHost
    const agent = yield* spawnRole({
      main: AGENT_MAIN,
      env: {
        NATS_URL: nats.url,
        SVC_NATS_PREFIX: nats.prefix,
        SVC_HOST_ID: host.hostId,
        SVC_AGENT_DATA_DIR: host.dataDir,
        SVC_AGENT_POOL_SIZE: "0",
        SVC_REGION: "local",
        SVC_HOST_CPU: "64",
        SVC_HOST_RAM_MB: "65536",
        SVC_HOST_DISK_GB: "500",
        ...env
      },
      ready: (stdout) => {
        const line = /\{"event":"agent_ready"[^\n]*\}/.exec(stdout)
        return line ? (JSON.parse(line[0]).pid as number) : undefined
      }
    })
    return agent.ready
  })

/** An API process on the test's NATS and Postgres, with `env` added; yields its base URL and pid. */
export const spawnApi = (env: Record<string, string> = {}) =>
  Effect.gen(function*() {
    const nats = yield* TestNats.TestNatsServer
    const databaseUrl = yield* TestDatabase.TestDatabaseUrl
    const port = yield* freePort
    const api = yield* spawnRole({
      main: API_MAIN,
      env: {
        DATABASE_URL: databaseUrl,
        NATS_URL: nats.url,
        SVC_NATS_PREFIX: nats.prefix,
        SVC_HOST: "127.0.0.1",
        SVC_PORT: String(port),
        ...env
      },
      ready: (stdout) => {
        const line = /\{"event":"api_ready"[^\n]*\}/.exec(stdout)
        return line ? (JSON.parse(line[0]).pid as number) : undefined
      }
    })
    return { base: `http://127.0.0.1:${port}`, pid: api.ready }
  })

/** An agent and an API process; yields the API's base URL and both pids. */
export const spawnPlatform = (env: {
  readonly agent?: Record<string, string>
  readonly api?: Record<string, string>
}) =>
  Effect.gen(function*() {
    const nats = yield* TestNats.TestNatsServer
    const databaseUrl = yield* TestDatabase.TestDatabaseUrl
    const agentPid = yield* spawnAgent(env.agent)
    const api = yield* spawnApi(env.api)
    return {
      base: api.base,
      apiPid: api.pid,
      agentPid,
      /** The ports of NATS and Postgres (connections a role keeps in its pools). */
      servicePorts: [Number(new URL(nats.url).port), Number(new URL(databaseUrl).port)]
    }
  })
