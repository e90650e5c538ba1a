/**
 * `svc sandbox logs <id> [-f]` and `svc sandbox metrics <id>` against the API, a real agent
 * (sampling every 300 ms) and a real sandbox: the log's lifecycle lines, a followed line, the
 * table of samples, and the refusal of a bad `--since`.
 */
import { expect, layer } from "@effect/vitest"
import { api, create, makeEnvLayer, waitState } from "@svc/api/testing/SandboxesEnv"
import { eventually } from "@svc/testing/Eventually"
import { Duration, Effect } from "effect"
import { spawn } from "node:child_process"
import { cliEnv, MAIN, svc } from "./support/Cli.ts"

layer(makeEnvLayer({ metricsIntervalMs: 300 }), { excludeTestServices: true, timeout: 180_000 })(
  "svc sandbox logs|metrics",
  (it) => {
    it.effect("the log, followed; the samples as a table; a bad --since refused", () =>
      Effect.gen(function*() {
        const s = yield* create({ region: "local" })
        yield* waitState(s.id, "running")
        const logged = yield* eventually(
          svc("sandbox", "logs", s.id),
          (r) => r.stdout.includes("lifecycle: started"),
          Duration.seconds(30),
          Duration.millis(500)
        )
        expect(logged.code, logged.stderr).toBe(0)
        expect(logged.stdout).toMatch(/^\S+Z lifecycle: starting$/m)

        // -f: the stored lines at once, then it keeps running until killed.
        const env = yield* cliEnv
        const followed = yield* Effect.promise(() =>
          new Promise<string>((resolve, reject) => {
            const child = spawn(process.execPath, [MAIN, "sandbox", "logs", s.id, "-f"], { env })
            let out = ""
            const timer = setTimeout(() => {
              child.kill("SIGKILL")
              reject(new Error(`no started line in: ${out}`))
            }, 30_000)
            child.stdout.on("data", (chunk: Buffer) => {
              out += chunk.toString()
              if (out.includes("lifecycle: started\n")) {
                clearTimeout(timer)
                child.kill("SIGTERM")
                resolve(out)
              }
            })
          })
        )
        expect(followed).toMatch(/lifecycle: started$/m)

        const table = yield* eventually(
          svc("sandbox", "metrics", s.id, "--since", "1h"),
          (r) => r.stdout.split("\n").length >= 3,
          Duration.seconds(30),
          Duration.millis(500)
        )
        expect(table.code, table.stderr).toBe(0)
        const [header, row] = table.stdout.split("\n")
        expect(header).toMatch(
          /^TIME\s+CPU%\s+MEM MiB\s+MEM LIMIT\s+DISK MiB\s+DISK LIMIT\s+PIDS\s+NET RX KiB\s+NET TX KiB$/
        )
        expect(row).toMatch(/^\S+Z\s+\d+\.\d\s+\d+\.\d\s+\d+\.\d\s+\d+\.\d\s+\d+\.\d\s+\d+\s+\d+\.\d\s+\d+\.\d$/)
        const asJson = yield* svc("sandbox", "metrics", s.id, "--json")
        expect(JSON.parse(asJson.stdout).samples.length).toBeGreaterThan(0)

        const bad = yield* svc("sandbox", "metrics", s.id, "--since", "yesterday")
        expect(bad.code).toBe(1)
        expect(bad.stderr).toContain("error invalid_request")
        expect((yield* api("DELETE", `/v1/sandboxes/${s.id}`)).status).toBe(202)
      }).pipe(Effect.timeout(Duration.minutes(2))))
  }
)
