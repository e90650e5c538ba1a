/**
 * `svc dev`: the whole platform on one machine in one process. Starts NATS (JetStream) and
 * Postgres with their data under `<SVC_STATE_DIR>/data` (`.svc/data`) unless NATS_URL /
 * DATABASE_URL point elsewhere, applies migrations, runs every role (`AllRoles`), and stops
 * everything on Ctrl-C (SIGINT, SIGTERM, or SIGHUP when its terminal closes): the API first, then
 * the other roles (the agent ends its warm pool, then stops this host's sandboxes), then NATS and
 * Postgres. Without SVC_ENCRYPTION_KEYS it seals secrets with a key of its own, generated once
 * into `.svc/encryption-keys`; without SVC_DATA_DIR the agent keeps its data in `.svc/data`.
 *
 * Nothing of it is open to the machine's other users: the state folder is its own (0700; 0710
 * with Postgres's group when Postgres runs as its own user, which must pass through to its
 * folder), every file it writes there is 0600, its NATS has a user per role with a deployment's
 * permissions (`@svc/host-protocol/Permissions`), each role connecting as its own, and its
 * Postgres asks a password of every connection. Both sets of passwords are new at each start.
 */
import { hostIdFromHostname, HostIdSetting } from "@svc/agent/Config"
import { ApiPort } from "@svc/api/Config"
import * as AuthLayer from "@svc/auth/AuthLayer"
import { ensureDevOrg } from "@svc/auth/DevOrg"
import { NatsPrefix, NatsUrlIfSet } from "@svc/bus/Config"
import { EncryptionKeysSet, generateEncryptionKey } from "@svc/crypto/Config"
import { DatabaseUrlIfSet } from "@svc/db/Config"
import * as Database from "@svc/db/Database"
import { agentUser, authorizationBlock, passwordVariable, platformUsers } from "@svc/host-protocol/Permissions"
import { postgresUser, startNats, startPostgres, writePrivate } from "@svc/local-servers/Servers"
import { ConfigProvider, Console, Effect, Layer, Option } from "effect"
import { Command } from "effect/cli"
import { spawnSync } from "node:child_process"
import * as crypto from "node:crypto"
import * as fs from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import { DevNatsPort, DevPostgresPort, StateDir } from "../Config.ts"
import { AllRoles, allRoles, type RoleName } from "../Platform.ts"

const portFree = (port: number) =>
  new Promise<boolean>((resolve) => {
    const server = net.createServer()
    server.once("error", () => resolve(false))
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)))
  })

/** Our fixed dev port when it is free, else any free one (a machine may run its own servers). */
const choosePort = async (preferred: number) => ((await portFree(preferred)) ? preferred : undefined)

const newPassword = () => crypto.randomBytes(32).toString("base64url")

/** A folder only our user enters; `group` (Postgres's, when it runs as its own user) may pass through, not list. */
const privateDir = (dir: string, group: string | undefined) => {
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 })
  if (group !== undefined) {
    const res = spawnSync("chgrp", [group, dir], { encoding: "utf8" })
    if (res.status !== 0) throw new Error(`chgrp ${group} ${dir}: ${res.stderr}`)
  }
  fs.chmodSync(dir, group !== undefined ? 0o710 : 0o700)
}

/**
 * The state folder and its `data` folder, closed to the machine's other users (they held the dev
 * key, the encryption key, NATS's store with every host's data-plane token, the sandboxes' files).
 * A shared folder such as /tmp (sticky) is refused rather than closed under its other users.
 */
const closeStateDir = (stateDir: string, ownPostgres: boolean) =>
  Effect.sync(() => {
    if (fs.existsSync(stateDir) && (fs.statSync(stateDir).mode & 0o1000) !== 0) {
      throw new Error(`SVC_STATE_DIR ${stateDir} is a shared folder (sticky): give svc dev a folder of its own`)
    }
    const group = ownPostgres ? postgresUser() : undefined
    privateDir(stateDir, group)
    privateDir(path.join(stateDir, "data"), group)
  })

/** What svc dev's own NATS gives each role: a user of the role's (the agent's of this host). */
type RoleCredentials = Record<RoleName, { readonly user: string; readonly password: string }>

/** Where svc dev writes its own NATS's users and passwords (0600), for an operator's `nats` CLI. */
const NATS_CREDENTIALS_FILE = "nats-credentials.json"
/** Where svc dev writes its own Postgres's URL with the password (0600), for `psql` and `svc org`. */
const DATABASE_URL_FILE = "database-url"

