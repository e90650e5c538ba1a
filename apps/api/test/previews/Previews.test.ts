/**
 * Exposed ports through the API's preview host (and a sandbox's usage, its network counted), against a real agent and a real sandbox whose
 * servers (busybox `nc` with shell scripts) record what reached them: a preview token or a key
 * allowed on the sandbox lets a request in, HTTP and an upgraded connection (bytes both ways),
 * neither credential reaches the sandbox's server, and every other request is refused with the
 * contract's error. A visitor admitted by a preview token who also carries the platform's
 * credentials (a key in `Authorization`, the dashboard's session cookie) hands none of them to
 * the sandbox's server, HTTP or upgrade (issue 25, item 8); the app's own headers and cookies pass.
 */
import { expect, layer } from "@effect/vitest"
import { Effect, Schedule } from "effect"
import { execFile } from "node:child_process"
import * as Http from "node:http"
import type * as Net from "node:net"
import * as NodePath from "node:path"
import { promisify } from "node:util"
import { Identity } from "../../testing/Sandboxes.ts"
import { api, create, Env, EnvLayer, expectError, waitState } from "../../testing/SandboxesEnv.ts"

const execFileAsync = promisify(execFile)
const cliMain = NodePath.resolve(import.meta.dirname, "../../../cli/src/main.ts")

/** Records each request's head in /tmp/head.<port>, answers with what its body was. */
const HTTP_SERVER = `#!/bin/sh
head=/tmp/head.$1
: > "$head"
len=0
while IFS= read -r line; do
  line=$(printf '%s' "$line" | tr -d '\\r')
  [ -z "$line" ] && break
  echo "$line" >> "$head"
  case "$line" in [Cc]ontent-[Ll]ength:*) len=\${line#*: };; esac
done
body=""
[ "$len" -gt 0 ] && body=$(head -c "$len")
resp="got \${body:-nothing}"
printf 'HTTP/1.1 200 OK\\r\\nContent-Type: text/plain\\r\\nX-From: sandbox\\r\\nContent-Length: %s\\r\\nConnection: close\\r\\n\\r\\n%s' "\${#resp}" "$resp"
`

/** Records the upgrade request's head, switches protocols, then echoes every byte. */
const ECHO_SERVER = `#!/bin/sh
: > /tmp/head.upgrade
while IFS= read -r line; do
  line=$(printf '%s' "$line" | tr -d '\\r')
  [ -z "$line" ] && break
  echo "$line" >> /tmp/head.upgrade
done
printf 'HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\n\\r\\n'
exec cat
`

interface Reply {
  readonly status: number
  readonly headers: Http.IncomingHttpHeaders
  readonly body: string
  readonly json: any
}

/** A request to the API's address with the preview host in `Host`. */
const preview = (host: string, path: string, options: { headers?: Record<string, string>; body?: string } = {}) =>
  Effect.flatMap(Effect.service(Env), (env) =>
    Effect.callback<Reply>((resume) => {
      const url = new URL(env.base)
      const request = Http.request({
        host: url.hostname,
        port: url.port,
        method: options.body === undefined ? "GET" : "POST",
        path,
        agent: false,
        headers: { host, ...options.headers }
      }, (response) => {
        let body = ""
        response.setEncoding("utf8")
        response.on("data", (chunk: string) => (body += chunk))
        response.on("end", () => {
          let json: any = null
          try {
            json = JSON.parse(body)
          } catch {
            // Not JSON: the sandbox's own answer.
          }
          resume(Effect.succeed({ status: response.statusCode ?? 0, headers: response.headers, body, json }))
        })
      })
      request.on("error", (e) => resume(Effect.die(e)))
      request.end(options.body)
    }))

/** An upgrade request through the preview host: the 101 and its socket, or the refusal. */
const upgrade = (host: string, headers: Record<string, string>) =>
  Effect.flatMap(
    Effect.service(Env),
    (env) =>
      Effect.callback<{ status: number; socket?: Net.Socket; body: string }>((resume) => {
        const url = new URL(env.base)
        const request = Http.request({
          host: url.hostname,
          port: url.port,
          path: "/ws",
          agent: false,
          headers: { host, connection: "Upgrade", upgrade: "websocket", ...headers }
        })
        request.on(
          "upgrade",
          (response, socket) => resume(Effect.succeed({ status: response.statusCode!, socket, body: "" }))
        )
        request.on("response", (response) => {
          let body = ""
          response.on("data", (chunk: Buffer) => (body += chunk.toString("utf8")))
          response.on("end", () => resume(Effect.succeed({ status: response.statusCode ?? 0, body })))
        })
        request.on("error", (e) => resume(Effect.die(e)))
        request.end()
      })
  )

