/**
 * GET .../files/watch through the public API against a real agent and a real busybox sandbox
 * (issue 28): the changes under a folder as server-sent events (create, modify, delete, move with
 * its old path, in subfolders made after the watch began), the refusals (a missing path, /proc),
 * a client that does not read getting a last `overflow` and the end of the stream, and the
 * stream ending when the sandbox stops.
 */
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { api, create, Env, EnvLayer, expectError, waitState } from "../../testing/SandboxesEnv.ts"

const exec = (id: string, script: string) =>
  Effect.map(api("POST", `/v1/sandboxes/${id}/exec`, { body: { cmd: ["sh", "-c", script] } }), (res) => {
    expect(res.status, res.text).toBe(200)
    return res.json as { exit_code: number; stdout: string; stderr: string }
  })

interface WatchEvent {
  readonly event: string
  readonly data: { type: string; path: string; is_dir: boolean; from?: string }
}

/** An open watch: its events as they are parsed, and whether the stream ended. */
const openWatch = (base: string, token: string, id: string, path: string) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const controller = new AbortController()
      const res = await fetch(`${base}/v1/sandboxes/${id}/files/watch?path=${encodeURIComponent(path)}`, {
        headers: { authorization: `Bearer ${token}`, accept: "text/event-stream" },
        signal: controller.signal
      })
      const state = { events: [] as Array<WatchEvent>, ended: false, status: res.status }
      const reader = res.body!.getReader()
      let buffer = ""
      const read = async () => {
        try {
          for (;;) {
            const { done, value } = await reader.read()
            if (done) break
            buffer += Buffer.from(value).toString("utf8")
            let at: number
            while ((at = buffer.indexOf("\n\n")) !== -1) {
              const block = buffer.slice(0, at)
              buffer = buffer.slice(at + 2)
              const event = /^event: (.*)$/m.exec(block)?.[1]
              const data = /^data: (.*)$/m.exec(block)?.[1]
              if (event !== undefined && data !== undefined) state.events.push({ event, data: JSON.parse(data) })
            }
          }
        } catch {
          // aborted
        }
        state.ended = true
      }
      return { state, controller, reader, read }
    }),
    ({ controller }) => Effect.sync(() => controller.abort())
  )

const until = (check: () => boolean, what: string, ms = 20_000) =>
  Effect.promise(async () => {
    const end = Date.now() + ms
    while (!check() && Date.now() < end) await new Promise((r) => setTimeout(r, 50))
    expect(check(), what).toBe(true)
  })

layer(EnvLayer, { excludeTestServices: true, timeout: 240_000 })("watching a sandbox's folder", (it) => {
  it.effect("changes come as events; refusals; a slow client gets overflow; the stream ends when the sandbox stops", () =>
    Effect.scoped(Effect.gen(function*() {
      const env = yield* Env
      const s = yield* create({ region: "local", ram_mb: 128 })
      yield* waitState(s.id, "running")
      yield* exec(s.id, "mkdir -p /srv/w")

      const w = yield* openWatch(env.base, env.org.token, s.id, "/srv/w")
      expect(w.state.status).toBe(200)
      void w.read()
      yield* exec(
        s.id,
        "cd /srv/w && echo a > a.txt && sleep 0.2 && echo more >> a.txt && mkdir sub && sleep 0.3 && " +
          "echo b > sub/b.txt && mv sub/b.txt c.txt && rm a.txt"
      )
      const has = (type: string, path: string, isDir = false) =>
        w.state.events.some((e) => e.event === type && e.data.path === path && e.data.is_dir === isDir)
      yield* until(() => has("delete", "/srv/w/a.txt"), "every change seen")
      expect(has("create", "/srv/w/a.txt")).toBe(true)
      expect(has("modify", "/srv/w/a.txt")).toBe(true)
      expect(has("create", "/srv/w/sub", true)).toBe(true)
      expect(has("create", "/srv/w/sub/b.txt")).toBe(true)
      const move = w.state.events.find((e) => e.event === "move")
      expect(move?.data).toEqual({ type: "move", path: "/srv/w/c.txt", is_dir: false, from: "/srv/w/sub/b.txt" })

      // Refusals before any event.
      const watch = (path: string) => api("GET", `/v1/sandboxes/${s.id}/files/watch?path=${encodeURIComponent(path)}`)
      expectError(yield* watch("/srv/none"), 404, "not_found")
      expectError(yield* watch("/proc"), 400, "invalid_request")
      expectError(yield* watch("relative"), 400, "invalid_request")

      // A client that reads nothing while 20,000 changes happen, each event naming a path of
      // about 2.5 KB (50 MB of events: more than every socket buffer on the way holds): a last
      // overflow, then the end.
      const deep = yield* exec(
        s.id,
        "d=/srv/w/deep; for i in 1 2 3 4 5 6 7 8 9; do d=$d/$(printf '%0250d' $i); done; mkdir -p $d; echo $d"
      )
      const slow = yield* openWatch(env.base, env.org.token, s.id, "/srv/w/deep")
      yield* exec(s.id, `cd ${deep.stdout.trim()} && seq 1 20000 | xargs touch`)
      void slow.read()
      yield* until(() => slow.state.ended, "the slow watch ended", 60_000)
      expect(slow.state.events.at(-1)?.event).toBe("overflow")
      expect(slow.state.events.length).toBeLessThan(20_000)

      // A watch still open ends when the sandbox stops (the flood above may have overflowed the
      // first one too: a fresh one).
      const open = yield* openWatch(env.base, env.org.token, s.id, "/srv")
      void open.read()
      yield* Effect.sleep("500 millis")
      expect(open.state.ended).toBe(false)
      expect((yield* api("POST", `/v1/sandboxes/${s.id}/stop`)).status).toBe(202)
      yield* until(() => open.state.ended, "the watch ended with the sandbox", 30_000)
      yield* api("DELETE", `/v1/sandboxes/${s.id}`)
    })))
})