const localServers = (stateDir: string) =>
  Effect.gen(function*() {
    const env: Record<string, string> = {}
    let roles: RoleCredentials | undefined
    if (Option.isNone(yield* NatsUrlIfSet)) {
      // A deployment's users and permissions, for the one host of this machine.
      const prefix = yield* NatsPrefix
      const hostId = Option.getOrElse(yield* HostIdSetting, () => hostIdFromHostname(os.hostname()))
      const credentials: RoleCredentials = {
        api: { user: "api", password: newPassword() },
        runtime: { user: "runtime", password: newPassword() },
        dispatcher: { user: "dispatcher", password: newPassword() },
        agent: { user: agentUser(hostId), password: newPassword() }
      }
      const passwords = Object.fromEntries(
        Object.values(credentials).map(({ password, user }) => [passwordVariable(user), password])
      )
      const preferred = yield* DevNatsPort
      const nats = yield* Effect.acquireRelease(
        Effect.promise(async () =>
          startNats({
            dir: path.join(stateDir, "data", "nats"),
            port: await choosePort(preferred),
            authorization: authorizationBlock(platformUsers({ prefix, hostIds: [hostId] })),
            passwords
          })
        ),
        (nats) => Effect.promise(nats.stop)
      )
      const file = path.join(stateDir, NATS_CREDENTIALS_FILE)
      writePrivate(
        file,
        JSON.stringify(
          { url: nats.url, users: Object.fromEntries(Object.values(credentials).map((c) => [c.user, c.password])) },
          null,
          2
        ) + "\n"
      )
      env.NATS_URL = nats.url
      roles = credentials
      yield* Console.log(`nats      ${nats.url} (data in ${nats.dir}, a user per role in ${file})`)
    }
    if (Option.isNone(yield* DatabaseUrlIfSet)) {
      const preferred = yield* DevPostgresPort
      const pg = yield* Effect.acquireRelease(
        Effect.promise(async () =>
          startPostgres({
            dir: path.join(stateDir, "data", "postgres"),
            port: await choosePort(preferred),
            password: newPassword()
          })
        ),
        (pg) => Effect.promise(pg.stop)
      )
      const file = path.join(stateDir, DATABASE_URL_FILE)
      writePrivate(file, pg.url + "\n")
      env.DATABASE_URL = pg.url
      yield* Console.log(`postgres  127.0.0.1:${pg.port} (data in ${pg.dir}, its URL with the password in ${file})`)
    }
    return { env, roles }
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
      // One written by an older svc dev may be wider.
      fs.chmodSync(file, 0o600)
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
    writePrivate(
      file,
      JSON.stringify({ base_url: baseUrl, org_id: creds.org_id, api_key: creds.api_key }, null, 2) + "\n"
    )
    writePrivate(path.join(stateDir, SECRET_MANAGERS_FILE), `${creds.key_id}\n`)
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
    yield* closeStateDir(stateDir, Option.isNone(yield* DatabaseUrlIfSet))
    const servers = yield* localServers(stateDir)
    const env = {
      SVC_DATA_DIR: path.join(stateDir, "data"),
      // The dev org's key is a userless service key: listed here (by `devCredentials`) it may
      // manage the dev org's secrets, as the README's curl examples do.
      SVC_SECRET_MANAGER_API_KEY_IDS_FILE: path.join(stateDir, SECRET_MANAGERS_FILE),
      ...servers.env,
      ...(yield* devEncryptionKeys(stateDir))
    }
    // The environment first; what svc dev started or generated stands in for what it leaves unset.
    const config = ConfigProvider.fromEnv().pipe(ConfigProvider.orElse(ConfigProvider.fromEnv({ env })))
    const roleCredentials = servers.roles
    // On its own NATS each role is built apart (a memo map of its own: its own connections) with
    // its own user before anything of the environment, as separate processes of a deployment are.
    const roles = roleCredentials === undefined ?
      AllRoles :
      allRoles((role, layer) =>
        Layer.fresh(layer).pipe(Layer.provide(ConfigProvider.layer(
          ConfigProvider.fromEnv({
            env: { NATS_USER: roleCredentials[role].user, NATS_PASSWORD: roleCredentials[role].password }
          }).pipe(ConfigProvider.orElse(config))
        )))
      )
    const baseUrl = `http://127.0.0.1:${yield* ApiPort}`
    return yield* Layer.launch(
      roles.pipe(
        // Built first: the dev org needs the database (and the roles find it migrated).
        Layer.provideMerge(Database.layer),
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