const readFile = (id: string, path: string) =>
  Effect.map(api("GET", `/v1/sandboxes/${id}/files?path=${encodeURIComponent(path)}`), (r) => {
    expect(r.status, r.text).toBe(200)
    return r.text
  })

const exec = (id: string, script: string) =>
  Effect.map(api("POST", `/v1/sandboxes/${id}/exec`, { body: { cmd: ["sh", "-c", script] } }), (r) => {
    expect(r.status, r.text).toBe(200)
    expect(r.json.exit_code, r.text).toBe(0)
    return r.json
  })

/** The recording servers on 8080 (HTTP) and 9000 (upgrade, then echo). */
const startServers = (id: string) =>
  Effect.gen(function*() {
    for (const [path, text] of [["/srv/http.sh", HTTP_SERVER], ["/srv/echo.sh", ECHO_SERVER]] as const) {
      const put = yield* api("PUT", `/v1/sandboxes/${id}/files?path=${path}`, { raw: text })
      expect(put.status, put.text).toBe(204)
    }
    yield* exec(
      id,
      "chmod +x /srv/http.sh /srv/echo.sh; " +
        "setsid nc -ll -p 8080 -e /srv/http.sh 8080 </dev/null >/dev/null 2>&1 & " +
        "setsid nc -ll -p 9000 -e /srv/echo.sh </dev/null >/dev/null 2>&1 &"
    )
  })

const retried = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.retry(effect, { times: 50, schedule: Schedule.spaced("200 millis") })

