/**
 * Templates through the API with a real agent: a template built from steps (file, env, run) and
 * used by a sandbox (start_cmd running, ready_cmd deciding runtime_ready), the layer cache (one
 * step changed: only it runs again), a failing step (failed, log kept, event with its fields),
 * delete refused while in use, a snapshot used by a new sandbox, scopes and bad input.
 */
import { expect, layer } from "@effect/vitest"
import { Duration, Effect } from "effect"
import { EventLog, eventually } from "../../testing/Sandboxes.ts"
import { api, create, Env, EnvLayer, expectError, waitState } from "../../testing/SandboxesEnv.ts"

const build = (body: Record<string, unknown>) =>
  Effect.gen(function*() {
    const res = yield* api("POST", "/v1/templates", { body })
    expect(res.status, res.text).toBe(202)
    expect(res.json).toMatchObject({ name: body["name"], state: "building", image: null })
    return res.json as { id: string }
  })

const settled = (id: string) =>
  Effect.map(
    eventually(api("GET", `/v1/templates/${id}`), (r) => r.json?.state !== "building", Duration.seconds(120)),
    (r) => r.json as Record<string, any>
  )

const logOf = (id: string) => Effect.map(api("GET", `/v1/templates/${id}/logs`), (r) => r.text)

const sh = (id: string, script: string) =>
  Effect.map(api("POST", `/v1/sandboxes/${id}/exec`, { body: { cmd: ["sh", "-c", script] } }), (r) => {
    expect(r.status, r.text).toBe(200)
    return r.json as { exit_code: number; stdout: string }
  })

const templateEvents = (id: string) =>
  Effect.flatMap(Effect.service(EventLog), (log) =>
    eventually(
      Effect.map(
        log.all,
        (all) => all.filter((e) => e.event === "template.state_updated" && e.data?.template_id === id)
      ),
      (events) => events.length > 0
    ))

