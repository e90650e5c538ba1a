/**
 * Code contexts through the API, a real agent and real sandboxes (docs/contract.md#code-contexts):
 * a python interpreter in a `debian` sandbox whose state persists across runs, its output, errors,
 * interrupt, a dead interpreter, scopes; and the refusal in a busybox sandbox without python3.
 * The debian root comes from the run's image cache (`@svc/testing/ImageCache`): extracted here,
 * built only on a machine that never built it (about a minute).
 */
import { expect, layer } from "@effect/vitest"
import { contextCalls, plain, provideContextsEnv, runPythonSdk, serveWithAgent } from "@svc/api/testing/Contexts"
import { call, EventLog, eventually, Identity } from "@svc/api/testing/Sandboxes"
import type { OrgId } from "@svc/domain/Ids"
import { Context, Effect, Fiber, Layer } from "effect"
import { Svc, SvcError } from "../../../../packages/sdk/src/Svc.ts"
import { openEvents } from "../processes/EventStream.support.ts"

class Env extends Context.Service<Env, {
  readonly base: string
  readonly org: { readonly id: OrgId; readonly token: string }
  readonly other: { readonly id: OrgId; readonly token: string }
  readonly readOnly: string
}>()("test/Contexts/Env") {}

const EnvLayer = provideContextsEnv(
  Layer.effect(
    Env,
    Effect.gen(function*() {
      const base = yield* serveWithAgent
      const identity = yield* Identity
      const org = yield* identity.org("contexts-a")
      return {
        base,
        org,
        other: yield* identity.org("contexts-b"),
        readOnly: yield* identity.key(org.id, ["sandboxes:read"])
      }
    })
  ).pipe(Layer.provideMerge(EventLog.layer))
)

const api = (method: string, path: string, body?: unknown, token?: string) =>
  Effect.flatMap(
    Effect.service(Env),
    (env) => call(env.base, method, path, { token: token ?? env.org.token, ...(body !== undefined ? { body } : {}) })
  )

const calls = contextCalls((method, path, body) => api(method, path, body))
const running = (template: string, ram_mb = 256) => calls.running(template, ram_mb)
const run = calls.run

/** The sandbox's pids whose command line matches `pattern` (debian has no `ps`: read from /proc). */
const pidsOf = (pattern: string) =>
  `for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null | grep -q "${pattern}" && echo \${p#/proc/}; done; true`

