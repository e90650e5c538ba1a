/**
 * `svc dev`: the whole platform on one machine in one process. Starts NATS (JetStream) and
 * Postgres with their data under `.svc/data` unless NATS_URL / DATABASE_URL point elsewhere,
 * applies migrations, runs every role, and stops everything on Ctrl-C.
 */
import { startNats, startPostgres } from "@svc/local-servers/Servers"
import { ConfigProvider, Console, Effect, Layer } from "effect"
import { Command } from "effect/cli"
import * as fs from "node:fs"
import * as net from "node:net"
import * as path from "node:path"
import { AllRoles, Infrastructure } from "../Platform.ts"

export const repoRoot = path.resolve(import.meta.dirname, "../../../..")
export const stateDir = process.env.SVC_STATE_DIR ?? path.join(repoRoot, ".svc")

const portFree = (port: number) =>
  new Promise<boolean>((resolve) => {
    const server = net.createServer()
    server.once("error", () => resolve(false))
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)))
  })

/** Our fixed dev port when it is free, else any free one (a machine may run its own servers). */
const choosePort = async (preferred: number) => ((await portFree(preferred)) ? preferred : undefined)

const localServers = Effect.gen(function*() {
  const env: Record<string, string> = {}
  if (!process.env.NATS_URL) {
    const nats = yield* Effect.acquireRelease(
      Effect.promise(async () =>
        startNats({ dir: path.join(stateDir, "data", "nats"), port: await choosePort(Number(process.env.SVC_DEV_NATS_PORT ?? 14222)) })
      ),
      (nats) => Effect.promise(nats.stop)
    )
    env.NATS_URL = nats.url
    yield* Console.log(`nats      ${nats.url} (data in ${nats.dir})`)
  }
  if (!process.env.DATABASE_URL) {
    const pg = yield* Effect.acquireRelease(
      Effect.promise(async () =>
        startPostgres({ dir: path.join(stateDir, "data", "postgres"), port: await choosePort(Number(process.env.SVC_DEV_PG_PORT ?? 15432)) })
      ),
      (pg) => Effect.promise(pg.stop)
    )
    env.DATABASE_URL = pg.url
    yield* Console.log(`postgres  ${pg.url} (data in ${pg.dir})`)
  }
  return env
})

export const dev = Command.make(
  "dev",
  {},
  Effect.fn("Cli.dev")(function*() {
    fs.mkdirSync(stateDir, { recursive: true })
    const env = yield* localServers
    const config = ConfigProvider.fromEnv({ env: { ...process.env, ...env } as Record<string, string> })
    const port = Number(process.env.SVC_PORT ?? 8080)
    yield* Layer.launch(
      AllRoles.pipe(
        Layer.provideMerge(Infrastructure),
        Layer.tap(() => Console.log(`api       http://127.0.0.1:${port} (docs at /docs)`))
      )
    ).pipe(Effect.provide(ConfigProvider.layer(config)))
  }, Effect.scoped)
).pipe(Command.withDescription("Run NATS, Postgres and every role of the platform on this machine"))
