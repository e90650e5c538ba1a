/**
 * Local NATS (JetStream) and Postgres servers for tests, benchmarks and `svc dev`.
 *
 * Every child is started through `setpriv --pdeathsig SIGKILL` so that it dies with the process
 * that started it, even when that process is killed -9: no server outlives a test run.
 */
import { type ChildProcess, spawn, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"

export const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const server = net.createServer()
    server.unref()
    server.on("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as net.AddressInfo
      server.close(() => resolve(port))
    })
  })

export const waitForPort = async (port: number, timeoutMs = 20_000, child?: ChildProcess): Promise<void> => {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    if (child && child.exitCode !== null) {
      throw new Error(`process exited with ${child.exitCode} before listening on ${port}`)
    }
    const ok = await new Promise<boolean>((resolve) => {
      const socket = net.connect(port, "127.0.0.1")
      socket.once("connect", () => {
        socket.destroy()
        resolve(true)
      })
      socket.once("error", () => resolve(false))
    })
    if (ok) return
    if (Date.now() > deadline) throw new Error(`nothing listens on 127.0.0.1:${port} after ${timeoutMs} ms`)
    await new Promise((r) => setTimeout(r, 25))
  }
}

const which = (cmd: string, extra: ReadonlyArray<string> = []): string | undefined => {
  for (const dir of [...(process.env.PATH ?? "").split(":"), ...extra]) {
    const candidate = path.join(dir, cmd)
    try {
      fs.accessSync(candidate, fs.constants.X_OK)
      return candidate
    } catch {}
  }
  return undefined
}

/** Debian installs the server binaries out of PATH, under /usr/lib/postgresql/<major>/bin. */
export const postgresBin = (name: "initdb" | "postgres" | "pg_ctl"): string => {
  const versions = fs.existsSync("/usr/lib/postgresql")
    ? fs.readdirSync("/usr/lib/postgresql").sort((a, b) => Number(b) - Number(a))
    : []
  const found = which(name, versions.map((v) => `/usr/lib/postgresql/${v}/bin`))
  if (!found) throw new Error(`${name} not found: install Debian's postgresql package (npm test does)`)
  return found
}

export const natsBin = (): string => {
  const found = which("nats-server", ["/usr/sbin", "/usr/local/sbin"])
  if (!found) throw new Error("nats-server not found: install Debian's nats-server package (npm test does)")
  return found
}

const isRoot = () => process.getuid?.() === 0

const logTail = (file: string) => {
  try {
    return fs.readFileSync(file, "utf8").slice(-1000)
  } catch {
    return "(no log)"
  }
}

/** Writes a file only its owner reads (0600, also when it existed with a wider mode). */
export const writePrivate = (file: string, content: string): void => {
  fs.writeFileSync(file, content, { mode: 0o600 })
  fs.chmodSync(file, 0o600)
}

/** Postgres refuses to run as root: run it as the `postgres` user the Debian package creates. */
export const postgresUser = (): string | undefined => (isRoot() ? "postgres" : undefined)

const spawnGuarded = (
  cmd: string,
  args: ReadonlyArray<string>,
  options: { user?: string | undefined; logFile: string; env?: Readonly<Record<string, string>> | undefined }
) => {
  const privArgs = ["--pdeathsig", "SIGKILL"]
  if (options.user) privArgs.push("--reuid", options.user, "--regid", options.user, "--init-groups")
  const log = fs.openSync(options.logFile, "a")
  // Its own process group: a Ctrl-C in the terminal reaches only our process, which then stops
  // the platform first and the servers last (pdeathsig still covers our own death).
  const child = spawn("setpriv", [...privArgs, "--", cmd, ...args], {
    stdio: ["ignore", log, log],
    detached: true,
    ...(options.env ? { env: { ...process.env, ...options.env } } : {})
  })
  fs.closeSync(log)
  return child
}

const stopChild = (child: ChildProcess, signal: NodeJS.Signals, timeoutMs = 10_000): Promise<void> =>
  new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve()
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs)
    child.once("exit", () => {
      clearTimeout(timer)
      resolve()
    })
    child.kill(signal)
  })

