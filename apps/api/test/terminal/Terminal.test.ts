/**
 * The terminal WebSocket through the API, a real agent and real sandboxes
 * (docs/contract.md#terminal), driven by a real WebSocket client: a command typed and its
 * output read, a resize seen by `stty size`, the exit code, two terminals at once, every refusal
 * before the upgrade, a revoked key and a stopped sandbox closing an open terminal.
 */
import { WebSocket } from "@effect/platform-node/NodeWS"
import { expect, layer } from "@effect/vitest"
import { Duration, Effect } from "effect"
import * as Http from "node:http"
import { Identity } from "../../testing/Sandboxes.ts"
import { api, create, Env, EnvLayer, waitState } from "../../testing/SandboxesEnv.ts"

interface Terminal {
  /** Everything the terminal printed so far (binary frames). */
  readonly screen: () => string
  /** The JSON control messages received. */
  readonly messages: Array<{ type: string; code?: number }>
  readonly closed: () => { code: number; reason: string } | undefined
  readonly type: (text: string) => void
  readonly control: (message: unknown) => void
  readonly ws: WebSocket
}

/** A WebSocket to /terminal; ends with the scope. */
const openTerminal = (query: string) =>
  Effect.gen(function*() {
    const env = yield* Effect.service(Env)
    return yield* Effect.acquireRelease(
      Effect.callback<Terminal, Error>((resume) => {
        const ws = new WebSocket(`${env.base.replace(/^http/, "ws")}/terminal?${query}`)
        let screen = ""
        let closed: { code: number; reason: string } | undefined
        const messages: Terminal["messages"] = []
        ws.on("message", (data: Buffer, isBinary: boolean) => {
          if (isBinary) screen += data.toString("utf8")
          else messages.push(JSON.parse(data.toString("utf8")))
        })
        ws.on("close", (code: number, reason: Buffer) => (closed = { code, reason: reason.toString() }))
        ws.on("error", (e: Error) => resume(Effect.fail(e)))
        ws.on("unexpected-response", (_req: unknown, res: Http.IncomingMessage) =>
          resume(Effect.fail(new Error(`refused with ${res.statusCode}`))))
        ws.on("open", () =>
          resume(Effect.succeed({
            screen: () =>
              screen,
            messages,
            closed: () => closed,
            type: (text) => ws.send(Buffer.from(text, "utf8"), { binary: true }),
            control: (message) => ws.send(JSON.stringify(message)),
            ws
          })))
      }),
      (t) => Effect.sync(() => t.ws.terminate())
    )
  })

/** Waits (polling, no timing assertion) until `check` holds; fails after `timeout`. */
const until = (check: () => boolean, what: string, timeout: Duration.Input = Duration.seconds(20)) =>
  Effect.gen(function*() {
    const deadline = Date.now() + Duration.toMillis(Duration.fromInputUnsafe(timeout))
    while (!check()) {
      if (Date.now() > deadline) return yield* Effect.die(new Error(`timed out waiting for ${what}`))
      yield* Effect.sleep(Duration.millis(20))
    }
  })

const screenHas = (t: Terminal, needle: string) => until(() => t.screen().includes(needle), needle)

/** A WebSocket handshake that is refused: its status and JSON body, as a client sees them. */
const refused = (query: string, headers: Record<string, string> = {}, path = "/terminal") =>
  Effect.flatMap(
    Effect.service(Env),
    (env) =>
      Effect.promise(() =>
        new Promise<{ status: number; json: any; headers: Http.IncomingHttpHeaders }>((resolve, reject) => {
          const url = new URL(env.base)
          const request = Http.request({
            host: url.hostname,
            port: url.port,
            path: `${path}?${query}`,
            agent: false,
            headers: {
              connection: "Upgrade",
              upgrade: "websocket",
              "sec-websocket-version": "13",
              "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==",
              ...headers
            }
          })
          request.on("upgrade", () => reject(new Error("the handshake was accepted")))
          request.on("response", (res) => {
            let body = ""
            res.on("data", (c) => (body += c))
            res.on("end", () => resolve({ status: res.statusCode ?? 0, json: JSON.parse(body), headers: res.headers }))
          })
          request.on("error", reject)
          request.end()
        })
      )
  )

