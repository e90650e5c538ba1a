/**
 * GET /v1/events through the real stack (API, runtime, a real agent): the org's events arrive
 * as server-sent events while sandboxes change, a reconnect with Last-Event-ID gets exactly what
 * it missed, `?events=` filters, and each credential sees only what it can read.
 */
import { expect, layer } from "@effect/vitest"
import { Duration, Effect } from "effect"
import { spawn } from "node:child_process"
import * as Http from "node:http"
import * as NodePath from "node:path"
import { eventually, Identity } from "../../testing/Sandboxes.ts"
import { api, create, Env, EnvLayer, expectError, waitState } from "../../testing/SandboxesEnv.ts"

const cliMain = NodePath.resolve(import.meta.dirname, "../../../cli/src/main.ts")

interface Received {
  readonly id: number
  readonly event: string
  readonly data: { readonly event: string; readonly org_id: string; readonly data: Record<string, any> }
}

interface Subscription {
  readonly status: number
  /** Every event so far, in order. */
  readonly received: Array<Received>
  readonly comments: Array<string>
  readonly body: () => string
  readonly close: () => void
}

/** Opens the stream; resolves once the server said it is connected (or answered otherwise). */
const subscribe = (token: string, options: { readonly lastEventId?: string; readonly events?: string } = {}) =>
  Effect.flatMap(Effect.service(Env), (env) =>
    Effect.acquireRelease(
      Effect.callback<Subscription>((resume) => {
        const url = new URL(env.base)
        const query = options.events === undefined ? "" : `?events=${encodeURIComponent(options.events)}`
        const request = Http.get({
          host: url.hostname,
          port: url.port,
          path: `/v1/events${query}`,
          headers: {
            authorization: `Bearer ${token}`,
            accept: "text/event-stream",
            ...(options.lastEventId !== undefined ? { "last-event-id": options.lastEventId } : {})
          }
        }, (response) => {
          const received: Array<Received> = []
          const comments: Array<string> = []
          let buffer = ""
          let all = ""
          const subscription: Subscription = {
            status: response.statusCode ?? 0,
            received,
            comments,
            body: () => all,
            close: () => request.destroy()
          }
          response.setEncoding("utf8")
          response.on("data", (chunk: string) => {
            all += chunk
            buffer += chunk
            let end: number
            while ((end = buffer.indexOf("\n\n")) !== -1) {
              const block = buffer.slice(0, end)
              buffer = buffer.slice(end + 2)
              const fields: Record<string, string> = {}
              for (const line of block.split("\n")) {
                if (line.startsWith(":")) comments.push(line.slice(1).trim())
                else {
                  const colon = line.indexOf(":")
                  const name = line.slice(0, colon)
                  fields[name] = (fields[name] === undefined ? "" : fields[name] + "\n") + line.slice(colon + 1).trim()
                }
              }
              if (fields["id"] !== undefined) {
                received.push({ id: Number(fields["id"]), event: fields["event"]!, data: JSON.parse(fields["data"]!) })
              }
              if (comments.includes("connected")) resume(Effect.succeed(subscription))
            }
          })
          response.on("end", () => resume(Effect.succeed(subscription)))
        })
        request.on("error", () => undefined)
      }),
      (subscription) => Effect.sync(() => subscription.close())
    ))

const until = (subscription: Subscription, check: (received: ReadonlyArray<Received>) => boolean) =>
  eventually(Effect.sync(() => [...subscription.received]), check, Duration.seconds(30))

const has = (received: ReadonlyArray<Received>, event: string, sandboxId: string, state?: string) =>
  received.some((r) =>
    r.event === event && r.data.data["sandbox_id"] === sandboxId &&
    (state === undefined || r.data.data["state"] === state)
  )

