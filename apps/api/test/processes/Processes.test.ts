/**
 * Sandbox processes through the API, a real agent and real sandboxes
 * (docs/contract.md#sandbox-processes): exec streamed as server-sent events, background processes
 * (a server followed, stdin, signals, exit codes, the list) and every refusal.
 */
import { expect, layer } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import { Identity } from "../../testing/Sandboxes.ts"
import { api, create, Env, EnvLayer, expectError, waitState } from "../../testing/SandboxesEnv.ts"
import { openEvents, outputOf, type SseEvent } from "./EventStream.support.ts"

const exec = (id: string, script: string) =>
  Effect.map(api("POST", `/v1/sandboxes/${id}/exec`, { body: { cmd: ["sh", "-c", script] } }), (res) => {
    expect(res.status, res.text).toBe(200)
    return res.json as { exit_code: number; stdout: string; stderr: string }
  })

const events = (path: string, method = "GET", body?: unknown, token?: string) =>
  Effect.flatMap(Effect.service(Env), (env) => openEvents(env.base, token ?? env.org.token, method, path, body))

const exitOf = (events: ReadonlyArray<SseEvent>) => {
  const last = events.at(-1)
  expect(last?.event, JSON.stringify(events)).toBe("exit")
  return JSON.parse(last!.data) as { exit_code: number; duration_ms: number; reason?: string }
}