const expectRefused = (answer: { status: number; json: any }, status: number, code: string) => {
  expect(answer.status, JSON.stringify(answer.json)).toBe(status)
  expect(answer.json.code, JSON.stringify(answer.json)).toBe(code)
  expect(typeof answer.json.error).toBe("string")
}

layer(EnvLayer, { excludeTestServices: true, timeout: 180_000 })("the terminal", (it) => {
  it.effect("a command typed and read, a resize, the exit code; two terminals at once", () =>
    Effect.gen(function*() {
      const env = yield* Effect.service(Env)
      const s = yield* create({ region: "local" })
      yield* waitState(s.id, "running")

      const one = yield* openTerminal(`token=${env.org.token}&sandbox_id=${s.id}&cols=100&rows=30`)
      one.type("echo typed-$((40+2)); stty size\n")
      yield* screenHas(one, "typed-42")
      yield* screenHas(one, "30 100")

      one.control({ type: "resize", cols: 132, rows: 43 })
      one.type("stty size; echo sized-$((1+1))\n")
      yield* screenHas(one, "sized-2")
      expect(one.screen()).toContain("43 132")
      // A control message it does not know, or a bad size, changes nothing and closes nothing.
      one.control({ type: "resize", cols: 0, rows: 5 })
      one.control({ type: "dance" })
      one.type("stty size; echo still-$((2+2))\n")
      yield* screenHas(one, "still-4")
      expect(one.screen().split("still-4")[0]!.trim().split("\n").filter((l) => l.includes("43 132")).length)
        .toBeGreaterThanOrEqual(2)

      // A second terminal at once: its own shell, both answer.
      const two = yield* openTerminal(`token=${env.org.token}&sandbox_id=${s.id}`)
      two.type("echo two-pid-$$; stty size\n")
      one.type("echo one-pid-$$\n")
      yield* screenHas(two, "two-pid-")
      yield* screenHas(one, "one-pid-")
      yield* screenHas(two, "24 80")
      const pidOf = (t: Terminal, label: string) => /(?:^|\n)\S*?-?pid-(\d+)/.exec(t.screen().split(label).at(-1) ?? "")
      expect(pidOf(one, "one")?.[1]).not.toBe(pidOf(two, "two")?.[1])

      // The shell runs as the sandbox's root, with its filter.
      two.type("echo id-$(id -u); grep Seccomp: /proc/self/status\n")
      yield* screenHas(two, "id-0")
      yield* until(() => /Seccomp:\s+2/.test(two.screen()), "Seccomp: 2")

      one.type("exit 7\n")
      yield* until(() => one.closed() !== undefined, "the first terminal to close")
      expect(one.messages).toEqual([{ type: "exit", code: 7 }])
      expect(one.closed()!.code).toBe(1000)
      // The other one is unaffected.
      two.type("echo after-$((3+3))\n")
      yield* screenHas(two, "after-6")
      two.type("exit\n")
      yield* until(() => two.closed() !== undefined, "the second terminal to close")
      expect(two.messages).toEqual([{ type: "exit", code: 0 }])

      // The key in the Authorization header works as well.
      const headerKey = yield* Effect.callback<number>((resume) => {
        const ws = new WebSocket(`${env.base.replace(/^http/, "ws")}/terminal?sandbox_id=${s.id}`, {
          headers: { authorization: `Bearer ${env.org.token}` }
        })
        ws.on("open", () => {
          ws.close()
          resume(Effect.succeed(101))
        })
        ws.on("unexpected-response", (_r: unknown, res: Http.IncomingMessage) =>
          resume(Effect.succeed(res.statusCode ?? 0)))
      })
      expect(headerKey).toBe(101)
    }).pipe(Effect.scoped))

  it.effect("every refusal comes before the upgrade with the contract's status and code", () =>
    Effect.gen(function*() {
      const env = yield* Effect.service(Env)
      const identity = yield* Identity
      const s = yield* create({ region: "local" })
      const other = yield* create({ region: "local" })
      yield* waitState(s.id, "running")
      const q = (token: string, rest = "") => `token=${token}&sandbox_id=${s.id}${rest}`

      const none = yield* refused(`sandbox_id=${s.id}`)
      expectRefused(none, 401, "unauthenticated")
      expect(none.headers["www-authenticate"]).toBe("Bearer")
      expectRefused(yield* refused(q("svc_live_not-a-key")), 401, "unauthenticated")
      expectRefused(yield* refused(q("")), 401, "unauthenticated")
      // ?token= is accepted on /terminal only.
      expectRefused(yield* refused(`token=${env.org.token}`, {}, "/v1/sandboxes"), 401, "token_in_query_not_allowed")

      const reading = yield* identity.key(env.org.id, ["sandboxes:read"])
      const noScope = yield* refused(q(reading))
      expectRefused(noScope, 403, "insufficient_scope")
      expect(noScope.json.required_scope).toBe("sandboxes:write")
      const confined = yield* identity.key(env.org.id, [`sandbox:${other.id}`])
      expectRefused(yield* refused(q(confined)), 403, "sandbox_out_of_scope")
      expectRefused(yield* refused(q(env.other.token)), 404, "not_found")
      expectRefused(
        yield* refused(`token=${env.org.token}&sandbox_id=sbx_00000000000000000000000000`),
        404,
        "not_found"
      )

      expectRefused(yield* refused(`token=${env.org.token}`), 400, "invalid_request")
      expectRefused(yield* refused(q(env.org.token, "&cols=0")), 400, "invalid_request")
      expectRefused(yield* refused(q(env.org.token, "&rows=1001")), 400, "invalid_request")
      expectRefused(yield* refused(q(env.org.token, "&cols=abc")), 400, "invalid_request")
      // Not a WebSocket handshake.
      const plain = yield* api("GET", `/terminal?${q(env.org.token)}`, { token: undefined as never })
      expect(plain.status).toBe(400)
      expect(plain.json.code).toBe("invalid_request")

      // The sandbox's own key works on it.
      const own = yield* identity.key(env.org.id, [`sandbox:${s.id}`])
      const mine = yield* openTerminal(q(own))
      mine.type("exit 2\n")
      yield* until(() => mine.closed() !== undefined, "the terminal to close")
      expect(mine.messages).toEqual([{ type: "exit", code: 2 }])

      // A stopped sandbox.
      expect((yield* api("POST", `/v1/sandboxes/${s.id}/stop`)).status).toBe(202)
      yield* waitState(s.id, "stopped")
      expectRefused(yield* refused(q(env.org.token)), 409, "conflict")
    }).pipe(Effect.scoped))

  it.effect("a revoked key closes its open terminal; the sandbox stopping closes them all", () =>
    Effect.gen(function*() {
      const env = yield* Effect.service(Env)
      const s = yield* create({ region: "local" })
      yield* waitState(s.id, "running")
      const minted = yield* api("POST", "/v1/auth/api-keys", {
        body: { name: "terminal", scopes: ["sandboxes:write"] }
      })
      expect(minted.status, minted.text).toBe(201)

      const revocable = yield* openTerminal(`token=${minted.json.token}&sandbox_id=${s.id}`)
      const kept = yield* openTerminal(`token=${env.org.token}&sandbox_id=${s.id}`)
      revocable.type("echo alive-$((5+5))\n")
      yield* screenHas(revocable, "alive-10")
      expect((yield* api("DELETE", `/v1/auth/api-keys/${minted.json.id}`)).status).toBe(200)
      yield* until(() => revocable.closed() !== undefined, "the revoked key's terminal to close")
      expect(revocable.closed()!.code).toBe(4401)
      expect(revocable.messages).toEqual([])
      // Another key's terminal stays open.
      kept.type("echo kept-$((6+6))\n")
      yield* screenHas(kept, "kept-12")
      expect(kept.closed()).toBeUndefined()

      expect((yield* api("POST", `/v1/sandboxes/${s.id}/stop`)).status).toBe(202)
      yield* until(() => kept.closed() !== undefined, "the terminal to close with its sandbox")
      expect(kept.messages.at(-1)?.type).toBe("exit")
    }).pipe(Effect.scoped))
})