layer(EnvLayer, { excludeTestServices: true, timeout: 180_000 })("realtime events", (it) => {
  it.effect("the org's events as they happen; a reconnect with Last-Event-ID gets exactly what it missed; ?events= filters", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const live = yield* subscribe(env.org.token)
      expect(live.status).toBe(200)
      const s = yield* create({ region: "local", ram_mb: 128 })
      yield* waitState(s.id, "running")
      const first = yield* until(live, (r) => has(r, "sandbox.created", s.id))
      for (const r of first) {
        expect(r.data.org_id).toBe(env.org.id)
        expect(r.data.event).toBe(r.event)
      }
      expect(has(first, "sandbox.state_updated", s.id, "running")).toBe(true)
      const ids = first.map((r) => r.id)
      expect([...ids].sort((a, b) => a - b)).toEqual(ids)
      expect(new Set(ids).size).toBe(ids.length)

      // Only deletions, from a second client.
      const deletions = yield* subscribe(env.org.token, { events: "sandbox.deleted" })

      // The first client goes away; the sandbox stops meanwhile; it reconnects from its last id.
      const lastSeen = live.received.at(-1)!.id
      live.close()
      expect((yield* api("POST", `/v1/sandboxes/${s.id}/stop`)).status).toBe(202)
      yield* waitState(s.id, "stopped")
      const resumed = yield* subscribe(env.org.token, { lastEventId: String(lastSeen) })
      const missed = yield* until(resumed, (r) => has(r, "sandbox.state_updated", s.id, "stopped"))
      expect(missed.every((r) => r.id > lastSeen)).toBe(true)
      expect(has(missed, "sandbox.state_updated", s.id, "stopping")).toBe(true)

      expect((yield* api("DELETE", `/v1/sandboxes/${s.id}`)).status).toBe(202)
      yield* until(deletions, (r) => has(r, "sandbox.deleted", s.id))
      yield* until(resumed, (r) => has(r, "sandbox.deleted", s.id))
      expect(deletions.received.every((r) => r.event === "sandbox.deleted")).toBe(true)

      // Refusals before any stream.
      expectError(yield* api("GET", "/v1/events?events=sandbox.*"), 400, "invalid_event_filter")
      expectError(yield* api("GET", "/v1/events?events=nope"), 400, "invalid_event_filter")
      expectError(yield* api("GET", "/v1/events", { headers: { "last-event-id": "abc" } }), 400, "invalid_request")
      expectError(yield* api("GET", "/v1/events", { token: "svc_live_nope" }), 401, "unauthenticated")
    }))

  it.effect("each credential sees what it can read: another org nothing, a sandbox key its sandbox and children, templates:read no sandbox event", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const identity = yield* Identity
      const parent = yield* create({ region: "local", ram_mb: 128 })
      const other = yield* create({ region: "local", ram_mb: 128 })
      yield* waitState(parent.id, "running")
      yield* waitState(other.id, "running")
      const confined = yield* identity.key(env.org.id, [`sandbox:${parent.id}`])
      const templatesOnly = yield* identity.key(env.org.id, ["templates:read"])
      const byScope = yield* subscribe(confined)
      const byTemplates = yield* subscribe(templatesOnly)
      const byOtherOrg = yield* subscribe(env.other.token)
      const byOrg = yield* subscribe(env.org.token)

      const child = yield* create({ region: "local", ram_mb: 128, parent_id: parent.id })
      const grandchild = yield* create({ region: "local", ram_mb: 128, parent_id: child.id })
      for (const id of [parent.id, other.id]) expect((yield* api("POST", `/v1/sandboxes/${id}/stop`)).status).toBe(202)
      yield* waitState(grandchild.id, "running")
      yield* until(
        byOrg,
        (r) =>
          has(r, "sandbox.state_updated", parent.id, "stopped") &&
          has(r, "sandbox.state_updated", other.id, "stopped") &&
          has(r, "sandbox.created", grandchild.id)
      )
      // The confined key: its sandbox and its direct child, nothing else.
      const scoped = yield* until(
        byScope,
        (r) => has(r, "sandbox.state_updated", parent.id, "stopped") && has(r, "sandbox.created", child.id)
      )
      const about = new Set(scoped.map((r) => r.data.data["sandbox_id"]))
      expect([...about].sort()).toEqual([child.id, parent.id].sort())
      expect(byTemplates.received).toEqual([])
      expect(byOtherOrg.received).toEqual([])
      for (const id of [parent.id, other.id, child.id, grandchild.id]) yield* api("DELETE", `/v1/sandboxes/${id}`)
    }))

  it.effect("svc events prints each event as a JSON line, filtered", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const child = yield* Effect.acquireRelease(
        Effect.sync(() =>
          spawn(process.execPath, [cliMain, "events", "--events", "sandbox.deleted"], {
            env: { ...process.env, SVC_API_URL: env.base, SVC_API_KEY: env.org.token },
            stdio: ["ignore", "pipe", "pipe"]
          })
        ),
        (child) => Effect.sync(() => child.kill("SIGKILL"))
      )
      let out = ""
      let err = ""
      child.stdout.on("data", (chunk: Buffer) => (out += chunk.toString("utf8")))
      child.stderr.on("data", (chunk: Buffer) => (err += chunk.toString("utf8")))
      yield* eventually(Effect.sync(() => err), (e) => e.includes("following"), Duration.seconds(20))
      // The CLI says it follows once the server answered: events from then on reach it.
      const s = yield* create({ region: "local", ram_mb: 128 })
      yield* waitState(s.id, "running")
      expect((yield* api("DELETE", `/v1/sandboxes/${s.id}`)).status).toBe(202)
      const printed = yield* eventually(Effect.sync(() => out), (o) => o.includes(s.id), Duration.seconds(30))
      const lines = printed.trim().split("\n").map((line) => JSON.parse(line))
      expect(lines.every((l) => l.event === "sandbox.deleted" && typeof l.id === "number")).toBe(true)
      expect(lines.some((l) => l.data.sandbox_id === s.id)).toBe(true)
    }))
})
