/**
 * `svc` as an installed command (the workspace's `node_modules/.bin/svc`, the `bin` of
 * @svc/cli) run with the system's PATH against a real stack: the user commands built on the SDK
 * with `--json` for scripts, progress on stderr while waiting, and errors that say what to do.
 */
import { expect, layer } from "@effect/vitest"
import { Env, EnvLayer } from "@svc/api/testing/SandboxesEnv"
import { Effect } from "effect"
import { execFile } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"

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
    300_000
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
    }), 300_000)

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
    }), 300_000)

  it.effect(
    "whoami, key mint/list/revoke, org get/rename, audit: the account over the API with --json",
    () =>
      Effect.gen(function*() {
        const env = yield* Env
        const me = json(yield* svc(["whoami", "--json"]))
        expect(me).toMatchObject({
          org: { id: env.org.id },
          user: null,
          credential: { type: "api_key", scopes: ["*"] }
        })

        // Minted over the API: the token on stdout once, with a warning on stderr; then it works.
        const minting = yield* svc(["key", "mint", "--name", "cli-minted", "--scope", "sandboxes:read", "--json"])
        const minted = json(minting)
        expect(minted).toMatchObject({ name: "cli-minted", scopes: ["sandboxes:read"], revokedAt: null })
        expect(minted.token).toMatch(/^svc_live_/)
        expect(minting.stderr).toContain("shown only now")
        const asMinted = json(yield* svc(["whoami", "--json"], { env: { SVC_API_KEY: minted.token } }))
        expect(asMinted.credential).toMatchObject({ id: minted.id, scopes: ["sandboxes:read"] })

        // Listed without any token; the prefix tells it.
        const listed = yield* svc(["key", "list", "--json"])
        const row = json(listed).keys.find((k: { id: string }) => k.id === minted.id)
        expect(row).toMatchObject({ name: "cli-minted", prefix: minted.prefix, revokedAt: null })
        expect(listed.stdout).not.toContain(minted.token)
        expect(listed.stdout).not.toContain(env.org.token)

        // A scoped key may not manage keys, the org or the audit log: the API's refusal, exit 1.
        const scoped = yield* svc(["key", "mint", "--name", "nope", "--json"], { env: { SVC_API_KEY: minted.token } })
        expect(scoped.code).toBe(1)
        expect(scoped.stdout).toBe("")
        expect(scoped.stderr).toMatch(/^error full_access_required: /)
        expect(scoped.stderr).toContain("hint: this needs a full-access")
        const scopedAudit = yield* svc(["audit", "--json"], { env: { SVC_API_KEY: minted.token } })
        expect(scopedAudit.code).toBe(1)
        expect(scopedAudit.stderr).toMatch(/^error full_access_required: /)

        const revoked = json(yield* svc(["key", "revoke", minted.id, "--json"]))
        expect(revoked).toMatchObject({ id: minted.id })
        expect(revoked.revokedAt).not.toBeNull()
        const afterRevoke = yield* svc(["whoami"], { env: { SVC_API_KEY: minted.token } })
        expect(afterRevoke.code).toBe(1)
        expect(afterRevoke.stderr).toMatch(/^error unauthenticated: /)
        const badExpiry = yield* svc(["key", "mint", "--name", "past", "--expires-at", "2001-01-01T00:00:00.000Z"])
        expect(badExpiry.code).toBe(1)
        expect(badExpiry.stderr).toMatch(/^error invalid_request: /)

        expect(json(yield* svc(["org", "get", "--json"]))).toMatchObject({ id: env.org.id })
        expect(json(yield* svc(["org", "rename", "renamed-by-cli", "--json"]))).toMatchObject({
          id: env.org.id,
          name: "renamed-by-cli"
        })
        expect(json(yield* svc(["org", "get", "--json"])).name).toBe("renamed-by-cli")
        const emptyName = yield* svc(["org", "rename", ""])
        expect(emptyName.code).toBe(1)
        expect(emptyName.stderr).toMatch(/^error invalid_request: /)

        // The audit log holds what was just done, newest first; --action filters on one.
        const audit = json(yield* svc(["audit", "--json"]))
        const actions = audit.entries.map((e: { action: string }) => e.action)
        expect(actions).toEqual(expect.arrayContaining(["apikey.created", "apikey.revoked", "org.updated"]))
        const created = json(yield* svc(["audit", "--action", "apikey.created", "--limit", "1", "--json"]))
        expect(created).toMatchObject({ limit: 1, has_more: expect.any(Boolean) })
        expect(created.entries).toHaveLength(1)
        expect(created.entries[0]).toMatchObject({ action: "apikey.created", target_id: minted.id })
        const unknown = yield* svc(["audit", "--action", "no.such_action"])
        expect(unknown.code).toBe(1)
        expect(unknown.stderr).toMatch(/^error invalid_request: /)
      }),
    300_000
  )

  it.effect(
    "processes on the SDK: spawn, ps, logs --follow, stdin, kill, wait; stop/start; files; --json",
    () =>
      Effect.gen(function*() {
        const sandbox = json(yield* svc(["sandbox", "create", "--name", "cli-processes", "--wait", "--json"]))

        const spawned = json(
          yield* svc(["sandbox", "spawn", sandbox.id, "--json", "--", "sh", "-c", "echo up; exec sleep 300"])
        )
        expect(spawned).toMatchObject({
          state: "running",
          exit_code: null,
          cmd: ["sh", "-c", "echo up; exec sleep 300"]
        })
        const ps = json(yield* svc(["sandbox", "ps", sandbox.id, "--json"]))
        expect(ps.processes.map((p: { pid: number; state: string }) => `${p.pid}:${p.state}`)).toContain(
          `${spawned.pid}:running`
        )
        expect(json(yield* svc(["sandbox", "ps", sandbox.id, String(spawned.pid), "--json"]))).toMatchObject({
          pid: spawned.pid,
          state: "running"
        })
        const kill = json(
          yield* svc(["sandbox", "kill", sandbox.id, String(spawned.pid), "--signal", "KILL", "--json"])
        )
        expect(kill).toEqual({ pid: spawned.pid, signal: "KILL", sent: true })
        // wait exits with the process's exit code (128 + 9), its record on stdout.
        const waited = yield* svc(["sandbox", "wait", sandbox.id, String(spawned.pid), "--json"])
        expect(waited.code).toBe(137)
        expect(JSON.parse(waited.stdout)).toMatchObject({ pid: spawned.pid, state: "exited", reason: "killed" })
        const logs = yield* svc(["sandbox", "logs", sandbox.id, String(spawned.pid), "--follow"])
        expect(logs).toMatchObject({ code: 0, stdout: "up\n" })
        expect(logs.stderr).toContain("[exited 137: killed]")
        const again = yield* svc(["sandbox", "kill", sandbox.id, String(spawned.pid)])
        expect(again.code).toBe(1)
        expect(again.stderr).toMatch(/^error conflict: /)

        // stdin: a process started with --stdin reads what `svc sandbox stdin` sends, to its end.
        const cat = json(yield* svc(["sandbox", "spawn", sandbox.id, "--stdin", "--json", "--", "wc", "-c"]))
        const fed = json(
          yield* svc(["sandbox", "stdin", sandbox.id, String(cat.pid), "--close", "--json"], {
            input: "twelve bytes"
          })
        )
        expect(fed).toEqual({ pid: cat.pid, bytes: 12, closed: true })
        expect((yield* svc(["sandbox", "wait", sandbox.id, String(cat.pid)])).code).toBe(0)
        expect((yield* svc(["sandbox", "logs", sandbox.id, String(cat.pid)])).stdout.trim()).toBe("12")

        // Files: written from stdin, read back byte for byte, listed.
        const written = json(
          yield* svc(["sandbox", "files", "write", sandbox.id, "/tmp/cli.txt", "--json"], {
            input: "from the cli\n"
          })
        )
        expect(written).toEqual({ path: "/tmp/cli.txt", bytes: 13 })
        expect(yield* svc(["sandbox", "files", "read", sandbox.id, "/tmp/cli.txt"])).toMatchObject({
          code: 0,
          stdout: "from the cli\n"
        })
        const listing = json(yield* svc(["sandbox", "files", "ls", sandbox.id, "/tmp", "--json"]))
        expect(listing.entries).toEqual(
          expect.arrayContaining([expect.objectContaining({ name: "cli.txt", type: "file", size: 13 })])
        )
        const folder = yield* svc(["sandbox", "files", "read", sandbox.id, "/tmp"])
        expect(folder.code).toBe(1)
        expect(folder.stderr).toMatch(/^error not_a_file: /)

        // Files managed: stat, mkdir, mv, rm (a folder with entries needs -r: 409 without).
        expect(json(yield* svc(["sandbox", "files", "stat", sandbox.id, "/tmp/cli.txt", "--json"]))).toMatchObject({
          path: "/tmp/cli.txt",
          type: "file",
          size: 13,
          mode: "0644"
        })
        const made = yield* svc(["sandbox", "files", "mkdir", sandbox.id, "/tmp/cli/d", "--mode", "0700"])
        expect(made.code, made.stderr).toBe(0)
        expect(made.stdout).toMatch(/^dir +0700  0:0 .* \/tmp\/cli\/d\n$/)
        const mv = json(
          yield* svc(["sandbox", "files", "mv", sandbox.id, "/tmp/cli.txt", "/tmp/cli/d/x.txt", "--json"])
        )
        expect(mv).toMatchObject({ path: "/tmp/cli/d/x.txt", size: 13 })
        const notEmpty = yield* svc(["sandbox", "files", "rm", sandbox.id, "/tmp/cli"])
        expect(notEmpty.code).toBe(1)
        expect(notEmpty.stderr).toMatch(/^error conflict: /)
        expect((yield* svc(["sandbox", "files", "rm", "-r", sandbox.id, "/tmp/cli"])).code).toBe(0)
        const gone = yield* svc(["sandbox", "files", "stat", sandbox.id, "/tmp/cli"])
        expect(gone.code).toBe(1)
        expect(gone.stderr).toMatch(/^error not_found: /)

        // A local folder pushed and pulled back (streamed as a tar both ways).
        const local = Fs.mkdtempSync(Path.join(Os.tmpdir(), "svc-cli-push-"))
        const back = Path.join(Os.tmpdir(), `svc-cli-pull-${process.pid}`)
        Fs.mkdirSync(Path.join(local, "src"))
        Fs.writeFileSync(Path.join(local, "src", "a.txt"), "pushed\n")
        const pushed = yield* svc(["sandbox", "files", "push", sandbox.id, local, "/tmp/pushed"])
        expect(pushed.code, pushed.stderr).toBe(0)
        expect(json(yield* svc(["sandbox", "files", "stat", sandbox.id, "/tmp/pushed/src/a.txt", "--json"])).size).toBe(
          7
        )
        const pulled = yield* svc(["sandbox", "files", "pull", sandbox.id, "/tmp/pushed", back])
        expect(pulled.code, pulled.stderr).toBe(0)
        expect(Fs.readFileSync(Path.join(back, "src", "a.txt"), "utf8")).toBe("pushed\n")
        Fs.rmSync(local, { recursive: true, force: true })
        Fs.rmSync(back, { recursive: true, force: true })
        const missing = yield* svc(["sandbox", "files", "watch", sandbox.id, "/tmp/none"])
        expect(missing.code).toBe(1)
        expect(missing.stderr).toMatch(/^error not_found: /)

        // stop and start wait for their states (progress on stderr); a stopped sandbox runs nothing.
        const stopped = yield* svc(["sandbox", "stop", sandbox.id, "--json"])
        expect(json(stopped)).toMatchObject({ id: sandbox.id, state: "stopped" })
        expect(stopped.stderr).toMatch(/waiting for stopped: stopped/)
        const refused = yield* svc(["sandbox", "spawn", sandbox.id, "--", "true"])
        expect(refused.code).toBe(1)
        expect(refused.stderr).toMatch(/^error conflict: /)
        const stopAgain = yield* svc(["sandbox", "stop", sandbox.id])
        expect(stopAgain.code).toBe(1)
        expect(stopAgain.stderr).toMatch(/^error conflict: /)
        expect(json(yield* svc(["sandbox", "start", sandbox.id, "--json"]))).toMatchObject({ state: "running" })
        expect(json(yield* svc(["sandbox", "delete", sandbox.id, "--wait", "--json"])).state).toBe("deleted")
      }),
    240_000
  )

  it.effect(
    "webhook get/update, usage, workers, health with --json; refusals with the API's code",
    () =>
      Effect.gen(function*() {
        const loopback = yield* svc(["webhook", "create", "--url", "http://127.0.0.1:1/hook", "--json"])
        expect(loopback.code).toBe(1)
        expect(loopback.stderr).toMatch(/^error invalid_webhook_url: /)
        const missing = "wh_" + "0".repeat(26)
        const got = yield* svc(["webhook", "get", missing, "--json"])
        expect(got.code).toBe(1)
        expect(got.stderr).toMatch(/^error (not_found|invalid_request): /)
        const updated = yield* svc(["webhook", "update", missing, "--disable", "--json"])
        expect(updated.code).toBe(1)
        expect(updated.stderr).toMatch(/^error (not_found|invalid_request): /)
        const both = yield* svc(["webhook", "update", missing, "--enable", "--disable"])
        expect(both).toMatchObject({ code: 1, stdout: "" })
        expect(both.stderr).toContain("--enable or --disable, not both")

        const usage = json(yield* svc(["usage", "--json"]))
        expect(usage).toMatchObject({ blocked: false, spend_micros: expect.any(Number) })
        const limited = json(yield* svc(["usage", "limits", "--alert", "5000000", "--json"]))
        expect(limited.alert_micros).toBe(5_000_000)
        expect(json(yield* svc(["usage", "limits", "--alert", "none", "--json"])).alert_micros).toBeNull()

        expect(json(yield* svc(["workers", "--json"]))).toMatchObject({ workers: expect.any(Array) })
        expect(json(yield* svc(["health", "--json"]))).toEqual({ status: "ok", postgres: "up", nats: "up" })
      }),
    120_000
  )

  it.effect(
    "--completions bash|zsh|fish: scripts of the whole command tree, new commands included",
    () =>
      Effect.gen(function*() {
        const bash = yield* svc(["--completions", "bash"])
        expect(bash.code).toBe(0)
        for (const name of ["whoami", "audit", "mint", "revoke", "rename", "spawn", "terminal", "files"]) {
          expect(bash.stdout).toContain(name)
        }
        for (const shell of ["zsh", "fish"]) {
          const script = yield* svc(["--completions", shell])
          expect(script.code).toBe(0)
          expect(script.stdout).toContain("whoami")
        }
      }),
    60_000
  )
})
