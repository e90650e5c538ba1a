/**
 * `svc dev` with its own NATS and Postgres (what `npm start` runs), attacked by another user of
 * the machine (`nobody`, through `setpriv`), in a state folder created 0755 as `mkdir -p .svc`
 * leaves it:
 * - NATS: a client without a user is refused (`Authorization Violation`) before it may subscribe
 *   to anything (the `hosts` bucket holds every agent's data-plane token: exec as root in any
 *   sandbox);
 * - Postgres: no connection without the password, over 127.0.0.1 or the socket;
 * - the state folder: not listed, none of its files read (the dev key, the passwords, NATS's
 *   configuration and store), every file svc dev wrote there 0600.
 * And the platform still works, each role on its own NATS user with a deployment's permissions:
 * a sandbox runs a command with its env, every role's heartbeat is listed, the NATS server logged
 * no permission violation, the agent's own user may not read the `hosts` bucket, the password in
 * `database-url` opens Postgres; Ctrl-C stops it all, the sandbox too.
 */
import { expect, it } from "@effect/vitest"
import { makeHostId } from "@svc/domain/Ids"
import { eventually } from "@svc/testing/Eventually"
import { processesOfHost } from "@svc/testing/HostProcesses"
import { cleanUpHost } from "@svc/testing/TestHost"
import { call } from "@svc/testing/TestHttp"
import { appMain, freePort, spawnRole } from "@svc/testing/TestProcess"
import { Duration, Effect } from "effect"
import { spawnSync } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"

/**
 * The raw protocol's exchange with a NATS server on loopback (bash's /dev/tcp), as `run` runs
 * bash: the server's answer, once it has one. A server refusing a CONNECT closes the connection
 * at once, at times with a reset that drops its answer (`-ERR`) before the client reads it, or
 * before the client wrote (bash killed by SIGPIPE): that exchange (no whole answer) is tried
 * again, a quarter of a second later, for up to about 10 s (right after the stack is up, several
 * in a row ended so under CI's load: ten back to back were not enough).
 */
const natsExchange = (
  run: (cmd: string, args: ReadonlyArray<string>) => ReturnType<typeof spawnSync>,
  port: number,
  lines: ReadonlyArray<string>
) => {
  let answer = ""
  for (let attempt = 0; attempt < 40 && !/\r\n(-ERR|PONG)/.test(answer); attempt++) {
    if (attempt > 0) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 250)
    answer = run("bash", [
      "-c",
      `exec 3<>/dev/tcp/127.0.0.1/${port}
printf '%s' "$1" >&3
timeout 3 cat <&3`,
      "nats",
      lines.map((line) => `${line}\r\n`).join("")
    ]).stdout.toString()
  }
  return answer
}

/** `cmd args` as the unprivileged user nobody, from a folder anyone may enter. */
const asNobody = (cmd: string, args: ReadonlyArray<string>) =>
  spawnSync("setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", "--", cmd, ...args], {
    cwd: "/",
    encoding: "utf8",
    env: { PATH: process.env["PATH"] ?? "/usr/bin:/bin" },
    timeout: 30_000
  })

/** What nobody sends: no user, then a subscription to every subject and to the `hosts` bucket's records. */
const NOBODY_LINES = ["CONNECT {\"verbose\":true}", "PING", "SUB > 1", "SUB $KV.hosts.> 2", "PING"]

