/**
 * `svc` as an installed command (the workspace's `node_modules/.bin/svc`, the `bin` of
 * @svc/cli) run with the system's PATH against a real stack: the user commands built on the SDK
 * with `--json` for scripts, progress on stderr while waiting, and errors that say what to do.
 */
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { execFile } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { Env, EnvLayer } from "../../api/test/SandboxesEnv.support.ts"

const BIN = Path.resolve(import.meta.dirname, "../../../node_modules/.bin/svc")

interface Run {
  readonly code: number
  readonly stdout: string
  readonly stderr: string
}

/** `svc args...` with only the given environment (and a PATH without the pinned Node). */
const svc = (args: ReadonlyArray<string>, options: { env?: Record<string, string>; input?: string } = {}) =>
  Effect.flatMap(Effect.service(Env), (env) =>
    Effect.promise(() =>
      new Promise<Run>((resolve) => {
        const child = execFile(
          BIN,
          args,
          {
            env: {
              PATH: "/usr/bin:/bin",
              SVC_API_URL: env.base,
              SVC_API_KEY: env.org.token,
              SVC_STATE_DIR: Os.tmpdir(),
              ...options.env
            },
            timeout: 120_000
          },
          (error, stdout, stderr) =>
            resolve({ code: error ? typeof error.code === "number" ? error.code : -1 : 0, stdout, stderr })
        )
        child.stdin?.end(options.input ?? "")
      })
    ))

const json = (run: Run) => {
  expect(run.code, run.stderr).toBe(0)
  return JSON.parse(run.stdout)
}

layer(EnvLayer, { excludeTestServices: true, timeout: 300_000 })("svc, the installed command", (it) => {
  it.effect(
    "sandbox create --wait --json, list, get, exec (exit code kept), delete --wait: JSON on stdout, progress on stderr",
    () =>
      Effect.gen(function*() {
        expect(Fs.existsSync(BIN)).toBe(true)
        const created = yield* svc([
          "sandbox",
          "create",
          "--name",
          "cli-json",
          "--env",
          "GREETING=hi",
          "--wait",
          "--json"
        ])
        const sandbox = json(created)
        expect(sandbox).toMatchObject({ name: "cli-json", state: "running" })
        // Each state the wait saw, once, on stderr.
        expect(created.stderr).toMatch(/waiting for running: running \(\d+\.\d s\)/)

        const listed = json(yield* svc(["sandbox", "list", "--json"]))
        expect(listed.rows.map((r: { id: string }) => r.id)).toContain(sandbox.id)
        expect(listed.total).toBeGreaterThanOrEqual(1)
        expect(json(yield* svc(["sandbox", "get", sandbox.id, "--json"]))).toMatchObject({
          id: sandbox.id,
          state: "running"
        })

        const ran = yield* svc(["sandbox", "exec", sandbox.id, "--json", "--", "sh", "-c", "echo $GREETING; exit 5"])
        // The command's exit code is the CLI's, with --json too.
        expect(ran.code).toBe(5)
        expect(JSON.parse(ran.stdout)).toMatchObject({ exit_code: 5, stdout: "hi\n", stderr: "" })
        // Without --json: the output as it is written.
        const plain = yield* svc(["sandbox", "exec", sandbox.id, "--", "sh", "-c", "echo out; echo err >&2"])
        expect(plain).toMatchObject({ code: 0, stdout: "out\n", stderr: "err\n" })

        const deleted = yield* svc(["sandbox", "delete", sandbox.id, "--wait", "--json"])
        expect(json(deleted)).toMatchObject({ id: sandbox.id, state: "deleted" })
        expect(deleted.stderr).toMatch(/waiting for deleted: deleted/)
      }),
    180_000
  )

  it.effect("volume, secret, template and webhook commands with --json", () =>
    Effect.gen(function*() {
      const volume = json(yield* svc(["volume", "create", "--size", "1", "--name", "cli-vol", "--json"]))
      expect(volume).toMatchObject({ name: "cli-vol", size_gb: 1, type: "local" })
      const volumes = json(yield* svc(["volume", "list", "--json"]))
      expect(volumes.volumes.map((v: { id: string }) => v.id)).toContain(volume.id)
      expect(json(yield* svc(["volume", "get", volume.id, "--json"])).id).toBe(volume.id)
      expect(json(yield* svc(["volume", "delete", volume.id, "--json"])).id).toBe(volume.id)

      // A service key may not manage secrets (SecretsCli.test runs them with a user's key): the
      // refusal is the API's, and the value read from standard input is in no output.
      const secret = yield* svc(["secret", "create", "--name", "cli-secret", "--host", "api.example.com", "--json"], {
        input: "s3cr3t-value\n"
      })
      expect(secret.code).toBe(1)
      expect(secret.stderr).toMatch(/^error secret_manager_not_allowed: /)
      expect(secret.stdout + secret.stderr).not.toContain("s3cr3t-value")
      expect(json(yield* svc(["secret", "list", "--json"]))).toMatchObject({ secrets: [], total: 0 })

      const templates = json(yield* svc(["template", "list", "--json"]))
      expect(Array.isArray(templates.rows)).toBe(true)
      expect(json(yield* svc(["template", "get", "base", "--json"]))).toMatchObject({ name: "base", state: "ready" })
      const webhooks = json(yield* svc(["webhook", "list", "--json"]))
      expect(webhooks).toMatchObject({ webhooks: [], total: 0 })
    }), 180_000)

  it.effect("errors: the API's code and message, each invalid field, a hint; exit 1", () =>
    Effect.gen(function*() {
      const missing = yield* svc(["sandbox", "get", "sbx_00000000000000000000000000"])
      expect(missing.code).toBe(1)
      expect(missing.stderr).toMatch(/^error (not_found|invalid_request): /)

      const invalid = yield* svc(["sandbox", "create", "--cpu", "99", "--ram-mb", "1"])
      expect(invalid.code).toBe(1)
      expect(invalid.stderr).toMatch(/^error invalid_request: /)
      expect(invalid.stderr).toMatch(/\n {2}cpu: /)
      expect(invalid.stderr).toMatch(/\n {2}ram_mb: /)

      const badKey = yield* svc(["sandbox", "list"], { env: { SVC_API_KEY: "svc_live_not_a_key" } })
      expect(badKey.code).toBe(1)
      expect(badKey.stderr).toMatch(/^error unauthenticated: /)
      expect(badKey.stderr).toContain("hint: the key is not valid")

      const down = yield* svc(["volume", "list", "--json"], { env: { SVC_API_URL: "http://127.0.0.1:9" } })
      expect(down.code).toBe(1)
      expect(down.stdout).toBe("")
      expect(down.stderr).toMatch(/^error network_error: cannot reach http:\/\/127\.0\.0\.1:9/)
      expect(down.stderr).toContain("hint: is the API running at http://127.0.0.1:9?")
    }), 180_000)
})