export interface NatsServer {
  readonly url: string
  readonly port: number
  readonly dir: string
  stop(): Promise<void>
}

/**
 * A single-node nats-server with JetStream and its store in a temp folder (or `dir`). With
 * `authorization` (a nats-server `authorization { ... }` block, see @svc/host-protocol/Permissions)
 * clients need a user: the block goes into `<dir>/nats.conf` (mode 0600), and the passwords it
 * names as `$VARIABLE`s come from `passwords` (variable → password) through the server's
 * environment (readable by its own user only), never from a file or the command line.
 */
export const startNats = async (
  options: {
    dir?: string | undefined
    port?: number | undefined
    config?: string | undefined
    authorization?: string | undefined
    passwords?: Readonly<Record<string, string>> | undefined
  } = {}
): Promise<NatsServer> => {
  const dir = options.dir ?? fs.mkdtempSync(path.join(os.tmpdir(), "svc-nats-"))
  fs.mkdirSync(dir, { recursive: true })
  const port = options.port ?? (await freePort())
  const args = ["-a", "127.0.0.1", "-p", String(port), "-js", "-sd", path.join(dir, "jetstream")]
  if (options.authorization !== undefined) {
    // Its store holds what the users may read only by their permissions (the hosts' tokens).
    fs.chmodSync(dir, 0o700)
    const config = path.join(dir, "nats.conf")
    writePrivate(config, options.authorization + "\n")
    args.unshift("-c", config)
  } else if (options.config) args.unshift("-c", options.config)
  // nats-server parses a variable's value as configuration (`2026-11-27x` would be a bad date,
  // `1234` a number): quoted, each is a string.
  const env = Object.fromEntries(
    Object.entries(options.passwords ?? {}).map(([variable, password]) => [variable, JSON.stringify(password)])
  )
  const child = spawnGuarded(natsBin(), args, { logFile: path.join(dir, "nats.log"), env })
  await waitForPort(port, 20_000, child).catch((e: Error) => {
    // Why it ended is in its log (a port taken meanwhile, a configuration it refused).
    throw new Error(`${e.message}: ${logTail(path.join(dir, "nats.log"))}`)
  })
  return {
    url: `nats://127.0.0.1:${port}`,
    port,
    dir,
    stop: async () => {
      await stopChild(child, "SIGTERM")
      if (!options.dir) fs.rmSync(dir, { recursive: true, force: true })
    }
  }
}

export interface PostgresServer {
  readonly url: string
  readonly port: number
  readonly dir: string
  /** Stops the server, keeping its data (a later `start()` brings it back). */
  stop(): Promise<void>
  start(): Promise<void>
  /** Stops the server and removes its data when it lives in a temp folder. */
  close(): Promise<void>
}

/** Runs `cmd` as `user` (setpriv) or as ourselves; `input` goes to its stdin. */
const runAs = (user: string | undefined, cmd: string, args: ReadonlyArray<string>, input?: string) =>
  user
    ? spawnSync("setpriv", ["--reuid", user, "--regid", user, "--init-groups", "--", cmd, ...args], {
      encoding: "utf8",
      ...(input !== undefined ? { input } : {})
    })
    : spawnSync(cmd, args, { encoding: "utf8", ...(input !== undefined ? { input } : {}) })

/**
 * With a password, every connection needs it (scram-sha-256), over TCP and over the socket alike:
 * nothing is trusted. Rewritten at each start, so that a cluster made with `trust` (by an older
 * `svc dev`) is closed too.
 */
const PASSWORD_HBA = `# Written by @svc/local-servers at each start: the password for everyone, trust for no one.
local all all scram-sha-256
host all all 127.0.0.1/32 scram-sha-256
host all all ::1/128 scram-sha-256
`

/**
 * A Postgres cluster of our own: `initdb` into a folder, then the `postgres` binary on a free port
 * with its socket in the same folder.
 *
 * Without `password` (the tests' throwaway servers) it trusts every connection on loopback and the
 * socket. With one (`svc dev`) the superuser `postgres` has that password (set again at each start,
 * in single-user mode, before the server listens), `pg_hba.conf` asks it of every connection, and
 * the folder (socket, log, data) is mode 0700: only the server's own user reaches the socket.
 */
