/**
 * `svc dev`: the whole platform on one machine in one process. Starts NATS (JetStream) and
 * Postgres with their data under `<SVC_STATE_DIR>/data` (`.svc/data`) unless NATS_URL /
 * DATABASE_URL point elsewhere, applies migrations, runs every role (`AllRoles`), and stops
 * everything on Ctrl-C (SIGINT, SIGTERM, or SIGHUP when its terminal closes): the API first, then
 * the other roles (the agent ends its warm pool, then stops this host's sandboxes), then NATS and
 * Postgres. Without SVC_ENCRYPTION_KEYS it seals secrets with a key of its own, generated once
 * into `.svc/encryption-keys`; without SVC_DATA_DIR the agent keeps its data in `.svc/data`.
 */
import { ApiPort } from "@svc/api/Config"
import * as AuthLayer from "@svc/auth/AuthLayer"
import { ensureDevOrg } from "@svc/auth/DevOrg"
import { NatsUrlIfSet } from "@svc/bus/Config"
import { Nats } from "@svc/bus/Nats"
import { EncryptionKeysSet, generateEncryptionKey } from "@svc/crypto/Config"
import { DatabaseUrlIfSet } from "@svc/db/Config"
import * as Database from "@svc/db/Database"
import { startNats, startPostgres } from "@svc/local-servers/Servers"
import { ConfigProvider, Console, Effect, Layer, Option } from "effect"
import { Command } from "effect/cli"
import * as crypto from "node:crypto"
import * as fs from "node:fs"
import * as net from "node:net"
import * as path from "node:path"
import { DevNatsPort, DevPostgresPort, StateDir } from "../Config.ts"
import { AllRoles } from "../Platform.ts"

const portFree = (port: number) =>
  new Promise<boolean>((resolve) => {
    const server = net.createServer()
    server.once("error", () => resolve(false))
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)))
  })

/** Our fixed dev port when it is free, else any free one (a machine may run its own servers). */
const choosePort = async (preferred: number) => ((await portFree(preferred)) ? preferred : undefined)

const localServers = (stateDir: string) =>
  Effect.gen(function*() {
    const env: Record<string, string> = {}
    if (Option.isNone(yield* NatsUrlIfSet)) {
      const preferred = yield* DevNatsPort
      const nats = yield* Effect.acquireRelease(
        Effect.promise(async () =>
          startNats({ dir: path.join(stateDir, "data", "nats"), port: await choosePort(preferred) })
        ),
        (nats) => Effect.promise(nats.stop)
      )
      env.NATS_URL = nats.url
      yield* Console.log(`nats      ${nats.url} (data in ${nats.dir})`)
    }
    if (Option.isNone(yield* DatabaseUrlIfSet)) {
      const preferred = yield* DevPostgresPort
      const pg = yield* Effect.acquireRelease(
        Effect.promise(async () =>
          startPostgres({ dir: path.join(stateDir, "data", "postgres"), port: await choosePort(preferred) })
        ),
        (pg) => Effect.promise(pg.stop)
      )
      env.DATABASE_URL = pg.url
      yield* Console.log(`postgres  ${pg.url} (data in ${pg.dir})`)
    }
    return env
  })

/**
 * The dev stack's SVC_ENCRYPTION_KEYS: the environment's, else `.svc/encryption-keys` (mode 0600,
 * git-ignored), generated on the first start and kept, since the dev database's sealed values
 * open only with it. Its key id is random, so a lost file shows as "sealed with key id dev-...,
 * which SVC_ENCRYPTION_KEYS does not list" rather than as tampering.
 */
const devEncryptionKeys = (stateDir: string) =>
  Effect.gen(function*() {
    if (yield* EncryptionKeysSet) return {}
    const file = path.join(stateDir, "encryption-keys")
    const keys = yield* Effect.sync(() => {
      try {
        // `wx`: never replaces a key; of two first starts at once, one writes and both read it.
        fs.writeFileSync(file, generateEncryptionKey(`dev-${crypto.randomBytes(4).toString("hex")}`) + "\n", {
          mode: 0o600,
          flag: "wx"
        })
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e
      }
      return fs.readFileSync(file, "utf8").trim()
    })
    yield* Console.log(`keys      ${file} (SVC_ENCRYPTION_KEYS)`)
    return { SVC_ENCRYPTION_KEYS: keys }
  })