layer(EnvLayer, { excludeTestServices: true, timeout: 600_000 })("code contexts", (it) => {
  it.effect(
    "python: state and imports persist, output, errors with tracebacks, rich values, interrupt, timeout, streamed",
    () =>
      Effect.gen(function*() {
        const env = yield* Effect.service(Env)
        const id = yield* running("debian")
        const made = yield* api("POST", `/v1/sandboxes/${id}/contexts`, { language: "python", cwd: "/tmp" })
        expect(made.status, made.text).toBe(201)
        expect(made.json).toMatchObject({ language: "python", cwd: "/tmp", state: "idle" })
        expect(made.json.id).toMatch(/^ctx_/)
        expect(typeof made.json.createdAt).toBe("string")
        const ctx = made.json.id as string

        const first = yield* run(id, ctx, "x = 1")
        expect(first).toMatchObject({ execution_count: 1, results: [], stdout: "", error: null, truncated: false })
        const second = yield* run(id, ctx, "x + 1")
        expect(second.execution_count).toBe(2)
        expect(plain(second)).toEqual(["2"])
        // An import persists; print goes to stdout; the last value is shown as the REPL would (repr).
        yield* run(id, ctx, "import os, sys")
        const printed = yield* run(id, ctx, "print('hello', x)\nprint('warn', file=sys.stderr)\nos.getcwd()")
        expect(printed.stdout).toBe("hello 1\n")
        expect(printed.stderr).toBe("warn\n")
        expect(plain(printed)).toEqual(["'/tmp'"])

        // An exception is a 200 with the error and a traceback pointing at the cell's line.
        const failed = yield* run(id, ctx, "y = 2\n1 / 0")
        expect(failed.error).toMatchObject({ name: "ZeroDivisionError", value: "division by zero" })
        expect(failed.error!.traceback.join("\n")).toContain("line 2")
        expect(failed.error!.traceback.join("\n")).toContain("1 / 0")
        expect(plain(yield* run(id, ctx, "y"))).toEqual(["2"])

        // A value offering HTML shows it beside its text.
        const rich = yield* run(
          id,
          ctx,
          "class T:\n  def __repr__(self): return 'T()'\n  def _repr_html_(self): return '<b>t</b>'\nT()"
        )
        expect(rich.results).toEqual([{ type: "text/plain", data: "T()" }, { type: "text/html", data: "<b>t</b>" }])

        // The run's own time limit ends it with an error; the context lives on.
        const slow = yield* run(id, ctx, "import time\ntime.sleep(30)", { timeout_ms: 300 })
        expect(slow.error?.name).toBe("TimeoutError")
        expect(plain(yield* run(id, ctx, "x"))).toEqual(["1"])

        // Interrupt: a run in progress ends with KeyboardInterrupt, the state survives.
        const busy = yield* Effect.forkChild(run(id, ctx, "while True:\n  pass"))
        yield* eventually(api("GET", `/v1/sandboxes/${id}/contexts/${ctx}`), (r) => r.json?.state === "running")
        const stopped = yield* api("POST", `/v1/sandboxes/${id}/contexts/${ctx}/interrupt`)
        expect(stopped.status, stopped.text).toBe(202)
        const interrupted = yield* Fiber.join(busy)
        expect(interrupted.error?.name).toBe("KeyboardInterrupt")
        expect(plain(yield* run(id, ctx, "x + 41"))).toEqual(["42"])

        // Streamed: the first output arrives while the run still goes, then the result, the end.
        const stream = yield* openEvents(env.base, env.org.token, "POST", `/v1/sandboxes/${id}/contexts/${ctx}/run`, {
          code:
            "print('ready', flush=True)\nwhile not os.path.exists('/tmp/go'):\n  time.sleep(0.05)\nprint('done')\nx * 7"
        })
        expect(stream.status).toBe(200)
        expect(stream.headers["content-type"]).toContain("text/event-stream")
        const opening = yield* stream.next
        expect(opening).toEqual({ event: "stdout", data: JSON.stringify({ text: "ready" }) })
        const go = yield* api("POST", `/v1/sandboxes/${id}/exec`, { cmd: ["touch", "/tmp/go"] })
        expect(go.status).toBe(200)
        const rest = yield* stream.rest
        const text = [opening!, ...rest].filter((e) => e.event === "stdout").map((e) => JSON.parse(e.data).text).join(
          ""
        )
        expect(text).toBe("ready\ndone\n")
        expect(rest.filter((e) => e.event === "result").map((e) => JSON.parse(e.data))).toEqual([
          { type: "text/plain", data: "7" }
        ])
        expect(rest.at(-1)?.event).toBe("end")
        expect(JSON.parse(rest.at(-1)!.data)).toMatchObject({ truncated: false })
        const raised = yield* openEvents(env.base, env.org.token, "POST", `/v1/sandboxes/${id}/contexts/${ctx}/run`, {
          code: "undefined_name"
        })
        const raisedEvents = yield* raised.rest
        expect(raisedEvents.map((e) => e.event)).toEqual(["error", "end"])
        expect(JSON.parse(raisedEvents[0]!.data)).toMatchObject({ name: "NameError" })

        // 100 MiB printed: the run keeps its share, says it cut, the context lives on.
        const loud = yield* run(id, ctx, "for _ in range(100):\n  sys.stdout.write('x' * 1048576)\nlen('done')")
        expect(loud.truncated).toBe(true)
        expect(loud.stdout.length).toBe(256 * 1024)
        expect(plain(loud)).toEqual(["4"])
        expect(plain(yield* run(id, ctx, "x"))).toEqual(["1"])

        // Matplotlib is not in the debian root: its import fails as any missing module does.
        const noPlot = yield* run(id, ctx, "import matplotlib")
        expect(noPlot.error?.name).toBe("ModuleNotFoundError")

        const list = yield* api("GET", `/v1/sandboxes/${id}/contexts`)
        expect(list.status).toBe(200)
        expect(list.json.contexts).toEqual([expect.objectContaining({ id: ctx, state: "idle" })])

        const bad = yield* api("POST", `/v1/sandboxes/${id}/contexts`, { language: "cobol" })
        expect(bad.status).toBe(400)
        expect(bad.json.code).toBe("invalid_request")
        const gone = yield* api("DELETE", `/v1/sandboxes/${id}/contexts/${ctx}`)
        expect(gone.status).toBe(204)
        expect((yield* api("GET", `/v1/sandboxes/${id}/contexts/${ctx}`)).status).toBe(404)
        // Its interpreter ended with it.
        const left = yield* api("POST", `/v1/sandboxes/${id}/exec`, {
          cmd: ["sh", "-c", pidsOf(`[k]ernel.py serve .*${ctx}`)]
        })
        expect(left.json.stdout, left.text).toBe("")
        yield* api("DELETE", `/v1/sandboxes/${id}`)
      }).pipe(Effect.scoped),
    720_000
  ) // it may build the debian root first (see `running`)

  it.effect("a dead interpreter: exit() makes the context dead and its runs 409; scopes; another org; 16 at most", () =>
    Effect.gen(function*() {
      const env = yield* Effect.service(Env)
      const id = yield* running("debian", 1024)
      const made = yield* api("POST", `/v1/sandboxes/${id}/contexts`, { language: "python" })
      expect(made.status, made.text).toBe(201)
      const ctx = made.json.id as string

      // A read-only key sees the context but cannot run code or make or delete one.
      const seen = yield* api("GET", `/v1/sandboxes/${id}/contexts/${ctx}`, undefined, env.readOnly)
      expect(seen.status).toBe(200)
      const refused = yield* api("POST", `/v1/sandboxes/${id}/contexts/${ctx}/run`, { code: "1" }, env.readOnly)
      expect(refused.status).toBe(403)
      expect(
        (yield* api("POST", `/v1/sandboxes/${id}/contexts`, { language: "python" }, env.readOnly)).status
      ).toBe(403)
      expect((yield* api("DELETE", `/v1/sandboxes/${id}/contexts/${ctx}`, undefined, env.readOnly)).status).toBe(403)
      // Another org's key does not find the sandbox.
      const foreign = yield* api("POST", `/v1/sandboxes/${id}/contexts/${ctx}/run`, { code: "1" }, env.other.token)
      expect(foreign.status).toBe(404)

      // Code over 1 MiB is refused whole; the context is untouched.
      const huge = yield* api("POST", `/v1/sandboxes/${id}/contexts/${ctx}/run`, { code: "#".repeat(1024 * 1024 + 1) })
      expect(huge.status, huge.text).toBe(413)

      yield* run(id, ctx, "x = 1")
      expect((yield* run(id, ctx, "x")).execution_count).toBe(2)
      yield* run(id, ctx, "exit()")
      const dead = yield* api("GET", `/v1/sandboxes/${id}/contexts/${ctx}`)
      expect(dead.json.state).toBe("dead")
      const after = yield* api("POST", `/v1/sandboxes/${id}/contexts/${ctx}/run`, { code: "x" })
      expect(after.status, after.text).toBe(409)
      expect(after.json.code).toBe("conflict")

      // Killed from inside the sandbox: dead too.
      const other = (yield* api("POST", `/v1/sandboxes/${id}/contexts`, { language: "python" })).json.id as string
      yield* run(id, other, "1")
      const victim = yield* api("POST", `/v1/sandboxes/${id}/exec`, {
        cmd: ["sh", "-c", pidsOf(`[k]ernel.py serve .*${other}`)]
      })
      expect(victim.json.stdout, victim.text).toMatch(/^\d+\n$/)
      const killed = yield* api("POST", `/v1/sandboxes/${id}/exec`, {
        cmd: ["sh", "-c", `kill -9 ${victim.json.stdout.trim()}`]
      })
      expect(killed.json.exit_code, killed.text).toBe(0)
      const afterKill = yield* eventually(
        api("GET", `/v1/sandboxes/${id}/contexts/${other}`),
        (r) => r.json?.state === "dead"
      )
      expect(afterKill.json.state).toBe("dead")
      expect((yield* api("POST", `/v1/sandboxes/${id}/contexts/${other}/run`, { code: "1" })).status).toBe(409)

      // At most 16 contexts in a sandbox, dead ones counted until deleted: the 17th is refused.
      for (let i = 2; i < 16; i++) {
        const more = yield* api("POST", `/v1/sandboxes/${id}/contexts`, { language: "python" })
        expect(more.status, more.text).toBe(201)
      }
      const past = yield* api("POST", `/v1/sandboxes/${id}/contexts`, { language: "python" })
      expect(past.status, past.text).toBe(409)
      expect(past.json.error).toContain("16")
      expect((yield* api("DELETE", `/v1/sandboxes/${id}/contexts/${other}`)).status).toBe(204)
      expect((yield* api("POST", `/v1/sandboxes/${id}/contexts`, { language: "python" })).status).toBe(201)
      yield* api("DELETE", `/v1/sandboxes/${id}`)
    }))

  it.effect("python missing from the image (busybox base): create is 409 naming python3", () =>
    Effect.gen(function*() {
      const id = yield* running("base")
      const made = yield* api("POST", `/v1/sandboxes/${id}/contexts`, { language: "python" })
      expect(made.status, made.text).toBe(409)
      expect(made.json.code).toBe("conflict")
      expect(made.json.error).toContain("python3")
      expect((yield* api("GET", `/v1/sandboxes/${id}/contexts`)).json.contexts).toEqual([])
      yield* api("DELETE", `/v1/sandboxes/${id}`)
    }))

  it.effect("the SDK: sandbox.contexts.create(), context.run(code), a dead context's run throws conflict", () =>
    Effect.gen(function*() {
      const env = yield* Effect.service(Env)
      const id = yield* running("debian")
      const svc = new Svc({ baseUrl: env.base, apiKey: env.org.token })
      const outcome = yield* Effect.promise(async () => {
        const sandbox = await svc.sandboxes.get(id)
        const context = await sandbox.contexts.create({ language: "python" })
        await context.run("import json\nrows = [1, 2, 3]")
        const sum = await context.run("print(json.dumps(rows))\nsum(rows)")
        const listed = await sandbox.contexts.list()
        await context.run("raise SystemExit(3)")
        await context.refresh()
        const refused = await context.run("1").then(() => null, (e: unknown) => e)
        await context.delete()
        return { context, sum, listed, refused }
      })
      expect(outcome.sum.stdout).toBe("[1, 2, 3]\n")
      expect(outcome.sum.results).toEqual([{ type: "text/plain", data: "6" }])
      expect(outcome.listed.map((c) => c.id)).toEqual([outcome.context.id])
      expect(outcome.context.state).toBe("dead")
      expect(outcome.refused).toBeInstanceOf(SvcError)
      expect((outcome.refused as SvcError).code).toBe("conflict")
      yield* api("DELETE", `/v1/sandboxes/${id}`)
    }))

  it.effect("the Python SDK: sbx.run_code keeps state between calls, sbx.contexts lists the context", () =>
    Effect.gen(function*() {
      const env = yield* Effect.service(Env)
      const id = yield* running("debian")
      const script = [
        "import json, sys",
        "from svc import Svc",
        "sbx = Svc().sandboxes.get(sys.argv[1])",
        "sbx.run_code('import math\\nr = 3')",
        "a = sbx.run_code('print(r); math.floor(math.pi * r)')",
        "b = sbx.run_code('undefined_name')",
        "ctxs = sbx.contexts.list()",
        "print(json.dumps({'a': a, 'b': b, 'n': len(ctxs), 'lang': ctxs[0].record['language']}))"
      ].join("\n")
      const out = yield* runPythonSdk({ base: env.base, token: env.org.token }, script, [id])
      const seen = JSON.parse(out)
      expect(seen.a.stdout).toBe("3\n")
      expect(seen.a.results).toEqual([{ type: "text/plain", data: "9" }])
      expect(seen.b.error.name).toBe("NameError")
      expect(seen.n).toBe(1)
      expect(seen.lang).toBe("python")
      yield* api("DELETE", `/v1/sandboxes/${id}`)
    }))
})
