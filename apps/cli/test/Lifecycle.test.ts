/**
 * `svc sandbox create` with the lifecycle flags and `svc sandbox timeout` against the API and a
 * real agent: the settings reach the record, the keep-alive moves `expiresAt`, `none` removes a
 * limit, and a bad value is refused before any request (exit 1).
 */
import { expect, layer } from "@effect/vitest"
import { api, EnvLayer, waitState } from "@svc/api/testing/SandboxesEnv"
import { Effect } from "effect"
import { svc } from "./support/Cli.ts"

layer(EnvLayer, { excludeTestServices: true, timeout: 180_000 })("svc sandbox: lifecycle", (it) => {
  it.effect("create --idle-timeout-s --on-timeout --auto-delete-s --auto-resume; timeout N | none", () =>
    Effect.gen(function*() {
      const created = yield* svc(
        "sandbox",
        "create",
        "--region",
        "local",
        "--timeout-s",
        "600",
        "--idle-timeout-s",
        "300",
        "--on-timeout",
        "delete",
        "--auto-delete-s",
        "3600",
        "--auto-resume",
        "--json"
      )
      expect(created.code, created.stderr).toBe(0)
      const record = JSON.parse(created.stdout)
      expect(record).toMatchObject({
        timeout_s: 600,
        idle_timeout_s: 300,
        on_timeout: "delete",
        auto_delete_s: 3600,
        auto_resume: true,
        stop_reason: null
      })
      const running = yield* waitState(record.id, "running")

      const kept = yield* svc("sandbox", "timeout", record.id, "--timeout-s", "1200", "--json")
      expect(kept.code, kept.stderr).toBe(0)
      const after = JSON.parse(kept.stdout)
      expect(after.timeout_s).toBe(1200)
      expect(Date.parse(after.expiresAt)).toBeGreaterThan(Date.parse(running.expiresAt))

      const removed = yield* svc("sandbox", "timeout", record.id, "--idle-timeout-s", "none")
      expect(removed.code, removed.stderr).toBe(0)
      expect(removed.stdout).toMatch(new RegExp(`^${record.id}  timeout_s=1200s  idle_timeout_s=none  expires=\\d{4}-`))

      const bad = yield* svc("sandbox", "timeout", record.id, "--timeout-s", "soon")
      expect(bad.code).toBe(1)
      expect(bad.stderr).toMatch(/--timeout-s: a number of seconds or none/)
      const refused = yield* svc("sandbox", "timeout", record.id, "--timeout-s", "0")
      expect(refused.code).toBe(1)
      expect(refused.stderr).toMatch(/^error invalid_request: /)
      expect((yield* api("GET", `/v1/sandboxes/${record.id}`)).json).toMatchObject({
        timeout_s: 1200,
        idle_timeout_s: null
      })
      yield* api("DELETE", `/v1/sandboxes/${record.id}`)
      yield* waitState(record.id, "deleted")
    }))
})