/** Where `svc dev` lists the dev org's key as a secret manager (`SVC_SECRET_MANAGER_API_KEY_IDS_FILE`). */
const SECRET_MANAGERS_FILE = "secret-managers"

/**
 * The dev org and its full-access key: printed, and written to `.svc/dev-credentials.json` (mode
 * 0600, git-ignored) as `{base_url, org_id, api_key}` for scripts and the CLI; its id goes to
 * `.svc/secret-managers`, so that it may manage the dev org's secrets.
 */
const devCredentials = (stateDir: string, baseUrl: string) =>
  Effect.gen(function*() {
    const file = path.join(stateDir, "dev-credentials.json")
    const previous = fs.existsSync(file) ? (JSON.parse(fs.readFileSync(file, "utf8")) as Record<string, unknown>) : null
    const creds = yield* ensureDevOrg(previous)
    fs.writeFileSync(
      file,
      JSON.stringify({ base_url: baseUrl, org_id: creds.org_id, api_key: creds.api_key }, null, 2) + "\n",
      { mode: 0o600 }
    )
    fs.writeFileSync(path.join(stateDir, SECRET_MANAGERS_FILE), `${creds.key_id}\n`)
    yield* Console.log(`org       ${creds.org_id}`)
    yield* Console.log(`api key   ${creds.api_key}${creds.minted ? " (new)" : ""}`)
    yield* Console.log(`          saved in ${file}`)
  }).pipe(Effect.provide(AuthLayer.operatorLayer))

/**
 * A closed terminal (SIGHUP) stops `svc dev` as Ctrl-C does, instead of killing the process on
 * the spot and leaving its sandboxes behind; what it prints from then on goes nowhere.
 */
const stopOnHangup = Effect.acquireRelease(
  Effect.sync(() => {
    const ignore = () => {}
    const onHangup = () => {
      process.stdout.on("error", ignore)
      process.stderr.on("error", ignore)
      process.kill(process.pid, "SIGTERM")
    }
    process.on("SIGHUP", onHangup)
    return onHangup
  }),
  (onHangup) => Effect.sync(() => process.off("SIGHUP", onHangup))
)

export const dev = Command.make(
  "dev",
  {},
  Effect.fn("Cli.dev")(function*() {
    const stateDir = yield* StateDir
    yield* stopOnHangup
    fs.mkdirSync(stateDir, { recursive: true })
    const env = {
      SVC_DATA_DIR: path.join(stateDir, "data"),
      // The dev org's key is a userless service key: listed here (by `devCredentials`) it may
      // manage the dev org's secrets, as the README's curl examples do.
      SVC_SECRET_MANAGER_API_KEY_IDS_FILE: path.join(stateDir, SECRET_MANAGERS_FILE),
      ...(yield* localServers(stateDir)),
      ...(yield* devEncryptionKeys(stateDir))
    }
    // The environment first; what svc dev started or generated stands in for what it leaves unset.
    const config = ConfigProvider.fromEnv().pipe(ConfigProvider.orElse(ConfigProvider.fromEnv({ env })))
    const baseUrl = `http://127.0.0.1:${yield* ApiPort}`
    return yield* Layer.launch(
      AllRoles.pipe(
        // Built first and shared with the roles (layers are memoized): the dev org needs the database.
        Layer.provideMerge(Layer.mergeAll(Database.layer, Nats.layer)),
        Layer.tap((context) =>
          Effect.andThen(
            Console.log(`api       ${baseUrl} (the dashboard at ${baseUrl}/, docs at ${baseUrl}/docs)`),
            devCredentials(stateDir, baseUrl).pipe(Effect.provide(context))
          )
        )
      )
    ).pipe(Effect.provide(ConfigProvider.layer(config)))
  }, Effect.scoped)
).pipe(Command.withDescription("Run NATS, Postgres and every role of the platform on this machine"))
