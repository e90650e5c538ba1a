/**
 * Egress through the API, end to end: the whole stack (API, runtime with its relay, a real
 * agent with its egress proxy on a bridge of its own) and a fake public host in a network
 * namespace. Everything a user does goes through the API: a secret created, a sandbox created
 * with it bound and a policy, the policy changed, the value rotated; what the sandbox sees is
 * checked with curl inside it, what the fake host received with its echo of the headers.
 */
import { expect, layer } from "@effect/vitest"
import { startAgent as startAgentFixture } from "@svc/agent/testing/Agent"
import { SecretBox } from "@svc/crypto/SecretBox"
import type { OrgId } from "@svc/domain/Ids"
import * as Runtime from "@svc/runtime/Runtime"
import { API, fakePublicHost, OTHER } from "@svc/testing/FakePublicHost"
import * as TestDatabase from "@svc/testing/TestDatabase"
import * as TestNats from "@svc/testing/TestNats"
import { ConfigProvider, Context, Duration, Effect, Layer } from "effect"
import * as FsSync from "node:fs"
import { call, eventually, Identity, makeHost, serveApi } from "../../testing/Sandboxes.ts"

class Env extends Context.Service<Env, {
  readonly base: string
  readonly org: { readonly id: OrgId; readonly token: string }
  /** SVC_SECRET_MANAGER_API_KEY_IDS_FILE of the API. */
  readonly managersFile: string
}>()("test/ApiEgress/Env") {}

const EnvLayer = Layer.effect(
  Env,
  Effect.gen(function*() {
    const fake = yield* fakePublicHost
    const managersFile = `${fake.dir}/secret-managers`
    FsSync.writeFileSync(managersFile, "")
    const base = yield* serveApi.pipe(
      Effect.provide(ConfigProvider.layerAdd(
        ConfigProvider.fromUnknown({ SVC_SECRET_MANAGER_API_KEY_IDS_FILE: managersFile }),
        { asPrimary: true }
      ))
    )
    const host = yield* makeHost
    yield* startAgentFixture(host, {
      region: "local",
      capacity: { cpu: 64, ramMb: 64 * 1024, diskGb: 500 },
      ...fake.agentOptions
    })
    const identity = yield* Identity
    return { base, org: yield* identity.org("egress"), managersFile }
  })
).pipe(
  Layer.provideMerge(Layer.mergeAll(Runtime.make({ supervisor: { intervalMs: 200 } }), Identity.layer)),
  Layer.provideMerge(Layer.mergeAll(TestDatabase.layerWithUrl, TestNats.layer, SecretBox.layer))
)

const api = (method: string, path: string, body?: unknown) =>
  Effect.flatMap(
    Effect.service(Env),
    (env) => call(env.base, method, path, { token: env.org.token, ...(body !== undefined ? { body } : {}) })
  )

/** Runs `sh -c script` in the sandbox; its stdout. */
const sh = (id: string, script: string) =>
  Effect.map(api("POST", `/v1/sandboxes/${id}/exec`, { cmd: ["sh", "-c", script], timeout_ms: 20_000 }), (r) => {
    expect(r.status, r.text).toBe(200)
    return r.json as { exit_code: number; stdout: string; stderr: string }
  })

/** The header values the fake host received for `name` (its echo of the raw headers). */
const received = (stdout: string, name: string): Array<string> => {
  const echo = JSON.parse(stdout) as { rawHeaders: Array<string> }
  const values: Array<string> = []
  for (let i = 0; i < echo.rawHeaders.length; i += 2) {
    if (echo.rawHeaders[i]!.toLowerCase() === name.toLowerCase()) values.push(echo.rawHeaders[i + 1]!)
  }
  return values
}

const CANARY = "canary-egress-e2e-7f3a9c"
const ROTATED = "canary-egress-e2e-rotated-51d0"