layer(EnvLayer, { excludeTestServices: true, timeout: 180_000 })("sandbox processes", (it) => {
  it.effect("a streamed exec sends its first output before the command ends, then its exit", () =>
    Effect.gen(function*() {
      const s = yield* create({ region: "local" })
      yield* waitState(s.id, "running")
      const stream = yield* events(`/v1/sandboxes/${s.id}/exec`, "POST", {
        cmd: ["sh", "-c", "echo ready; echo warn >&2; while [ ! -e /tmp/go ]; do sleep 0.05; done; echo done; exit 3"]
      })
      expect(stream.status).toBe(200)
      expect(stream.headers["content-type"]).toContain("text/event-stream")
      const first = yield* stream.next
      expect(first?.event).toBe("stdout")
      expect(outputOf([first!])).toBe("ready\n")
      // The command is still waiting: only now is it told to go on.
      yield* exec(s.id, "touch /tmp/go")
      const rest = [first!, ...(yield* stream.rest)]
      expect(outputOf(rest)).toBe("ready\ndone\n")
      expect(outputOf(rest, "stderr")).toBe("warn\n")
      const exit = exitOf(rest)
      expect(exit.exit_code).toBe(3)
      expect(exit.duration_ms).toBeGreaterThanOrEqual(0)

      // Without the header: the plain result, as before.
      const plain = yield* exec(s.id, "echo plain")
      expect(plain.stdout).toBe("plain\n")

      // Refusals come before the stream, as JSON.
      const bad = yield* events(`/v1/sandboxes/${s.id}/exec`, "POST", { cmd: [] })
      expect(bad.status).toBe(400)
      expect(JSON.parse(yield* bad.body).code).toBe("invalid_request")
      const other = yield* Effect.service(Env)
      const foreign = yield* events(`/v1/sandboxes/${s.id}/exec`, "POST", { cmd: ["true"] }, other.other.token)
      expect(foreign.status).toBe(404)
      expect(JSON.parse(yield* foreign.body).code).toBe("not_found")
    }).pipe(Effect.scoped))

  it.effect("a background server: started, its output followed, a signal, its exit code; stdin; the list", () =>
    Effect.gen(function*() {
      const s = yield* create({ region: "local" })
      yield* waitState(s.id, "running")
      yield* exec(s.id, "mkdir -p /srv/www && echo hello-from-httpd > /srv/www/index.html")

      const started = yield* api("POST", `/v1/sandboxes/${s.id}/processes`, {
        body: { cmd: ["httpd", "-f", "-v", "-p", "8000", "-h", "/srv/www"] }
      })
      expect(started.status, started.text).toBe(201)
      const server = started.json
      expect(server).toMatchObject({ cmd: ["httpd", "-f", "-v", "-p", "8000", "-h", "/srv/www"], state: "running" })
      expect(server.exit_code).toBeNull()
      expect(server.exitedAt).toBeNull()
      expect(typeof server.startedAt).toBe("string")
      // Its pid is the sandbox's own: the process is there under that pid.
      const inside = yield* exec(s.id, `cat /proc/${server.pid}/cmdline | tr '\\0' ' '`)
      expect(inside.stdout).toContain("httpd -f -v -p 8000")

      // Followed: a request to it shows in its log as it happens.
      const follow = yield* events(`/v1/sandboxes/${s.id}/processes/${server.pid}/output?follow=true`)
      expect(follow.status).toBe(200)
      const following = yield* Effect.forkScoped(follow.rest)
      const fetched = yield* exec(
        s.id,
        "for i in 1 2 3 4 5 6 7 8 9 10; do curl -s http://127.0.0.1:8000/ && break; sleep 0.2; done"
      )
      expect(fetched.stdout).toBe("hello-from-httpd\n")

      const signalled = yield* api("POST", `/v1/sandboxes/${s.id}/processes/${server.pid}/signal`, {
        body: { signal: "TERM" }
      })
      expect(signalled.status, signalled.text).toBe(202)
      const followed = yield* Fiber.join(following)
      expect(outputOf(followed, "stderr")).toContain("response:200")
      const serverExit = exitOf(followed)
      expect(serverExit).toMatchObject({ exit_code: 143, reason: "killed" })
      const after = yield* api("GET", `/v1/sandboxes/${s.id}/processes/${server.pid}`)
      expect(after.status).toBe(200)
      expect(after.json).toMatchObject({ pid: server.pid, state: "exited", exit_code: 143, reason: "killed" })
      expect(typeof after.json.exitedAt).toBe("string")

      // Stdin: written, then closed; the process reads it and ends with its own code.
      const reader = yield* api("POST", `/v1/sandboxes/${s.id}/processes`, {
        body: {
          cmd: ["sh", "-c", "while read line; do echo \"got $line\"; done; echo bye >&2; exit 5"],
          stdin: true,
          env: { LANG: "C" },
          cwd: "/tmp"
        }
      })
      expect(reader.status, reader.text).toBe(201)
      const pid = reader.json.pid
      const wrote = yield* api("POST", `/v1/sandboxes/${s.id}/processes/${pid}/stdin`, {
        raw: "one\n",
        headers: { "content-type": "text/plain" }
      })
      expect(wrote.status, wrote.text).toBe(204)
      const closed = yield* api("POST", `/v1/sandboxes/${s.id}/processes/${pid}/stdin?close=true`, { raw: "two\n" })
      expect(closed.status, closed.text).toBe(204)
      const readerEvents = yield* (yield* events(`/v1/sandboxes/${s.id}/processes/${pid}/output?follow=true`)).rest
      expect(outputOf(readerEvents)).toBe("got one\ngot two\n")
      expect(outputOf(readerEvents, "stderr")).toBe("bye\n")
      expect(exitOf(readerEvents)).toMatchObject({ exit_code: 5, reason: "exited" })
      // Its output is kept after it ended (no follow: what there is, then the exit).
      const kept = yield* (yield* events(`/v1/sandboxes/${s.id}/processes/${pid}/output`)).rest
      expect(outputOf(kept)).toBe("got one\ngot two\n")

      // KILL ends a process and what it started.
      const tree = yield* api("POST", `/v1/sandboxes/${s.id}/processes`, {
        body: { cmd: ["sh", "-c", "sleep 1000 & sleep 1001"] }
      })
      const killed = yield* api("POST", `/v1/sandboxes/${s.id}/processes/${tree.json.pid}/signal`, {
        body: { signal: "KILL" }
      })
      expect(killed.status).toBe(202)
      const treeExit = exitOf(
        yield* (yield* events(`/v1/sandboxes/${s.id}/processes/${tree.json.pid}/output?follow=true`)).rest
      )
      expect(treeExit).toMatchObject({ exit_code: 137, reason: "killed" })
      expect((yield* exec(s.id, "ps -o args | grep -c '[s]leep 100'")).stdout.trim()).toBe("0")

      const list = yield* api("GET", `/v1/sandboxes/${s.id}/processes`)
      expect(list.status).toBe(200)
      expect(list.json.processes.map((p: { pid: number }) => p.pid)).toEqual([tree.json.pid, pid, server.pid])

      // Refusals.
      expectError(yield* api("GET", `/v1/sandboxes/${s.id}/processes/999999`), 404, "not_found")
      expectError(yield* api("GET", `/v1/sandboxes/${s.id}/processes/abc`), 404, "not_found")
      expectError(
        yield* api("GET", `/v1/sandboxes/${s.id}/processes/${pid}/output?follow=maybe`),
        400,
        "invalid_request"
      )
      expectError(
        yield* api("POST", `/v1/sandboxes/${s.id}/processes/${pid}/signal`, { body: { signal: "STOP" } }),
        400,
        "invalid_request"
      )
      expectError(
        yield* api("POST", `/v1/sandboxes/${s.id}/processes/${pid}/signal`, { body: { signal: "TERM" } }),
        409,
        "conflict"
      )
      expectError(
        yield* api("POST", `/v1/sandboxes/${s.id}/processes/${pid}/stdin`, { raw: "late\n" }),
        409,
        "conflict"
      )
      expectError(yield* api("POST", `/v1/sandboxes/${s.id}/processes`, { body: { cmd: [] } }), 400, "invalid_request")
      expectError(
        yield* api("POST", `/v1/sandboxes/${s.id}/processes`, { body: { cmd: ["true"], cwd: "/no/such/dir" } }),
        400,
        "invalid_request"
      )
      // Without stdin: true there is nothing to write to.
      const noStdin = yield* api("POST", `/v1/sandboxes/${s.id}/processes`, { body: { cmd: ["sleep", "1000"] } })
      expectError(
        yield* api("POST", `/v1/sandboxes/${s.id}/processes/${noStdin.json.pid}/stdin`, { raw: "x" }),
        409,
        "conflict"
      )
      expectError(
        yield* api("POST", `/v1/sandboxes/${s.id}/processes/${noStdin.json.pid}/stdin`, {
          raw: new Uint8Array(1024 * 1024 + 1)
        }),
        413,
        "payload_too_large"
      )

      // Another org: 404; a read-only key: 403 on writes, reads allowed; a key of another sandbox: 403.
      const env = yield* Effect.service(Env)
      expectError(
        yield* api("GET", `/v1/sandboxes/${s.id}/processes`, { token: env.other.token }),
        404,
        "not_found"
      )
      const identity = yield* Identity
      const reading = yield* identity.key(env.org.id, ["sandboxes:read"])
      expect((yield* api("GET", `/v1/sandboxes/${s.id}/processes`, { token: reading })).status).toBe(200)
      expectError(
        yield* api("POST", `/v1/sandboxes/${s.id}/processes`, { body: { cmd: ["true"] }, token: reading }),
        403,
        "insufficient_scope"
      )
      const elsewhere = yield* create({ region: "local" })
      const confined = yield* identity.key(env.org.id, [`sandbox:${elsewhere.id}`])
      expectError(
        yield* api("GET", `/v1/sandboxes/${s.id}/processes/${pid}`, { token: confined }),
        403,
        "sandbox_out_of_scope"
      )

      // The sandbox stops under a running process: it ends and says so; a follower sees the end.
      const watcher = yield* events(`/v1/sandboxes/${s.id}/processes/${noStdin.json.pid}/output?follow=true`)
      const watching = yield* Effect.forkScoped(watcher.rest)
      expect((yield* api("POST", `/v1/sandboxes/${s.id}/stop`)).status).toBe(202)
      yield* waitState(s.id, "stopped")
      expect(exitOf(yield* Fiber.join(watching))).toMatchObject({ reason: "sandbox_stopped" })
      const stopped = yield* api("GET", `/v1/sandboxes/${s.id}/processes/${noStdin.json.pid}`)
      expect(stopped.json).toMatchObject({ state: "exited", reason: "sandbox_stopped" })
      // Listed still; nothing new starts on a stopped sandbox.
      expect((yield* api("GET", `/v1/sandboxes/${s.id}/processes`)).json.processes.length).toBe(4)
      expectError(yield* api("POST", `/v1/sandboxes/${s.id}/processes`, { body: { cmd: ["true"] } }), 409, "conflict")
      expectError(
        yield* api("POST", `/v1/sandboxes/${s.id}/exec`, {
          body: { cmd: ["true"] },
          headers: { accept: "text/event-stream" }
        }),
        409,
        "conflict"
      )
    }).pipe(Effect.scoped))
})