layer(EnvLayer, { excludeTestServices: true, timeout: 300_000 })("templates API", (it) => {
  it.effect("a template from steps: files, env, start_cmd running, ready_cmd deciding runtime_ready; the layer cache", () =>
    Effect.gen(function*() {
      const steps = [
        { file: { path: "/srv/app/config.txt", content: "port=8080\n", mode: 0o600 } },
        { env: { GREETING: "hello" } },
        { run: "echo \"$GREETING from the build\" > /srv/app/built.txt" }
      ]
      const made = yield* build({
        name: "app",
        steps,
        start_cmd: "while true; do date > /tmp/alive; sleep 1; done",
        ready_cmd: "test -f /tmp/alive"
      })
      const ready = yield* settled(made.id)
      expect(ready, JSON.stringify(ready)).toMatchObject({ state: "ready", base: "base", errorMessage: null })
      expect(ready.image).toMatch(/^sha256:[0-9a-f]{64}$/)
      const events = yield* templateEvents(made.id)
      expect(events[0]!.data).toEqual({ template_id: made.id, state: "ready", image: ready.image })
      expect(yield* logOf(made.id)).toMatch(/step 3\/3 run: echo/)

      const sandbox = yield* create({ template: "app" })
      const running = yield* waitState(sandbox.id, "running")
      expect(running.templateId).toBe(made.id)
      const ok = yield* eventually(
        api("GET", `/v1/sandboxes/${sandbox.id}`),
        (r) => r.json?.runtime_ready === true,
        Duration.seconds(40)
      )
      expect(ok.json.runtime_reason).toBe(null)
      const seen = yield* sh(
        sandbox.id,
        "cat /srv/app/built.txt; stat -c %a /srv/app/config.txt; echo $GREETING; test -f /tmp/alive && echo alive"
      )
      expect(seen.stdout).toBe("hello from the build\n600\nhello\nalive\n")

      // Delete is refused while a sandbox uses it.
      expectError(yield* api("DELETE", `/v1/templates/${made.id}`), 409, "conflict")

      // One step changed: the first steps come from the layer cache, only the last runs.
      const changed = yield* build({
        name: "app2",
        steps: [...steps.slice(0, 2), { run: "echo changed > /srv/app/built.txt" }]
      })
      expect((yield* settled(changed.id)).state).toBe("ready")
      const log = yield* logOf(changed.id)
      expect(log).toMatch(/step 1\/3 cached/)
      expect(log).toMatch(/step 3\/3 run: echo changed/)

      // A template whose ready_cmd never passes: running, not runtime-ready, with the reason.
      const never = yield* build({ name: "never", ready_cmd: "echo not yet >&2; exit 3" })
      expect((yield* settled(never.id)).state).toBe("ready")
      const notReady = yield* create({ template: never.id })
      const runningNot = yield* waitState(notReady.id, "running", Duration.seconds(60))
      expect(runningNot.runtime_ready).toBe(false)
      expect(runningNot.runtime_reason).toBe("ready_cmd has not passed yet")
      // The agent tries for 30 s, then says why it is not ready.
      const reason = yield* eventually(
        api("GET", `/v1/sandboxes/${notReady.id}`),
        (r) => r.json?.runtime_reason !== "ready_cmd has not passed yet",
        Duration.seconds(60)
      )
      expect(reason.json).toMatchObject({
        runtime_ready: false,
        runtime_reason: "ready_cmd exited with code 3: not yet"
      })

      yield* api("DELETE", `/v1/sandboxes/${sandbox.id}`)
      yield* waitState(sandbox.id, "deleted")
      const deleted = yield* api("DELETE", `/v1/templates/${made.id}`)
      expect(deleted.status).toBe(200)
      expectError(yield* api("GET", `/v1/templates/${made.id}`), 404, "not_found")
    }))

  it.effect("a failing step: failed with its reason, the log kept, the event sent", () =>
    Effect.gen(function*() {
      const made = yield* build({ name: "broken", steps: [{ run: "echo about to fail; exit 7" }] })
      const failed = yield* settled(made.id)
      expect(failed).toMatchObject({ state: "failed", image: null, errorMessage: "step 1/1 (run) exited with code 7" })
      expect(yield* logOf(made.id)).toMatch(/about to fail/)
      const events = yield* templateEvents(made.id)
      expect(events[0]!.data).toEqual({ template_id: made.id, state: "failed", image: null })
      // A failed template is no base and no sandbox's template.
      expectError(yield* api("POST", "/v1/sandboxes", { body: { template: "broken" } }), 400, "invalid_request")
      expectError(
        yield* api("POST", "/v1/templates", { body: { name: "on-broken", base: "broken" } }),
        400,
        "invalid_request"
      )
    }))

  it.effect("a snapshot: a running sandbox's files become a template a new sandbox starts from", () =>
    Effect.gen(function*() {
      const source = yield* create({})
      yield* waitState(source.id, "running")
      yield* sh(source.id, "mkdir -p /data && echo kept > /data/note && rm /etc/os-release")
      const res = yield* api("POST", `/v1/sandboxes/${source.id}/snapshot`, { body: { name: "snap" } })
      expect(res.status, res.text).toBe(202)
      expect(res.json.state).toBe("building")
      const snap = yield* settled(res.json.id)
      expect(snap.state, JSON.stringify(snap)).toBe("ready")
      const copy = yield* create({ template: "snap" })
      yield* waitState(copy.id, "running")
      const seen = yield* sh(copy.id, "cat /data/note; test -e /etc/os-release && echo there || echo gone")
      expect(seen.stdout).toBe("kept\ngone\n")
    }))

  it.effect("refusals: bad bodies, a name taken, an unknown base, another org's template", () =>
    Effect.gen(function*() {
      expectError(yield* api("POST", "/v1/templates", { body: { name: "" } }), 400, "invalid_request")
      expectError(
        yield* api("POST", "/v1/templates", { body: { name: "x", steps: [{ run: 3 }] } }),
        400,
        "invalid_request"
      )
      expectError(
        yield* api("POST", "/v1/templates", {
          body: { name: "x", steps: [{ file: { path: "relative", content: "" } }] }
        }),
        400,
        "invalid_request"
      )
      expectError(yield* api("POST", "/v1/templates", { body: { name: "x", base: "nope" } }), 400, "invalid_request")
      const first = yield* build({ name: "taken" })
      expectError(yield* api("POST", "/v1/templates", { body: { name: "taken" } }), 409, "conflict")
      const { other } = yield* Env
      expectError(yield* api("GET", `/v1/templates/${first.id}`, { token: other.token }), 404, "not_found")
      expectError(yield* api("GET", "/v1/templates/tpl_00000000000000000000000001"), 404, "not_found")
      expect((yield* settled(first.id)).state).toBe("ready")
    }))
})