export const startPostgres = async (
  options: {
    dir?: string | undefined
    port?: number | undefined
    /** More server settings (`-c name=value`), e.g. `track_commit_timestamp: "on"` for a benchmark. */
    settings?: Readonly<Record<string, string>> | undefined
    /** The superuser's password; every connection must give it (see above). */
    password?: string | undefined
  } = {}
): Promise<PostgresServer> => {
  const temp = options.dir === undefined
  const dir = options.dir ?? fs.mkdtempSync(path.join(os.tmpdir(), "svc-pg-"))
  const data = path.join(dir, "data")
  const user = postgresUser()
  const password = options.password
  fs.mkdirSync(dir, { recursive: true })
  fs.chmodSync(dir, password !== undefined ? 0o700 : 0o755)
  if (user) spawnSync("chown", ["-R", `${user}:${user}`, dir])
  if (!fs.existsSync(path.join(data, "PG_VERSION"))) {
    const initArgs = ["-D", data, "-U", "postgres", "--no-sync", "-E", "UTF8", "--locale=C"]
    // initdb reads the password from a file: one of the server's user's own, removed at once.
    const pwfile = path.join(dir, "initdb-password")
    if (password !== undefined) {
      writePrivate(pwfile, password + "\n")
      if (user) spawnSync("chown", [`${user}:${user}`, pwfile])
      initArgs.push("-A", "scram-sha-256", `--pwfile=${pwfile}`)
    } else initArgs.push("-A", "trust")
    const res = runAs(user, postgresBin("initdb"), initArgs)
    fs.rmSync(pwfile, { force: true })
    if (res.status !== 0) throw new Error(`initdb failed: ${res.stderr || res.stdout}`)
  }
  if (password !== undefined) {
    const hba = path.join(data, "pg_hba.conf")
    writePrivate(hba, PASSWORD_HBA)
    if (user) spawnSync("chown", [`${user}:${user}`, hba])
    // On stdin, never on a command line (which every local user sees in ps). The alphabet of
    // the password is the caller's: quotes are doubled for the SQL literal.
    const res = runAs(
      user,
      postgresBin("postgres"),
      ["--single", "-D", data, "-c", "password_encryption=scram-sha-256", "postgres"],
      `ALTER ROLE postgres PASSWORD '${password.replaceAll("'", "''")}';\n`
    )
    if (res.status !== 0) throw new Error(`setting the postgres password failed: ${res.stderr || res.stdout}`)
  }
  const port = options.port ?? (await freePort())
  let child: ChildProcess | undefined
  const start = async () => {
    child = spawnGuarded(
      postgresBin("postgres"),
      [
        "-D",
        data,
        "-p",
        String(port),
        "-k",
        dir,
        "-c",
        "listen_addresses=127.0.0.1",
        ...(password !== undefined
          ? ["-c", "unix_socket_permissions=0700", "-c", "password_encryption=scram-sha-256"]
          : []),
        "-c",
        "fsync=off",
        "-c",
        "synchronous_commit=off",
        "-c",
        "full_page_writes=off",
        "-c",
        "max_connections=300",
        ...Object.entries(options.settings ?? {}).flatMap(([name, value]) => ["-c", `${name}=${value}`])
      ],
      { user, logFile: path.join(dir, "postgres.log") }
    )
    await waitForPort(port, 30_000, child)
    // Accepting TCP is not accepting queries: wait until the start-up finishes.
    for (let i = 0; i < 200; i++) {
      const res = spawnSync("psql", [
        "-h",
        "127.0.0.1",
        "-p",
        String(port),
        "-U",
        "postgres",
        "-d",
        "postgres",
        "-w",
        "-Atc",
        "select 1"
      ], { encoding: "utf8", env: { ...process.env, ...(password !== undefined ? { PGPASSWORD: password } : {}) } })
      if (res.status === 0) return
      await new Promise((r) => setTimeout(r, 50))
    }
    throw new Error("postgres did not accept queries")
  }
  const stop = async () => {
    if (child) await stopChild(child, "SIGINT")
    child = undefined
  }
  await start()
  const credentials = password !== undefined ? `postgres:${encodeURIComponent(password)}` : "postgres"
  return {
    url: `postgres://${credentials}@127.0.0.1:${port}/postgres`,
    port,
    dir,
    stop,
    start,
    close: async () => {
      await stop()
      if (temp) fs.rmSync(dir, { recursive: true, force: true })
    }
  }
}

