/** The throwaway servers of the harness leave nothing behind: not when stopped, not when their owner dies. */
import { describe, expect, it } from "@effect/vitest"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as net from "node:net"
import { startNats, startPostgres } from "../src/Servers.ts"

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
})