layer(EnvLayer, { excludeTestServices: true, timeout: 180_000 })("exposed ports through the preview host", (it) => {
  it.effect("a preview token or an allowed key reaches the port over HTTP and an upgrade; everything else is refused", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const identity = yield* Identity
      const s = yield* create({ region: "local", ram_mb: 128, exposed_ports: [8080, 9000, 9100] })
      yield* waitState(s.id, "running")
      yield* startServers(s.id)
      const apiPort = new URL(env.base).port
      const host = (port: number, id = s.id) => `${port}-${id}.preview.localhost:${apiPort}`

      // The token: for an exposed port only, within the TTL's bounds, with the key's scopes.
      const minted = yield* api("POST", `/v1/sandboxes/${s.id}/ports/8080/token`, { body: {} })
      expect(minted.status, minted.text).toBe(201)
      expect(minted.json.url).toBe(`http://${host(8080)}/`)
      expect(minted.json.token).toMatch(/^svc_pv_/)
      const ttl = Date.parse(minted.json.expiresAt) - Date.now()
      expect(ttl).toBeGreaterThan(3500_000)
      expect(ttl).toBeLessThanOrEqual(3600_000)
      const token: string = minted.json.token
      const shortLived = yield* api("POST", `/v1/sandboxes/${s.id}/ports/8080/token`, { body: { ttl_s: 60 } })
      expect(shortLived.status).toBe(201)
      expect(Date.parse(shortLived.json.expiresAt) - Date.now()).toBeLessThanOrEqual(60_000)
      expectError(yield* api("POST", `/v1/sandboxes/${s.id}/ports/22/token`, { body: {} }), 404, "not_found")
      for (const ttl_s of [59, 86_401, 1.5, "60"]) {
        expectError(
          yield* api("POST", `/v1/sandboxes/${s.id}/ports/8080/token`, { body: { ttl_s } }),
          400,
          "invalid_request"
        )
      }
      for (const port of ["0", "65536", "80a", "-1"]) {
        expectError(
          yield* api("POST", `/v1/sandboxes/${s.id}/ports/${port}/token`, { body: {} }),
          400,
          "invalid_request"
        )
      }
      const reader = yield* identity.key(env.org.id, ["sandboxes:read"])
      expectError(
        yield* api("POST", `/v1/sandboxes/${s.id}/ports/8080/token`, { body: {}, token: reader }),
        403,
        "insufficient_scope"
      )
      expectError(
        yield* api("POST", `/v1/sandboxes/${s.id}/ports/8080/token`, { body: {}, token: env.other.token }),
        404,
        "not_found"
      )

      // With the token: the sandbox's own answer, the path and query as sent, the body through,
      // and the token never reaches the sandbox's server.
      const first = yield* retried(
        Effect.filterOrFail(
          preview(host(8080), "/some/path?q=1", { headers: { "x-svc-preview-token": token } }),
          (r) => r.status === 200
        )
      )
      expect(first.body).toBe("got nothing")
      expect(first.headers["x-from"]).toBe("sandbox")
      const head = yield* readFile(s.id, "/tmp/head.8080")
      expect(head).toContain("GET /some/path?q=1 HTTP/1.1")
      expect(head.toLowerCase()).toContain(`host: ${host(8080)}`.toLowerCase())
      expect(head.toLowerCase()).toContain("x-forwarded-for: 127.0.0.1")
      expect(head.toLowerCase()).not.toContain("x-svc-preview-token")
      expect(head).not.toContain(token)
      const posted = yield* preview(host(8080), "/echo", { headers: { "x-svc-preview-token": token }, body: "payload" })
      expect(posted.status).toBe(200)
      expect(posted.body).toBe("got payload")
      // The host's case and a trailing dot do not matter.
      const upper = yield* preview(host(8080).toUpperCase(), "/", { headers: { "x-svc-preview-token": token } })
      expect(upper.status).toBe(200)

      // Its usage: what crossed its link is counted (the requests in, the answers out), and
      // a bigger answer is counted out.
      const stats = yield* api("GET", `/v1/sandboxes/${s.id}/stats`, { token: reader })
      expect(stats.status, stats.text).toBe(200)
      expect(stats.json.pids).toBeGreaterThanOrEqual(3)
      expect(stats.json.memory_bytes).toBeGreaterThan(0)
      expect(stats.json.cpu_usage_ns).toBeGreaterThan(0)
      expect(stats.json.net_bytes_in).toBeGreaterThan(0)
      expect(stats.json.net_bytes_out).toBeGreaterThan(0)
      const big = "x".repeat(50_000)
      expect((yield* preview(host(8080), "/big", { headers: { "x-svc-preview-token": token }, body: big })).status)
        .toBe(200)
      const later = (yield* api("GET", `/v1/sandboxes/${s.id}/stats`)).json
      expect(later.net_bytes_in - stats.json.net_bytes_in).toBeGreaterThan(50_000)
      expect(later.net_bytes_out - stats.json.net_bytes_out).toBeGreaterThan(50_000)
      expectError(
        yield* api("GET", `/v1/sandboxes/${s.id}/stats`, { token: env.other.token }),
        404,
        "not_found"
      )

      // A key that may write the sandbox is let in too; its header stays with the proxy.
      const byKey = yield* preview(host(8080), "/by-key", { headers: { authorization: `Bearer ${env.org.token}` } })
      expect(byKey.status).toBe(200)
      const keyHead = yield* readFile(s.id, "/tmp/head.8080")
      expect(keyHead).toContain("GET /by-key HTTP/1.1")
      expect(keyHead.toLowerCase()).not.toContain("authorization")
      expect(keyHead).not.toContain(env.org.token)

      // Refusals, each with the contract's error.
      const refusals: ReadonlyArray<readonly [string, Record<string, string>, number, string]> = [
        [host(8080), {}, 401, "unauthenticated"],
        [host(8080), { "x-svc-preview-token": "svc_pv_v1.k.garbage" }, 401, "unauthenticated"],
        [host(8080), { "x-svc-preview-token": token.slice(0, -2) + "AA" }, 401, "unauthenticated"],
        // The token is for 8080 of this sandbox only.
        [host(9000), { "x-svc-preview-token": token }, 401, "unauthenticated"],
        [host(8080, "sbx_00000000000000000000000000"), { "x-svc-preview-token": token }, 401, "unauthenticated"],
        [host(8080), { authorization: "Bearer svc_live_not_a_key" }, 401, "unauthenticated"],
        [host(8080), { authorization: `Bearer ${reader}` }, 403, "insufficient_scope"],
        [host(8080), { authorization: `Bearer ${env.other.token}` }, 404, "not_found"],
        // Not exposed; exposed with nothing listening.
        [host(22), { authorization: `Bearer ${env.org.token}` }, 404, "not_found"],
        [host(9100), { authorization: `Bearer ${env.org.token}` }, 502, "bad_gateway"]
      ]
      for (const [target, headers, status, code] of refusals) {
        const refused = yield* preview(target, "/", { headers })
        expect(refused.status, `${target} ${JSON.stringify(headers)}: ${refused.body}`).toBe(status)
        expect(refused.json?.code, refused.body).toBe(code)
      }

      // An upgrade: the sandbox's server answers it, then bytes pass both ways as they are.
      const ws = yield* api("POST", `/v1/sandboxes/${s.id}/ports/9000/token`, { body: {} })
      const upgraded = yield* retried(
        Effect.filterOrFail(upgrade(host(9000), { "x-svc-preview-token": ws.json.token }), (r) => r.status === 101)
      )
      const socket = upgraded.socket!
      const echoed = yield* Effect.callback<string>((resume) => {
        let got = ""
        socket.on("data", (chunk: Buffer) => {
          got += chunk.toString("utf8")
          if (got.includes("pong\n")) resume(Effect.succeed(got))
        })
        socket.write("ping\n")
        socket.write("pong\n")
      })
      expect(echoed).toBe("ping\npong\n")
      socket.destroy()
      const upgradeHead = yield* readFile(s.id, "/tmp/head.upgrade")
      expect(upgradeHead).toContain("GET /ws HTTP/1.1")
      expect(upgradeHead.toLowerCase()).toContain("upgrade: websocket")
      expect(upgradeHead.toLowerCase()).not.toContain("x-svc-preview-token")
      const refusedUpgrade = yield* upgrade(host(9000), {})
      expect(refusedUpgrade.status).toBe(401)
      expect(JSON.parse(refusedUpgrade.body).code).toBe("unauthenticated")

      // The CLI: `svc sandbox expose` prints a URL and a token that let in.
      const printed = yield* Effect.promise(() =>
        execFileAsync(process.execPath, [cliMain, "sandbox", "expose", s.id, "8080", "--ttl-s", "120", "--json"], {
          env: { ...process.env, SVC_API_URL: env.base, SVC_API_KEY: env.org.token }
        })
      )
      const cli = JSON.parse(printed.stdout)
      expect(cli.url).toBe(`http://${host(8080)}/`)
      const viaCli = yield* preview(host(8080), "/cli", { headers: { "x-svc-preview-token": cli.token } })
      expect(viaCli.status).toBe(200)
      const cliRefused = yield* Effect.promise(() =>
        execFileAsync(process.execPath, [cliMain, "sandbox", "expose", s.id, "22"], {
          env: { ...process.env, SVC_API_URL: env.base, SVC_API_KEY: env.org.token }
        }).then(
          () => "exit 0",
          (e: { code: number; stderr: string; stdout: string }) => `exit ${e.code}: ${e.stderr}${e.stdout}`
        )
      )
      expect(cliRefused).toMatch(/^exit 1: .*not_found/s)
      const cliStats = yield* Effect.promise(() =>
        execFileAsync(process.execPath, [cliMain, "sandbox", "stats", s.id], {
          env: { ...process.env, SVC_API_URL: env.base, SVC_API_KEY: env.org.token }
        })
      )
      expect(JSON.parse(cliStats.stdout).net_bytes_in).toBeGreaterThan(50_000)

      // A stopped sandbox: 409 until it runs again.
      expect((yield* api("POST", `/v1/sandboxes/${s.id}/stop`)).status).toBe(202)
      yield* waitState(s.id, "stopped")
      const stopped = yield* preview(host(8080), "/", { headers: { "x-svc-preview-token": token } })
      expect(stopped.status).toBe(409)
      expect(stopped.json.code).toBe("conflict")
      expectError(yield* api("GET", `/v1/sandboxes/${s.id}/stats`), 409, "conflict")

      // Deleted: the token lets nothing in any more, and no token is made for it.
      expect((yield* api("DELETE", `/v1/sandboxes/${s.id}`)).status).toBe(202)
      const deleted = yield* preview(host(8080), "/", { headers: { "x-svc-preview-token": token } })
      expect(deleted.status).toBe(404)
      expect(deleted.json.code).toBe("not_found")
      expectError(yield* api("POST", `/v1/sandboxes/${s.id}/ports/8080/token`, { body: {} }), 404, "not_found")
    }))
  it.effect("a visitor let in by a preview token hands the sandbox none of the platform's credentials (key, session cookie, token), HTTP and upgrade", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const s = yield* create({ region: "local", ram_mb: 128, exposed_ports: [8080, 9000] })
      yield* waitState(s.id, "running")
      yield* startServers(s.id)
      const host = (port: number) => `${port}-${s.id}.preview.localhost:${new URL(env.base).port}`
      const token: string = (yield* api("POST", `/v1/sandboxes/${s.id}/ports/8080/token`, { body: {} })).json.token
      const wsToken: string = (yield* api("POST", `/v1/sandboxes/${s.id}/ports/9000/token`, { body: {} })).json.token
      // What a browser signed in to the dashboard sends along (the same site's cookies), and a
      // client that sends its key everywhere.
      const session = "sess_" + "a".repeat(40)
      const visitor = (previewToken: string, authorization: string) => ({
        "x-svc-preview-token": previewToken,
        authorization,
        cookie:
          `theme=dark; client.session_token=${session}; app_session=kept-by-the-app; CLIENT.SESSION_TOKEN=${session}`
      })
      const secrets = [env.org.token, token, wsToken, session]
      const leaked = (head: string) => secrets.filter((secret) => head.includes(secret))

      const first = yield* retried(
        Effect.filterOrFail(
          preview(host(8080), "/with-key", { headers: visitor(token, `Bearer ${env.org.token}`) }),
          (r) => r.status === 200
        )
      )
      expect(first.body).toBe("got nothing")
      const head = yield* readFile(s.id, "/tmp/head.8080")
      expect(head).toContain("GET /with-key HTTP/1.1")
      expect(leaked(head)).toEqual([])
      expect(head.toLowerCase()).not.toContain("authorization")
      expect(head.toLowerCase()).not.toContain("x-svc-preview-token")
      expect(head.toLowerCase()).not.toContain("client.session_token")
      // The app's own cookies pass, in their order.
      expect(head).toMatch(/^cookie: theme=dark; app_session=kept-by-the-app$/im)

      // Another platform token in Authorization (a second preview token) goes too; the app's own
      // Authorization (not the platform's form) passes.
      expect((yield* preview(host(8080), "/pv", { headers: visitor(token, `Bearer ${token}`) })).status).toBe(200)
      const pvHead = yield* readFile(s.id, "/tmp/head.8080")
      expect(pvHead).toContain("GET /pv HTTP/1.1")
      expect(leaked(pvHead)).toEqual([])
      expect(pvHead.toLowerCase()).not.toContain("authorization")
      expect((yield* preview(host(8080), "/app", { headers: visitor(token, "Bearer app-jwt.payload.sig") })).status)
        .toBe(200)
      const appHead = yield* readFile(s.id, "/tmp/head.8080")
      expect(appHead).toContain("GET /app HTTP/1.1")
      expect(appHead).toMatch(/^authorization: Bearer app-jwt\.payload\.sig$/im)
      expect(leaked(appHead)).toEqual([])

      // The upgrade: the same.
      const upgraded = yield* retried(
        Effect.filterOrFail(
          upgrade(host(9000), visitor(wsToken, `Bearer ${env.org.token}`)),
          (r) => r.status === 101
        )
      )
      upgraded.socket!.destroy()
      const upgradeHead = yield* readFile(s.id, "/tmp/head.upgrade")
      expect(upgradeHead).toContain("GET /ws HTTP/1.1")
      expect(leaked(upgradeHead)).toEqual([])
      expect(upgradeHead.toLowerCase()).not.toContain("authorization")
      expect(upgradeHead.toLowerCase()).not.toContain("client.session_token")
      expect(upgradeHead).toMatch(/^cookie: theme=dark; app_session=kept-by-the-app$/im)
      yield* api("DELETE", `/v1/sandboxes/${s.id}`)
    }))
})
