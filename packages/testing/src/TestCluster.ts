/**
 * The platform as an operator scales it, on one machine: a 3-node JetStream cluster on loopback
 * (every stream and bucket with 3 replicas), NATS users per role (`@svc/host-protocol/Permissions`:
 * each agent its own), N processes of each role started from `apps/<role>/src/main.ts`, one
 * Postgres. Each role process can be killed -9 and started again (what systemd's
 * `Restart=always` does), and each NATS node stopped and started again.
 *
 * With `tls`, clients reach NATS only over TLS with a client certificate (a throwaway CA from
 * `Tls.ts`): every role gets NATS_TLS_CA, NATS_TLS_CERT and NATS_TLS_KEY.
 *
 * Used by `apps/cli/test/Cluster.test.ts`, `bench/chaos.ts` (`npm run chaos`) and
 * `bench/scaling.ts` (`npm run bench scaling`).
 */
import type { NatsSecurity } from "@svc/bus/Config"
import { agentUser, authorizationBlock, platformUsers } from "@svc/host-protocol/Permissions"
import { type NatsCluster, startNatsCluster } from "@svc/local-servers/Servers"
import { Duration, Effect, Redacted, Scope } from "effect"
import { randomBytes } from "node:crypto"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { makeHost, type TestHost } from "./TestHost.ts"
import { appMain, freePort, readyEvent, type RoleProcess, spawnRole } from "./TestProcess.ts"
import { makeTestCertificates, type TestCertificates } from "./Tls.ts"

export type RoleName = "api" | "runtime" | "dispatcher" | "agent"

export interface ManagedRole {
  readonly role: RoleName
  readonly index: number
  /** `api-1`, `agent-2`, ... */
  readonly name: string
  /** The process running now. */
  readonly current: () => RoleProcess<unknown>
  /** kill -9, then started again with the same settings; completes once it is ready again. */
  readonly crashAndRestart: Effect.Effect<void>
  /** Starts of this role process after the first. */
  readonly restarts: () => number
  /** How long each restart took, kill to ready (ms). */
  readonly restartMs: () => ReadonlyArray<number>
}

export interface TestCluster {
  readonly cluster: NatsCluster
  /** Every node, comma-separated: what each role's NATS_URL is. */
  readonly natsUrl: string
  readonly databaseUrl: string
  /** The API processes' base URLs. */
  readonly apiUrls: ReadonlyArray<string>
  readonly roles: ReadonlyArray<ManagedRole>
  readonly hosts: ReadonlyArray<TestHost>
  /** A user and password of each NATS user (`api`, `runtime`, `dispatcher`, `agent-<hostId>`). */
  readonly passwords: Readonly<Record<string, string>>
  /** The certificates, with `tls`. */
  readonly tls: TestCertificates | undefined
  /** How to connect as one of the users (`Nats.make`'s `security`), over TLS with `tls`. */
  readonly security: (user: string) => NatsSecurity
}

export interface TestClusterOptions {
  readonly databaseUrl: string
  /** Processes of each role (default 2 each). */
  readonly counts?: Partial<Record<RoleName, number>>
  /** Extra environment for every role (e.g. SVC_WEBHOOK_ALLOWED_SUBNETS). */
  readonly env?: Record<string, string>
  readonly log?: (line: string) => void
  /** NATS clients over TLS only, with client certificates (default false). */
  readonly tls?: boolean
}

const readyLine = (role: RoleName) => (stdout: string) => {
  if (role === "runtime") return stdout.includes("runtime ready") ? true : undefined
  return readyEvent(`${role}_ready`)(stdout)
}

