/**
 * Baselines in processes of their own, so that a baseline measures the machine and not the
 * benchmark's process: the raw node:http server (`raw`) and the raw POST receiver (`sink`).
 */
import { spawn } from "node:child_process"

export interface Started {
  readonly url: string
  readonly pid: number
  readonly stop: () => Promise<void>
}

export const startRawServer = (mode: "raw" | "sink" = "raw"): Promise<Started> => startServer(["./raw-server.ts", mode])

/**
 * Effect with nothing of ours: the framework's floors (bench/lib/effect-server.ts), its HttpRouter
 * (`router`) or an HttpApi of one endpoint (`api`).
 */
export const startEffectServer = (floor: "router" | "api"): Promise<Started> =>
  startServer(["./effect-server.ts", floor])

const startServer = ([script, ...args]: ReadonlyArray<string>): Promise<Started> =>
  new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [new URL(script!, import.meta.url).pathname, ...args], {
      stdio: ["ignore", "pipe", "inherit"]
    })
    let out = ""
    child.once("exit", (code) => reject(new Error(`raw server exited ${code}`)))
    child.stdout.on("data", (d) => {
      out += d
      const line = out.split("\n")[0]
      if (out.includes("\n")) {
        child.removeAllListeners("exit")
        resolve({
          url: `http://127.0.0.1:${line}`,
          pid: child.pid!,
          stop: () =>
            new Promise((r) => {
              if (child.exitCode !== null) return r()
              child.once("exit", () => r())
              child.kill("SIGTERM")
            })
        })
      }
    })
  })