it.live(
  "npm start's stack: another local user gets nothing from its NATS, its Postgres or its state folder; every role works on its own NATS user",
  () =>
    Effect.gen(function*() {
      const stateDir = yield* Effect.acquireRelease(
        Effect.sync(() => {
          const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "svc-devstack-"))
          // As `mkdir -p .svc` leaves it: svc dev must close it.
          Fs.chmodSync(dir, 0o755)
          return dir
        }),
        (dir) => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))
      )
      const hostId = makeHostId()
      // The agent's data under the state folder, as with npm start; ended before the folder goes.
      yield* Effect.addFinalizer(() => cleanUpHost({ hostId, dataDir: Path.join(stateDir, "data", "hosts", hostId) }))
      const [apiPort, natsPort, pgPort] = yield* Effect.all([freePort, freePort, freePort])
      const base = `http://127.0.0.1:${apiPort}`
      const dev = yield* spawnRole({
        main: appMain("cli"),
        args: ["dev"],
        env: {
          // No NATS_URL, no DATABASE_URL: svc dev starts its own, as npm start does.
          SVC_STATE_DIR: stateDir,
          SVC_PORT: String(apiPort),
          SVC_DEV_NATS_PORT: String(natsPort),
          SVC_DEV_PG_PORT: String(pgPort),
          SVC_HOST_ID: hostId,
          SVC_AGENT_POOL_SIZE: "0",
          SVC_HOST_CPU: "16",
          SVC_HOST_RAM_MB: "16384",
          SVC_HOST_DISK_GB: "100"
        },
        ready: (stdout) => (stdout.includes("api key") ? true : undefined),
        timeout: Duration.seconds(120)
      })
      yield* Effect.addFinalizer(() =>
        Effect.promise(async () => {
          dev.process.kill("SIGINT")
          await dev.exited
        })
      )
      // The ports it chose (its preferred ones, unless taken meanwhile).
      const printed = dev.output()
      const natsUrl = /nats +(nats:\/\/\S+)/.exec(printed)?.[1]
      const pgAddress = /postgres +\S*?127\.0\.0\.1:(\d+)/.exec(printed)?.[1]
      expect(natsUrl, printed).toBeDefined()
      expect(pgAddress, printed).toBeDefined()
      const usedNatsPort = Number(new URL(natsUrl!).port)

      // NATS: nobody is refused before any subscription.
      const nats = natsExchange(asNobody, usedNatsPort, NOBODY_LINES)
      expect(nats).toContain("INFO")
      expect(nats).toContain("Authorization Violation")
      expect(nats).not.toContain("PONG")
      expect(nats).not.toContain("+OK")

      // Postgres: no password, no connection, over TCP or the socket.
      const overTcp = asNobody("psql", [
        "-h",
        "127.0.0.1",
        "-p",
        pgAddress!,
        "-U",
        "postgres",
        "-w",
        "-Atc",
        "select 1"
      ])
      expect(overTcp.status, overTcp.stdout).not.toBe(0)
      expect(overTcp.stderr).toMatch(/password/)
      const pgDir = Path.join(stateDir, "data", "postgres")
      const overSocket = asNobody("psql", ["-h", pgDir, "-p", pgAddress!, "-U", "postgres", "-w", "-Atc", "select 1"])
      expect(overSocket.status, overSocket.stdout).not.toBe(0)
      expect(overSocket.stdout).toBe("")

      // The state folder: closed, and every file svc dev wrote in it its own alone.
      const written = Fs.readdirSync(stateDir).filter((name) => Fs.statSync(Path.join(stateDir, name)).isFile())
      expect(written).toEqual(
        expect.arrayContaining(["database-url", "dev-credentials.json", "nats-credentials.json", "secret-managers"])
      )
      expect(Fs.statSync(stateDir).mode & 0o007).toBe(0)
      expect(Fs.statSync(Path.join(stateDir, "data")).mode & 0o007).toBe(0)
      for (const name of written) {
        expect([name, (Fs.statSync(Path.join(stateDir, name)).mode & 0o777).toString(8)]).toEqual([name, "600"])
      }
      const listed = asNobody("ls", [stateDir, Path.join(stateDir, "data")])
      expect(listed.status).not.toBe(0)
      expect(listed.stdout).toBe("")
      expect(listed.stderr).toContain("Permission denied")
      const targets = [
        ...written.map((name) => Path.join(stateDir, name)),
        Path.join(stateDir, "data", "nats", "nats.conf"),
        Path.join(stateDir, "data", "nats", "nats.log"),
        Path.join(pgDir, "postgres.log")
      ]
      for (const file of targets) {
        const read = asNobody("cat", [file])
        expect([file, read.status, read.stdout]).toEqual([file, 1, ""])
        expect(read.stderr).toContain("Permission denied")
      }

      // Every role works on its own user: a sandbox runs a command with its env.
      const token = JSON.parse(Fs.readFileSync(Path.join(stateDir, "dev-credentials.json"), "utf8")).api_key as string
      const api = (method: string, path: string, body?: unknown) =>
        call(base, method, path, { token, ...(body !== undefined ? { body } : {}) })
      const created = yield* api("POST", "/v1/sandboxes", { name: "devstack", env: { GREETING: "hi" } })
      expect(created.status, created.text).toBe(201)
      const sandboxId = created.json.id as string
      yield* eventually(
        api("GET", `/v1/sandboxes/${sandboxId}`),
        (r) => r.json?.state === "running",
        Duration.seconds(90),
        Duration.millis(200)
      )
      const exec = yield* api("POST", `/v1/sandboxes/${sandboxId}/exec`, { cmd: ["sh", "-c", "echo $GREETING"] })
      expect(exec.status, exec.text).toBe(200)
      expect(exec.json.stdout).toBe("hi\n")
      yield* eventually(
        api("GET", "/v1/workers"),
        (r) =>
          ["api", "runtime", "dispatcher", "agent"].every((role) =>
            r.json?.workers?.some((w: { script_name: string }) => w.script_name === role)
          ),
        Duration.seconds(30),
        Duration.millis(200)
      )
      const users = JSON.parse(Fs.readFileSync(Path.join(stateDir, "nats-credentials.json"), "utf8")).users
      expect(Object.keys(users).sort()).toEqual(["agent-" + hostId, "api", "dispatcher", "runtime"].sort())
      const natsLog = Fs.readFileSync(Path.join(stateDir, "data", "nats", "nats.log"), "utf8")
      // Each role within its user's permissions (a role on another's user would break them).
      expect(natsLog.split("\n").filter((l) => /permissions violation/i.test(l))).toEqual([])
      // The hosts' records (their data-plane tokens) are for api and runtime: not even the agent
      // reads them with its own user.
      const asAgent = natsExchange(
        (cmd, args) => spawnSync(cmd, args, { encoding: "utf8", timeout: 30_000 }),
        usedNatsPort,
        [
          "CONNECT " + JSON.stringify({ verbose: true, user: `agent-${hostId}`, pass: users[`agent-${hostId}`] }),
          "PING",
          "SUB $KV.hosts.> 1",
          "PING"
        ]
      )
      expect(asAgent).toContain("PONG")
      expect(asAgent).toContain(`Permissions Violation for Subscription to "$KV.hosts.>"`)
      const withPassword = spawnSync(
        "psql",
        [Fs.readFileSync(Path.join(stateDir, "database-url"), "utf8").trim(), "-w", "-Atc", "select current_user"],
        { encoding: "utf8" }
      )
      expect(withPassword.stdout.trim(), withPassword.stderr).toBe("postgres")

      // Ctrl-C: every role, built apart, stops on its own, and the sandbox with them.
      expect(processesOfHost(hostId).length).toBeGreaterThan(0)
      dev.process.kill("SIGINT")
      yield* Effect.promise(() => dev.exited).pipe(
        Effect.timeoutOrElse({
          duration: Duration.seconds(60),
          orElse: () => Effect.die(new Error(`no exit after SIGINT: ${dev.output().slice(-3000)}`))
        })
      )
      // Its own exit (130, as an interrupted program), not a signal's.
      expect(dev.process.signalCode, dev.output().slice(-3000)).toBe(null)
      expect(processesOfHost(hostId)).toEqual([])
    }).pipe(Effect.scoped),
  300_000
)
