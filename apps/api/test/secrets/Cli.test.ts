/**
 * The CLI's secret and sandbox-egress commands against the real API (a process of its own, as a
 * user runs it): the value goes in on standard input and never comes out, the policy and the
 * binding reach the record.
 */
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { execFile } from "node:child_process"
import { randomBytes } from "node:crypto"
import * as NodePath from "node:path"
import { request, Stack, StackLayer } from "./Secrets.support.ts"

const MAIN = NodePath.resolve(import.meta.dirname, "../../../cli/src/main.ts")

const svc = (base: string, token: string, args: ReadonlyArray<string>, stdin = "") =>
  Effect.promise(() =>
    new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
      const child = execFile(process.execPath, [MAIN, ...args], {
        env: { ...process.env, SVC_API_URL: base, SVC_API_KEY: token }
      }, (error, stdout, stderr) => resolve({ code: error ? (error.code as number) ?? 1 : 0, stdout, stderr }))
      child.stdin!.end(stdin)
    })
  )

layer(StackLayer, { timeout: 120_000, excludeTestServices: true })("svc secret, svc sandbox network|secrets", (it) => {
  it.effect("creates, lists, rotates, updates and deletes a secret; sets a policy; binds", () =>
    Effect.gen(function*() {
      const { a, base, key } = yield* Stack
      const token = (yield* key(a, ["*"])).token
      const value = `cli-${randomBytes(12).toString("hex")}`
      const created = yield* svc(base, token, [
        "secret",
        "create",
        "--name",
        "cli",
        "--host",
        "api.example.com",
        "--host",
        "*.example.org",
        "--json"
      ], `${value}\n`)
      expect(created.code, created.stderr).toBe(0)
      const secret = JSON.parse(created.stdout)
      expect(secret.allowed_hosts).toEqual(["api.example.com", "*.example.org"])
      const listed = yield* svc(base, token, ["secret", "list"])
      expect(listed.stdout).toContain(secret.id)
      const rotated = yield* svc(base, token, ["secret", "rotate", secret.id, "--json"], "next-value")
      expect(JSON.parse(rotated.stdout).rotatedAt).not.toBeNull()
      const updated = yield* svc(base, token, [
        "secret",
        "update",
        secret.id,
        "--header",
        "X-Key",
        "--format",
        "{value}"
      ])
      expect(updated.code, updated.stderr).toBe(0)
      expect(updated.stdout).toContain("X-Key: {value}")
      for (const out of [created, listed, rotated, updated]) {
        expect(out.stdout + out.stderr).not.toContain(value)
        expect(out.stdout + out.stderr).not.toContain("next-value")
      }
      const refused = yield* svc(base, token, ["secret", "create", "--name", "bad", "--host", "*.com"], "x")
      expect(refused.code).toBe(1)
      expect(refused.stderr).toContain("invalid_request")

      const sandbox = yield* svc(base, token, [
        "sandbox",
        "create",
        "--region",
        "nowhere",
        "--allow",
        "pypi.org",
        "--secret",
        secret.id
      ])
      expect(sandbox.code, sandbox.stderr).toBe(0)
      const record = JSON.parse(sandbox.stdout)
      expect(record.network).toEqual({ allow_out: ["pypi.org"], deny_out: [] })
      expect(record.secrets).toEqual([secret.id])
      const network = yield* svc(base, token, ["sandbox", "network", record.id, "--deny", "203.0.113.0/24"])
      expect(network.stdout).toContain("deny_out=203.0.113.0/24")
      const other = (yield* request(base, token, "POST", "/v1/sandboxes", { region: "nowhere" })).body.id as string
      const bound = yield* svc(base, token, ["sandbox", "secrets", "bind", other, secret.id])
      expect(bound.code, bound.stderr).toBe(0)
      expect((yield* request(base, token, "GET", `/v1/sandboxes/${other}`)).body.secrets).toEqual([secret.id])
      const deleted = yield* svc(base, token, ["secret", "delete", secret.id])
      expect(deleted.stdout).toContain(`${secret.id} deleted`)
    }))
})
