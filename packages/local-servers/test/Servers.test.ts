/**
 * The throwaway servers of the harness leave nothing behind: not when stopped, not when their
 * owner dies. A Postgres given a password (svc dev's) lets no one in without it, also when its
 * cluster was made open (trust) by an older svc dev.
 */
import { describe, expect, it } from "@effect/vitest"
import { spawn, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import { startNats, startPostgres } from "../src/Servers.ts"

/** What a NATS server answers one CONNECT (raw protocol), then a PING. */
const natsAnswer = (port: number, connect: Record<string, unknown>) =>
  new Promise<string>((resolve) => {
    const socket = net.connect(port, "127.0.0.1")
    let answer = ""
    socket.on("data", (chunk) => {
      answer += chunk.toString("latin1")
      if (/\r\n(-ERR|PONG)/.test(answer)) socket.destroy()
    })
    socket.write(`CONNECT ${JSON.stringify({ verbose: false, ...connect })}\r\nPING\r\n`)
    socket.on("close", () => resolve(answer))
    socket.on("error", () => resolve(answer))
  })

/** `psql -c 'select 1'` as the unprivileged user nobody, without a password. */
const psqlAsNobody = (host: string, port: number) =>
  spawnSync("setpriv", [
    "--reuid=65534",
    "--regid=65534",
    "--clear-groups",
    "--",
    "psql",
    "-h",
    host,
    "-p",
    String(port),
    "-U",
    "postgres",
    "-w",
    "-Atc",
    "select 1"
  ], { cwd: "/", encoding: "utf8", env: { PATH: process.env["PATH"] ?? "/usr/bin:/bin" } })

const listening = (port: number) =>
  new Promise<boolean>((resolve) => {
    const socket = net.connect(port, "127.0.0.1")
    socket.once("connect", () => {
      socket.destroy()
      resolve(true)
    })
    socket.once("error", () => resolve(false))
  })

const eventually = async (check: () => Promise<boolean>, timeoutMs = 10_000) => {
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) {
    if (await check()) return true
    await new Promise((r) => setTimeout(r, 50))
  }
  return false
}

describe("local servers", () => {
  it("stop and close end the processes and remove their temp folders", async () => {
    const [nats, pg] = await Promise.all([startNats(), startPostgres()])
    expect(await listening(nats.port)).toBe(true)
    expect(await listening(pg.port)).toBe(true)
    await Promise.all([nats.stop(), pg.close()])
    expect(await listening(nats.port)).toBe(false)
    expect(await listening(pg.port)).toBe(false)
    expect(fs.existsSync(nats.dir)).toBe(false)
    expect(fs.existsSync(pg.dir)).toBe(false)
  })

  it("servers die with the process that started them, even on kill -9", async () => {
    const script = `
      import { startNats, startPostgres } from ${JSON.stringify(new URL("../src/Servers.ts", import.meta.url).pathname)}
      const [n, p] = await Promise.all([startNats(), startPostgres()])
      console.log(JSON.stringify({ nats: n.port, pg: p.port }))
      setInterval(() => {}, 1000)
    `
    const child = spawn(process.execPath, ["--input-type=module", "-e", script], {
      stdio: ["ignore", "pipe", "inherit"]
    })
    const ports = await new Promise<{ nats: number; pg: number }>((resolve, reject) => {
      let out = ""
      child.stdout.on("data", (d) => {
        out += d
        if (out.includes("\n")) resolve(JSON.parse(out.split("\n")[0]!))
      })
      child.once("exit", (code) => reject(new Error(`child exited with ${code}`)))
    })
    expect(await listening(ports.nats)).toBe(true)
    expect(await listening(ports.pg)).toBe(true)
    child.kill("SIGKILL")
    expect(await eventually(async () => !(await listening(ports.nats)) && !(await listening(ports.pg)))).toBe(true)
  })

  it("with a password, a cluster made open by an older svc dev asks it of every connection", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "svc-pg-password-"))
    fs.chmodSync(dir, 0o755)
    try {
      const open = await startPostgres({ dir })
      // What the older svc dev left: anyone in, over TCP and the socket.
      expect(psqlAsNobody("127.0.0.1", open.port).stdout).toBe("1\n")
      expect(psqlAsNobody(dir, open.port).stdout).toBe("1\n")
      await open.stop()

      const closed = await startPostgres({ dir, password: "a-password-of-svc-dev's" })
      try {
        const tcp = psqlAsNobody("127.0.0.1", closed.port)
        expect(tcp.status).not.toBe(0)
        expect(tcp.stderr).toContain("no password supplied")
        const socket = psqlAsNobody(dir, closed.port)
        expect(socket.status).not.toBe(0)
        expect(socket.stderr).toContain("Permission denied")
        expect(fs.statSync(dir).mode & 0o777).toBe(0o700)
        // Its URL carries the password (quoted), and opens it.
        const res = spawnSync("psql", [closed.url, "-w", "-Atc", "select current_user"], { encoding: "utf8" })
        expect(res.stdout, res.stderr).toBe("postgres\n")
      } finally {
        await closed.stop()
      }
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
  })

  it("with an authorization block, a user needs its password, whatever its characters", async () => {
    // Passwords nats-server would read as a date, a number and a boolean, were they not quoted.
    const passwords = { P_DATE: "2026-11-27x", P_NUMBER: "1234", P_BOOLEAN: "true" }
    const users = Object.keys(passwords).map((variable) =>
      `{ user: ${JSON.stringify(variable.toLowerCase())}, password: $${variable} }`
    )
    const nats = await startNats({ authorization: `authorization { users: [ ${users.join(", ")} ] }`, passwords })
    try {
      expect(fs.statSync(path.join(nats.dir, "nats.conf")).mode & 0o777).toBe(0o600)
      for (const [variable, password] of Object.entries(passwords)) {
        expect(await natsAnswer(nats.port, { user: variable.toLowerCase(), pass: password })).toContain("PONG")
      }
      expect(await natsAnswer(nats.port, {})).toContain("Authorization Violation")
      expect(await natsAnswer(nats.port, { user: "p_number", pass: "1235" })).toContain("Authorization Violation")
    } finally {
      await nats.stop()
    }
  })
})