export interface NatsCluster {
  /** Every node's client URL, for a client that fails over between them. */
  readonly urls: ReadonlyArray<string>
  readonly nodes: ReadonlyArray<NatsServer>
  /** Kills one node (SIGKILL: a crash, not a shutdown). */
  kill(index: number): Promise<void>
  /** Starts a node killed or stopped before, on its port and with its store (it rejoins the cluster). */
  start(index: number): Promise<void>
  stop(): Promise<void>
}

/** nats-server's client `tls` block (a generous handshake timeout: the machines are loaded). */
const tlsBlock = (tls: { readonly certFile: string; readonly keyFile: string; readonly caFile?: string } | undefined) =>
  tls === undefined ? "" : `tls {
  cert_file: ${JSON.stringify(tls.certFile)}
  key_file: ${JSON.stringify(tls.keyFile)}
${tls.caFile !== undefined ? `  ca_file: ${JSON.stringify(tls.caFile)}\n  verify: true\n` : ""}  timeout: 5
}`

/**
 * A 3-node JetStream cluster on loopback, shaped like infra/nats/cluster-*.conf but on free
 * ports and temp folders, for tests of node loss. `authorization` is a nats-server
 * `authorization { ... }` block every node gets (clients then need a user).
 */
export const startNatsCluster = async (
  size = 3,
  options: {
    readonly authorization?: string
    /**
     * Clients only over TLS with this server certificate; with `caFile`, clients must present a
     * certificate signed by that CA (`verify`). Routes between the nodes stay on loopback in clear.
     */
    readonly tls?: { readonly certFile: string; readonly keyFile: string; readonly caFile?: string }
  } = {}
): Promise<NatsCluster> => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "svc-nats-cluster-"))
  const clientPorts = await Promise.all(Array.from({ length: size }, freePort))
  const routePorts = await Promise.all(Array.from({ length: size }, freePort))
  const routes = routePorts.map((p) => `nats-route://127.0.0.1:${p}`).join("\n    ")
  const children: Array<ChildProcess> = []
  const configs = clientPorts.map((port, i) => {
    const nodeDir = path.join(dir, `n${i + 1}`)
    fs.mkdirSync(nodeDir, { recursive: true })
    const config = path.join(nodeDir, "nats.conf")
    fs.writeFileSync(
      config,
      `server_name: n${i + 1}
listen: 127.0.0.1:${port}
jetstream { store_dir: "${path.join(nodeDir, "jetstream")}" }
cluster {
  name: svc-test
  listen: 127.0.0.1:${routePorts[i]}
  routes: [
    ${routes}
  ]
}
${options.authorization ?? ""}
${tlsBlock(options.tls)}
`
    )
    return { config, nodeDir, port }
  })
  const startNode = async (i: number) => {
    const { config, nodeDir, port } = configs[i]!
    const child = spawnGuarded(natsBin(), ["-c", config], { logFile: path.join(nodeDir, "nats.log") })
    children[i] = child
    await waitForPort(port, 20_000, child)
  }
  await Promise.all(configs.map((_, i) => startNode(i)))
  return {
    urls: configs.map((c) => `nats://127.0.0.1:${c.port}`),
    nodes: configs.map((c, i) => ({
      url: `nats://127.0.0.1:${c.port}`,
      port: c.port,
      dir: c.nodeDir,
      stop: () => stopChild(children[i]!, "SIGTERM")
    })),
    kill: (index) => stopChild(children[index]!, "SIGKILL"),
    start: (index) => startNode(index),
    stop: async () => {
      await Promise.all(children.map((child) => stopChild(child, "SIGTERM")))
      fs.rmSync(dir, { recursive: true, force: true })
    }
  }
}