layer(EnvLayer, { excludeTestServices: true, timeout: 240_000 })("egress through the API", (it) => {
  it.effect("a secret bound at create is written on requests to its host only; policy and rotation apply through the API; the value never enters the sandbox", () =>
    Effect.gen(function*() {
      // The org's `*` key is a userless service key: listed, it may manage secrets.
      const env = yield* Env
      const me = yield* api("GET", "/v1/auth/me")
      FsSync.writeFileSync(env.managersFile, me.json.credential.id)

      // The contract's entry forms: a bad one is 400; HTTPS by the bare name, plain HTTP only by `http://`.
      const bad = yield* api("POST", "/v1/secrets", { name: "bad", value: CANARY, allowed_hosts: [`ftp://${API}`] })
      expect(bad.status, bad.text).toBe(400)
      const secret = yield* api("POST", "/v1/secrets", {
        name: "fake-api",
        value: CANARY,
        allowed_hosts: [API, `HTTP://${API}:80`]
      })
      expect(secret.status, secret.text).toBe(201)
      expect(secret.json.allowed_hosts).toEqual([API, `http://${API}`])
      const created = yield* api("POST", "/v1/sandboxes", {
        region: "local",
        ram_mb: 128,
        secrets: [secret.json.id],
        network: { deny_out: [`*.never.${OTHER}`] }
      })
      expect(created.status, created.text).toBe(201)
      const id: string = created.json.id
      const running = yield* eventually(api("GET", `/v1/sandboxes/${id}`), (r) => r.json.state === "running")
      expect(running.json.secrets).toEqual([secret.json.id])
      expect(running.json.network).toEqual({ allow_out: [], deny_out: [`*.never.${OTHER}`] })

      // Its header on requests to its host, over HTTP and HTTPS (the platform's CA is trusted
      // inside); the sandbox's own header of that name replaced, never doubled.
      const http = yield* sh(id, `curl -sS -H 'Authorization: mine' http://${API}/`)
      expect(http.exit_code, http.stderr).toBe(0)
      expect(received(http.stdout, "authorization")).toEqual([`Bearer ${CANARY}`])
      const https = yield* sh(id, `curl -sS https://${API}/`)
      expect(https.exit_code, https.stderr).toBe(0)
      expect(received(https.stdout, "authorization")).toEqual([`Bearer ${CANARY}`])
      // Another host of the same server: no header.
      const other = yield* sh(id, `curl -sS http://${OTHER}/`)
      expect(other.exit_code, other.stderr).toBe(0)
      expect(received(other.stdout, "authorization")).toEqual([])
      // An absolute-form target naming that other host under the allowed Host: refused, no header sent.
      const stolen = yield* sh(
        id,
        `(printf 'GET http://${OTHER}/ HTTP/1.1\\r\\nHost: ${API}\\r\\nConnection: close\\r\\n\\r\\n'; sleep 3) | nc ${API} 80`
      )
      expect(stolen.stdout).toMatch(/^HTTP\/1\.1 400/)
      expect(stolen.stdout).not.toContain(CANARY)
      // The `http://` entry removed: plain HTTP gets no header any more, HTTPS still does.
      const httpsOnly = yield* api("PATCH", `/v1/secrets/${secret.json.id}`, { allowed_hosts: [API] })
      expect(httpsOnly.status, httpsOnly.text).toBe(200)
      yield* eventually(
        sh(id, `curl -sS http://${API}/`),
        (r) => r.exit_code === 0 && received(r.stdout, "authorization").length === 0,
        Duration.seconds(20)
      )
      const stillHttps = yield* sh(id, `curl -sS https://${API}/`)
      expect(received(stillHttps.stdout, "authorization")).toEqual([`Bearer ${CANARY}`])
      expect((yield* api("PATCH", `/v1/secrets/${secret.json.id}`, { allowed_hosts: [API, `http://${API}`] })).status)
        .toBe(200)

      // The value is nowhere the sandbox can read: env, files, processes.
      // (The pattern is put together in the shell: the script's own text must not hold it.)
      const [head, tail] = [CANARY.slice(0, 10), CANARY.slice(10)]
      const search = yield* sh(
        id,
        `pat="${head}""${tail}"; env | grep -c "$pat"; ` +
          `for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do grep -l "$pat" "$f" 2>/dev/null; done; ` +
          `grep -rl "$pat" / --exclude-dir=proc --exclude-dir=sys 2>/dev/null; true`
      )
      expect(search.stdout).toBe("0\n")

      // A policy change through the API: the next connection is refused, with the rule named.
      const changed = yield* api("PUT", `/v1/sandboxes/${id}/network`, { deny_out: [API] })
      expect(changed.status, changed.text).toBe(200)
      const refused = yield* eventually(
        sh(id, `curl -sS -o /tmp/answer -w '%{http_code}' http://${API}/; echo; cat /tmp/answer`),
        (r) => r.stdout.startsWith("403\n"),
        Duration.seconds(20)
      )
      expect(refused.stdout).toContain(API)
      // ...and another host is still reachable.
      expect((yield* sh(id, `curl -sS -o /dev/null -w '%{http_code}' http://${OTHER}/`)).stdout).toBe("200")

      // Rotation: the next request carries the new value.
      yield* api("PUT", `/v1/sandboxes/${id}/network`, { deny_out: [] })
      expect((yield* api("PUT", `/v1/secrets/${secret.json.id}/value`, { value: ROTATED })).status).toBe(200)
      const rotated = yield* eventually(
        sh(id, `curl -sS http://${API}/`),
        (r) => r.exit_code === 0 && received(r.stdout, "authorization").includes(`Bearer ${ROTATED}`),
        Duration.seconds(20)
      )
      expect(received(rotated.stdout, "authorization")).toEqual([`Bearer ${ROTATED}`])

      // Deleted secret: the sandbox loses it, its requests go out without the header.
      expect((yield* api("DELETE", `/v1/secrets/${secret.json.id}`)).status).toBe(200)
      yield* eventually(
        sh(id, `curl -sS http://${API}/`),
        (r) => r.exit_code === 0 && received(r.stdout, "authorization").length === 0,
        Duration.seconds(20)
      )
      expect((yield* api("DELETE", `/v1/sandboxes/${id}`)).status).toBe(202)
    }))
})