/** Starts the cluster, then every role process; all of it ends with the scope. */
export const startTestCluster = (options: TestClusterOptions) =>
  Effect.gen(function*() {
    const scope = yield* Scope.Scope
    const counts = { api: 2, runtime: 2, dispatcher: 2, agent: 2, ...options.counts }
    const hosts: Array<TestHost> = []
    for (let i = 0; i < counts.agent; i++) hosts.push(yield* makeHost("svc-cluster-"))
    const hostIds = hosts.map((h) => h.hostId)
    const passwords: Record<string, string> = {}
    const users = platformUsers({
      prefix: "",
      hostIds,
      password: (user) => {
        passwords[user] = randomBytes(18).toString("base64url")
        return { value: passwords[user] }
      }
    })
    const tls = options.tls
      ? yield* Effect.acquireRelease(
        Effect.sync(() => makeTestCertificates(Fs.mkdtempSync(Path.join(Os.tmpdir(), "svc-cluster-tls-")))),
        (c) => Effect.sync(() => Fs.rmSync(Path.dirname(c.caFile), { recursive: true, force: true }))
      )
      : undefined
    const cluster = yield* Effect.acquireRelease(
      Effect.promise(() =>
        startNatsCluster(3, {
          authorization: authorizationBlock(users),
          ...(tls ? { tls: { certFile: tls.serverCertFile, keyFile: tls.serverKeyFile, caFile: tls.caFile } } : {})
        })
      ),
      (c) => Effect.promise(c.stop)
    )
    const natsUrl = cluster.urls.join(",")
    const common = (user: string) => ({
      NATS_URL: natsUrl,
      SVC_NATS_REPLICAS: "3",
      NATS_USER: user,
      NATS_PASSWORD: passwords[user]!,
      ...(tls ? { NATS_TLS_CA: tls.caFile, NATS_TLS_CERT: tls.clientCertFile, NATS_TLS_KEY: tls.clientKeyFile } : {}),
      ...options.env
    })
    const apiPorts: Array<number> = []
    for (let i = 0; i < counts.api; i++) apiPorts.push(yield* freePort)

    const envOf = (role: RoleName, index: number): Record<string, string> => {
      switch (role) {
        case "api":
          return {
            ...common("api"),
            DATABASE_URL: options.databaseUrl,
            SVC_HOST: "127.0.0.1",
            SVC_PORT: String(apiPorts[index])
          }
        case "runtime":
        case "dispatcher":
          return { ...common(role), DATABASE_URL: options.databaseUrl }
        case "agent": {
          const host = hosts[index]!
          return {
            ...common(agentUser(host.hostId)),
            SVC_HOST_ID: host.hostId,
            SVC_AGENT_DATA_DIR: host.dataDir,
            SVC_AGENT_POOL_SIZE: "1",
            SVC_HOST_CPU: "16",
            SVC_HOST_RAM_MB: "16384",
            SVC_HOST_DISK_GB: "100"
          }
        }
      }
    }

    const manage = (role: RoleName, index: number) =>
      Effect.gen(function*() {
        const name = `${role}-${index + 1}`
        const start = spawnRole({
          main: appMain(role),
          env: envOf(role, index),
          ready: readyLine(role),
          timeout: Duration.seconds(120)
        }).pipe(Effect.provideService(Scope.Scope, scope))
        let current = yield* start
        let restarts = 0
        const restartMs: Array<number> = []
        const crashAndRestart = Effect.gen(function*() {
          const killedAt = performance.now()
          current.process.kill("SIGKILL")
          yield* Effect.promise(() => current.exited)
          options.log?.(`killed -9 ${name}`)
          current = yield* start
          restarts++
          restartMs.push(performance.now() - killedAt)
          options.log?.(`${name} is back after ${Math.round(restartMs.at(-1)!)} ms`)
        })
        return {
          role,
          index,
          name,
          current: () => current,
          crashAndRestart,
          restarts: () => restarts,
          restartMs: () => restartMs
        } satisfies ManagedRole
      })

    // The api first (it migrates the database), then the others side by side.
    const roles: Array<ManagedRole> = []
    roles.push(
      ...(yield* Effect.forEach(Array.from({ length: counts.api }, (_, i) => i), (i) => manage("api", i), {
        concurrency: "unbounded"
      }))
    )
    for (const role of ["runtime", "dispatcher", "agent"] as const) {
      roles.push(
        ...(yield* Effect.forEach(Array.from({ length: counts[role] }, (_, i) => i), (i) => manage(role, i), {
          concurrency: "unbounded"
        }))
      )
    }
    options.log?.(`test cluster up: ${roles.map((r) => r.name).join(", ")} on ${natsUrl}`)
    return {
      cluster,
      natsUrl,
      databaseUrl: options.databaseUrl,
      apiUrls: apiPorts.map((p) => `http://127.0.0.1:${p}`),
      roles,
      hosts,
      passwords,
      tls,
      security: (user) => ({
        user,
        password: Redacted.make(passwords[user]!),
        ...(tls ? { tls: { caFile: tls.caFile, certFile: tls.clientCertFile, keyFile: tls.clientKeyFile } } : {})
      })
    } satisfies TestCluster
  })
