/**
 * The Effect client (`SvcClient`, `HttpApiClient.make(Api)` over the server's definition) against
 * a real stack: a sandbox created, read and listed with decoded records, exec, and the API's
 * errors as their classes (caught by tag), a bad key included; payloads are the server's classes.
 */
import { expect, layer } from "@effect/vitest"
import { Env, EnvLayer, waitState } from "@svc/api/testing/SandboxesEnv"
import { SandboxId } from "@svc/domain/Ids"
import { DateTime, Effect } from "effect"
import { CreateSandboxBody, ExecBody, SvcClient } from "../src/Effect.ts"

const client = (apiKey?: string) =>
  Effect.flatMap(Effect.service(Env), (env) =>
    Effect.provide(
      Effect.service(SvcClient),
      SvcClient.layer({ baseUrl: env.base, apiKey: apiKey ?? env.org.token })
    ))

layer(EnvLayer, { excludeTestServices: true, timeout: 240_000 })("SvcClient (Effect)", (it) => {
  it.effect("create, get, list, exec; NotFound, Conflict and Unauthenticated by tag", () =>
    Effect.gen(function*() {
      const svc = yield* client()
      const created = yield* svc.sandboxes.create({
        payload: new CreateSandboxBody({
          name: "effect-client",
          template: "base",
          parent_id: null,
          env: { GREETING: "hi" },
          cpu: 1,
          ram_mb: 256,
          disk_gb: 1,
          metadata: {},
          type: "persistent",
          region: null,
          volumes: [],
          exposed_ports: [],
          secrets: [],
          network: { allow_out: [], deny_out: [] },
          timeout_s: null,
          idle_timeout_s: null,
          on_timeout: "stop",
          auto_delete_s: null,
          auto_resume: false
        }),
        headers: {}
      })
      expect(created.name).toBe("effect-client")
      // Decoded with the server's schemas: timestamps are DateTimes.
      expect(DateTime.isDateTime(created.createdAt)).toBe(true)
      yield* waitState(created.id, "running")

      const got = yield* svc.sandboxes.get({ params: { id: created.id } })
      expect(got.state).toBe("running")
      const page = yield* svc.sandboxes.list({ query: { limit: 10, offset: 0, paginated: true } })
      expect(page.rows.map((r) => r.id)).toContain(created.id)

      const ran = yield* svc.sandboxes.exec({
        params: { id: created.id },
        payload: new ExecBody({ cmd: ["sh", "-c", "echo $GREETING"], timeout_ms: 10_000 })
      })
      expect(ran).toMatchObject({ exit_code: 0, stdout: "hi\n" })

      const missing = yield* svc.sandboxes.get({
        params: { id: SandboxId.make(`sbx_${"0".repeat(created.id.length - 4)}`) }
      }).pipe(
        Effect.map(() => "found"),
        Effect.catchTag("NotFound", (e) => Effect.succeed(`${e.code}: ${e.error}`))
      )
      expect(missing).toMatch(/^not_found: /)

      const stopped = yield* svc.sandboxes.start({ params: { id: created.id } }).pipe(
        Effect.map(() => "started"),
        Effect.catchTag("Conflict", (e) => Effect.succeed(e.code))
      )
      expect(stopped).toBe("conflict")

      const stranger = yield* client("svc_live_not_a_key")
      const refused = yield* stranger.sandboxes.list({ query: { limit: 10, offset: 0, paginated: true } }).pipe(
        Effect.map(() => "listed"),
        Effect.catchTag("Unauthenticated", (e) => Effect.succeed(e.code))
      )
      expect(refused).toBe("unauthenticated")

      yield* svc.sandboxes.delete({ params: { id: created.id } })
    }))
})
