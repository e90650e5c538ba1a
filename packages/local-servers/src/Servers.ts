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

/** Postgres refuses to run as root: run it as the `postgres` user the Debian package creates. */
const postgresUser = (): string | undefined => (isRoot() ? "postgres" : undefined)

const spawnGuarded = (
  cmd: string,
  args: ReadonlyArray<string>,
  options: { user?: string | undefined; logFile: string }
) => {
  const privArgs = ["--pdeathsig", "SIGKILL"]
  if (options.user) privArgs.push("--reuid", options.user, "--regid", options.user, "--init-groups")
  const log = fs.openSync(options.logFile, "a")
  // Its own process group: a Ctrl-C in the terminal reaches only our process, which then stops
  // the platform first and the servers last (pdeathsig still covers our own death).
  const child = spawn("setpriv", [...privArgs, "--", cmd, ...args], { stdio: ["ignore", log, log], detached: true })
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

/** A single-node nats-server with JetStream and its store in a temp folder (or `dir`). */
export const startNats = async (
  options: { dir?: string | undefined; port?: number | undefined; config?: string | undefined } = {}
): Promise<NatsServer> => {
  const dir = options.dir ?? fs.mkdtempSync(path.join(os.tmpdir(), "svc-nats-"))
  fs.mkdirSync(dir, { recursive: true })
  const port = options.port ?? (await freePort())
  const args = ["-a", "127.0.0.1", "-p", String(port), "-js", "-sd", path.join(dir, "jetstream")]
  if (options.config) args.unshift("-c", options.config)
  const child = spawnGuarded(natsBin(), args, { logFile: path.join(dir, "nats.log") })
  await waitForPort(port, 20_000, child)
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

/**
 * A Postgres cluster of our own: `initdb` into a folder (trust auth on loopback only), then the
 * `postgres` binary on a free port with its socket in the same folder.
 */
export const startPostgres = async (
  options: {
    dir?: string | undefined
    port?: number | undefined
    /** More server settings (`-c name=value`), e.g. `track_commit_timestamp: "on"` for a benchmark. */
    settings?: Readonly<Record<string, string>> | undefined
  } = {}
): Promise<PostgresServer> => {
  const temp = options.dir === undefined
  const dir = options.dir ?? fs.mkdtempSync(path.join(os.tmpdir(), "svc-pg-"))
  const data = path.join(dir, "data")
  const user = postgresUser()
  fs.mkdirSync(dir, { recursive: true })
  if (user) {
    fs.chmodSync(dir, 0o755)
    spawnSync("chown", ["-R", `${user}:${user}`, dir])
  }
  if (!fs.existsSync(path.join(data, "PG_VERSION"))) {
    const initArgs = ["-D", data, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8", "--locale=C"]
    const res = user
      ? spawnSync("setpriv", [
        "--reuid",
        user,
        "--regid",
        user,
        "--init-groups",
        "--",
        postgresBin("initdb"),
        ...initArgs
      ], { encoding: "utf8" })
      : spawnSync(postgresBin("initdb"), initArgs, { encoding: "utf8" })
    if (res.status !== 0) throw new Error(`initdb failed: ${res.stderr || res.stdout}`)
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
        "-Atc",
        "select 1"
      ], { encoding: "utf8" })
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
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
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
