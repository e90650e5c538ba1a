/**
 * A sandbox's metrics and log through the API, a real agent (sampling every 300 ms) and real
 * sandboxes (docs/contract.md#sandbox-logs-and-metrics): samples with sane values, CPU rising
 * under a busy loop, `since`; lifecycle lines, the start_cmd's output, following, the stop and an
 * OOM; the bound on a flooding start_cmd; deletion removing both; scope, org and policy refusals.
 */
import { expect, layer } from "@effect/vitest"
import { Nats } from "@svc/bus/Nats"
import { makeSandboxId } from "@svc/domain/Ids"
import { LOGS_STREAM, METRICS_STREAM } from "@svc/host-protocol/SandboxTelemetry"
import { Duration, Effect } from "effect"
import * as Net from "node:net"
import { Svc } from "../../../../packages/sdk/src/index.ts"
import { eventually, Identity } from "../../testing/Sandboxes.ts"
import { api, create, Env, expectError, makeEnvLayer, waitState } from "../../testing/SandboxesEnv.ts"
import { openEvents, type SseEvent } from "../processes/EventStream.support.ts"

const EnvLayer = makeEnvLayer({ metricsIntervalMs: 300 })

/**
 * A TCP proxy to the API's port on loopback: `cut` destroys the connections open now (what a
 * dropped network does to a long answer), new ones are still taken.
 */
const tcpProxy = (targetPort: string) =>
  Effect.acquireRelease(
    Effect.callback<{ port: number; cut: () => void; connections: () => number; server: Net.Server }>((resume) => {
      const open = new Set<Net.Socket>()
      let connections = 0
      const server = Net.createServer((client) => {
        connections++
        const upstream = Net.connect(Number(targetPort), "127.0.0.1")
        for (const socket of [client, upstream]) {
          open.add(socket)
          socket.on("close", () => open.delete(socket))
          socket.on("error", () => undefined)
        }
        client.pipe(upstream).pipe(client)
        client.on("close", () => upstream.destroy())
        upstream.on("close", () => client.destroy())
      })
      server.listen(0, "127.0.0.1", () =>
        resume(Effect.succeed({
          port: (server.address() as Net.AddressInfo).port,
          cut: () => {
            for (const socket of open) socket.destroy()
          },
          connections: () => connections,
          server
        })))
    }),
    ({ cut, server }) =>
      Effect.callback<void>((resume) => {
        cut()
        server.close(() => resume(Effect.void))
      })
  )

interface Sample {
  ts: string
  cpu_pct: number
  mem_bytes: number
  mem_limit_bytes: number
  disk_bytes: number
  disk_limit_bytes: number
  pids: number
  net_rx_bytes: number
  net_tx_bytes: number
}

const metrics = (id: string, query = "", token?: string) =>
  api("GET", `/v1/sandboxes/${id}/metrics${query}`, token !== undefined ? { token } : {})

const logs = (id: string, query = "", token?: string) =>
  api("GET", `/v1/sandboxes/${id}/logs${query}`, token !== undefined ? { token } : {})

const samplesOf = (id: string, query = "") =>
  Effect.map(metrics(id, query), (r) => {
    expect(r.status, r.text).toBe(200)
    return r.json.samples as Array<Sample>
  })

const logText = (id: string, query = "") =>
  Effect.map(logs(id, query), (r) => {
    expect(r.status, r.text).toBe(200)
    expect(r.headers.get("content-type")).toContain("text/plain")
    return r.text
  })

const logUntil = (id: string, pattern: RegExp, timeout: Duration.Input = Duration.seconds(40)) =>
  Effect.map(eventually(logs(id), (r) => r.status === 200 && pattern.test(r.text), timeout), (r) => {
    expect(r.text).toMatch(pattern)
    return r.text
  })

const exec = (id: string, script: string) =>
  Effect.map(api("POST", `/v1/sandboxes/${id}/exec`, { body: { cmd: ["sh", "-c", script] } }), (res) => {
    expect(res.status, res.text).toBe(200)
    return res.json as { exit_code: number; stdout: string }
  })

const template = (name: string, startCmd: string) =>
  Effect.gen(function*() {
    const res = yield* api("POST", "/v1/templates", { body: { name, steps: [{ run: "true" }], start_cmd: startCmd } })
    expect(res.status, res.text).toBe(202)
    const built = yield* eventually(
      api("GET", `/v1/templates/${res.json.id}`),
      (r) => r.json?.state !== "building",
      Duration.seconds(120)
    )
    expect(built.json.state, built.text).toBe("ready")
  })

/** Messages the streams hold for a sandbox. */
const stored = (id: string) =>
  Effect.gen(function*() {
    const nats = yield* Nats
    const count = async (stream: string, filter: string) => {
      const info = await nats.jsm.streams.info(nats.name(stream), { subjects_filter: nats.subject(filter) })
      return Object.values(info.state.subjects ?? {}).reduce((a, b) => a + b, 0)
    }
    return yield* Effect.promise(async () =>
      (await count(METRICS_STREAM, `sbxmet.${id}.>`)) + (await count(LOGS_STREAM, `sbxlog.${id}.>`))
    )
  })

layer(EnvLayer, { excludeTestServices: true, timeout: 300_000 })("sandbox logs and metrics", (it) => {
  it.effect("samples of a running sandbox: sane values, cpu_pct rising under a busy loop, since", () =>
    Effect.gen(function*() {
      const s = yield* create({ region: "local", ram_mb: 256, disk_gb: 1 })
      yield* waitState(s.id, "running")
      const first = yield* eventually(samplesOf(s.id), (samples) => samples.length >= 3)
      for (const sample of first) {
        expect(Object.keys(sample).sort()).toEqual([
          "cpu_pct",
          "disk_bytes",
          "disk_limit_bytes",
          "mem_bytes",
          "mem_limit_bytes",
          "net_rx_bytes",
          "net_tx_bytes",
          "pids",
          "ts"
        ])
        expect(sample.mem_bytes).toBeGreaterThan(0)
        expect(sample.mem_limit_bytes).toBe(256 * 1024 * 1024)
        expect(sample.disk_limit_bytes).toBe(1024 ** 3)
        expect(sample.disk_bytes).toBeGreaterThan(0)
        expect(sample.pids).toBeGreaterThanOrEqual(1)
        expect(sample.cpu_pct).toBeGreaterThanOrEqual(0)
      }
      // Oldest first.
      const times = first.map((sample) => Date.parse(sample.ts))
      expect([...times].sort((a, b) => a - b)).toEqual(times)
      const idle = first.at(-1)!

      // A busy loop in the background: the samples after it show a core busy, and its process.
      const busy = yield* api("POST", `/v1/sandboxes/${s.id}/processes`, {
        body: { cmd: ["sh", "-c", "while :; do :; done"] }
      })
      expect(busy.status, busy.text).toBe(201)
      // A core of the machine's (shared with other tests) or less: well above the idle samples.
      const idleMax = Math.max(...first.map((sample) => sample.cpu_pct))
      const busyPct = Math.max(10, idleMax * 5)
      const loaded = yield* eventually(
        samplesOf(s.id, `?since=${encodeURIComponent(idle.ts)}`),
        (samples) => samples.filter((sample) => sample.cpu_pct > busyPct).length >= 2
      )
      const hot = loaded.find((sample) => sample.cpu_pct > busyPct)!
      expect(hot.pids).toBeGreaterThan(idle.pids)
      // `since` filters: only samples at or after it.
      expect(loaded.every((sample) => Date.parse(sample.ts) >= Date.parse(idle.ts))).toBe(true)
      expect(loaded.length).toBeLessThan((yield* samplesOf(s.id)).length)
      // A relative `since` and one in the future.
      expect((yield* samplesOf(s.id, "?since=1h")).length).toBeGreaterThan(0)
      expect(yield* samplesOf(s.id, `?since=${new Date(Date.now() + 3600_000).toISOString()}`)).toEqual([])
      expect(yield* samplesOf(s.id, "?since=2999-01-01T00:00:00Z")).toEqual([])
      yield* api("POST", `/v1/sandboxes/${s.id}/processes/${busy.json.pid}/signal`, {
        body: { signal: "KILL" }
      })
      expect((yield* api("DELETE", `/v1/sandboxes/${s.id}`)).status).toBe(202)
    }))

  it.effect("the log: lifecycle lines, the start_cmd's output, following, since, the stop; deletion removes it all", () =>
    Effect.gen(function*() {
      yield* template(
        "chatty",
        "echo hello-from-start; while :; do if [ -f /tmp/more ]; then echo more-output; rm /tmp/more; fi; sleep 0.1; done"
      )
      const s = yield* create({ template: "chatty" })
      yield* waitState(s.id, "running")
      const text = yield* logUntil(s.id, /start_cmd: hello-from-start/)
      expect(text).toMatch(/^\S+Z lifecycle: starting$/m)
      expect(text).toMatch(/^\S+Z lifecycle: created: host host_\S+, template \S+, 1 cpu, \d+ MiB, \d+ GiB/m)
      expect(text).toMatch(/^\S+Z lifecycle: started$/m)
      const lines = text.trimEnd().split("\n")
      expect(lines.findIndex((l) => l.endsWith("lifecycle: starting"))).toBeLessThan(
        lines.findIndex((l) => l.endsWith("start_cmd: hello-from-start"))
      )

      // Following: what is stored, then new lines as they come.
      const env = yield* Env
      const follow = yield* openEvents(env.base, env.org.token, "GET", `/v1/sandboxes/${s.id}/logs?follow=true`)
      expect(follow.status).toBe(200)
      expect(follow.headers["content-type"]).toContain("text/event-stream")
      const seen: Array<SseEvent> = []
      while (!seen.some((e) => e.data.endsWith("start_cmd: hello-from-start"))) seen.push((yield* follow.next)!)
      expect(seen.every((e) => e.event === "log")).toBe(true)
      yield* exec(s.id, "touch /tmp/more")
      while (!seen.some((e) => e.data.endsWith("start_cmd: more-output"))) seen.push((yield* follow.next)!)

      // The SDK: the log as text, its lines followed, the samples.
      const svc = new Svc({ baseUrl: env.base, apiKey: env.org.token })
      const sandbox = yield* Effect.promise(() => svc.sandboxes.get(s.id))
      expect(yield* Effect.promise(() => sandbox.logs())).toContain("start_cmd: more-output")
      const abort = new AbortController()
      const followed = yield* Effect.promise(async () => {
        const got: Array<string> = []
        for await (const line of sandbox.logs({ follow: true, signal: abort.signal })) {
          got.push(line)
          if (line.endsWith("start_cmd: more-output")) break
        }
        abort.abort()
        return got
      })
      expect(followed.some((line) => line.endsWith("lifecycle: started"))).toBe(true)
      const sdkSamples = yield* Effect.promise(() => sandbox.metrics({ since: "1h" }))
      expect(sdkSamples.length).toBeGreaterThan(0)
      expect(sdkSamples[0]!.mem_bytes).toBeGreaterThan(0)

      // since: only what came after.
      const started = lines.find((l) => l.endsWith("lifecycle: started"))!
      const after = yield* logText(s.id, `?since=${encodeURIComponent(new Date(Date.now() + 1000).toISOString())}`)
      expect(after).not.toContain(started)
      const recent = yield* logText(s.id, "?since=1d")
      expect(recent).toContain("start_cmd: hello-from-start")

      // A stop, with the reason when the control plane gives one.
      expect((yield* api("POST", `/v1/sandboxes/${s.id}/stop`)).status).toBe(202)
      yield* waitState(s.id, "stopped")
      yield* logUntil(s.id, /lifecycle: stopped( \(reason: user\))?$/m)

      // Deleted: its logs and metrics go.
      expect(yield* stored(s.id)).toBeGreaterThan(0)
      expect((yield* api("DELETE", `/v1/sandboxes/${s.id}`)).status).toBe(202)
      yield* eventually(stored(s.id), (n) => n === 0, Duration.seconds(30))
    }).pipe(Effect.scoped))

  it.effect("an init killed out of memory shows in the log", () =>
    Effect.gen(function*() {
      const s = yield* create({ region: "local", ram_mb: 64 })
      yield* waitState(s.id, "running")
      yield* api("POST", `/v1/sandboxes/${s.id}/exec`, {
        body: {
          cmd: [
            "sh",
            "-c",
            "echo 1000 > /proc/1/oom_score_adj && for i in 1 2 3 4 5 6 7 8; do dd if=/dev/zero bs=16M count=1 2>/dev/null | sleep 30 & done; wait"
          ]
        }
      })
      yield* waitState(s.id, "error", Duration.seconds(30))
      yield* logUntil(s.id, /host: out of memory: out of memory at ram_mb 64$/m)
      yield* logUntil(s.id, /lifecycle: error/)
      expect((yield* api("DELETE", `/v1/sandboxes/${s.id}`)).status).toBe(202)
    }))

  it.effect("a start_cmd printing a flood: at most the bound is kept, the rest counted as dropped", () =>
    Effect.gen(function*() {
      yield* template("flood", "yes flood-line | head -n 200000; echo flood-done; sleep 3600")
      const s = yield* create({ template: "flood" })
      yield* waitState(s.id, "running")
      const text = yield* logUntil(s.id, /host: dropped \d+ lines and \d+ more bytes of start_cmd output/)
      const kept = text.split("\n").filter((l) => l.endsWith("start_cmd: flood-line")).length
      // 100 lines per second: 30 per 300 ms round.
      expect(kept).toBeGreaterThan(0)
      expect(kept).toBeLessThanOrEqual(30 * 4)
      const dropped = [...text.matchAll(/dropped (\d+) lines and (\d+) more bytes/g)]
        .reduce((sum, m) => sum + Number(m[1]) + Number(m[2]) / "flood-line\n".length, 0)
      expect(dropped).toBeGreaterThan(100_000)
      // The whole output is still in the sandbox's own file.
      expect((yield* exec(s.id, "grep -c flood-line /var/log/svc-start.log")).stdout.trim()).toBe("200000")
      expect((yield* api("DELETE", `/v1/sandboxes/${s.id}`)).status).toBe(202)
    }))

  it.effect("following resumes after Last-Event-ID: no line twice, none missed (raw SSE and the SDK across a cut)", () =>
    Effect.gen(function*() {
      const env = yield* Env
      // A line every 100 ms, numbered: a gap or a repeat shows in the numbers.
      yield* template("ticker", "i=0; while :; do i=$((i+1)); echo tick-$i; sleep 0.1; done")
      const s = yield* create({ template: "ticker" })
      yield* waitState(s.id, "running")
      const tickOf = (line: string) => Number(/start_cmd: tick-(\d+)$/.exec(line)?.[1] ?? Number.NaN)
      const ticksUntil = (follow: { next: Effect.Effect<SseEvent | undefined> }, last: number) =>
        Effect.gen(function*() {
          const got: Array<SseEvent> = []
          while (!(got.length > 0 && tickOf(got.at(-1)!.data) >= last)) {
            const event = yield* follow.next
            if (event === undefined) throw new Error("the stream ended")
            got.push(event)
          }
          return got
        })

      // A first connection read up to tick-5, then closed while the ticks go on.
      const first = yield* Effect.scoped(Effect.gen(function*() {
        const follow = yield* openEvents(env.base, env.org.token, "GET", `/v1/sandboxes/${s.id}/logs?follow=true`)
        expect(follow.status).toBe(200)
        return yield* ticksUntil(follow, 5)
      }))
      expect(first.every((e) => /^\d+$/.test(e.id ?? ""))).toBe(true)
      const lastId = first.at(-1)!.id!
      // The start_cmd's output is read every 300 ms here: wait for more than one read.
      yield* Effect.sleep(Duration.millis(1500))
      const resumed = yield* Effect.scoped(Effect.gen(function*() {
        const follow = yield* openEvents(
          env.base,
          env.org.token,
          "GET",
          `/v1/sandboxes/${s.id}/logs?follow=true`,
          undefined,
          { "last-event-id": lastId }
        )
        expect(follow.status).toBe(200)
        return yield* ticksUntil(follow, tickOf(first.at(-1)!.data) + 20)
      }))
      // Right after the last line seen, ids growing, the numbers with no hole and no repeat.
      const ids = [...first, ...resumed].map((e) => Number(e.id))
      expect(ids.every((id, i) => i === 0 || id > ids[i - 1]!)).toBe(true)
      const ticks = [...first, ...resumed].map((e) => tickOf(e.data)).filter((n) => !Number.isNaN(n))
      expect(ticks).toEqual(Array.from({ length: ticks.length }, (_, i) => i + 1))
      // What both connections gave is the stored log, in order, up to there.
      const stored = (yield* logText(s.id)).trimEnd().split("\n")
      expect(stored.slice(0, ids.length)).toEqual([...first, ...resumed].map((e) => e.data))
      // Without follow, Last-Event-ID reads what came after too; a bad one is refused.
      const after = yield* api("GET", `/v1/sandboxes/${s.id}/logs`, { headers: { "last-event-id": lastId } })
      expect(after.status, after.text).toBe(200)
      expect(after.text.trimEnd().split("\n")[0]).toBe(resumed[0]!.data)
      for (const bad of ["abc", "-1", "1.5", "1".repeat(20)]) {
        expectError(
          yield* api("GET", `/v1/sandboxes/${s.id}/logs?follow=true`, { headers: { "last-event-id": bad } }),
          400,
          "invalid_request"
        )
      }

      // The SDK across a cut connection (a proxy of the test's, its sockets destroyed mid-stream):
      // it connects again with the last id, and the lines go on with no hole and no repeat.
      const proxy = yield* tcpProxy(new URL(env.base).port)
      const svc = new Svc({ baseUrl: `http://127.0.0.1:${proxy.port}`, apiKey: env.org.token })
      const sandbox = yield* Effect.promise(() => svc.sandboxes.get(s.id))
      const abort = new AbortController()
      const followed = yield* Effect.promise(async () => {
        const got: Array<number> = []
        let cut = false
        for await (const line of sandbox.logs({ follow: true, signal: abort.signal })) {
          const tick = tickOf(line)
          if (Number.isNaN(tick)) continue
          got.push(tick)
          if (!cut && got.length >= 10) {
            cut = true
            proxy.cut()
          }
          if (cut && got.length >= 40) break
        }
        abort.abort()
        return got
      })
      expect(proxy.connections()).toBeGreaterThanOrEqual(2)
      expect(followed).toEqual(Array.from({ length: followed.length }, (_, i) => i + 1))
      expect((yield* api("DELETE", `/v1/sandboxes/${s.id}`)).status).toBe(202)
    }))

  it.effect("refusals: another org's sandbox, a key without sandboxes:read, a sandbox:<id> key of another, bad input", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const identity = yield* Identity
      const s = yield* create({ region: "local" })
      yield* waitState(s.id, "running")
      yield* eventually(samplesOf(s.id), (samples) => samples.length > 0)
      for (const path of ["logs", "metrics"]) {
        expectError(yield* api("GET", `/v1/sandboxes/${s.id}/${path}`, { token: env.other.token }), 404, "not_found")
        expectError(yield* api("GET", `/v1/sandboxes/${makeSandboxId()}/${path}`), 404, "not_found")
        const templatesOnly = yield* identity.key(env.org.id, ["templates:read"])
        expectError(
          yield* api("GET", `/v1/sandboxes/${s.id}/${path}`, { token: templatesOnly }),
          403,
          "insufficient_scope"
        )
        const readOnly = yield* identity.key(env.org.id, ["sandboxes:read"])
        expect((yield* api("GET", `/v1/sandboxes/${s.id}/${path}`, { token: readOnly })).status).toBe(200)
        const own = yield* identity.key(env.org.id, [`sandbox:${s.id}`])
        expect((yield* api("GET", `/v1/sandboxes/${s.id}/${path}`, { token: own })).status).toBe(200)
        const other = yield* create({ region: "nowhere" })
        const confined = yield* identity.key(env.org.id, [`sandbox:${other.id}`])
        expectError(
          yield* api("GET", `/v1/sandboxes/${s.id}/${path}`, { token: confined }),
          403,
          "sandbox_out_of_scope"
        )
        for (const since of ["yesterday", "5x", "2026-13-45T00:00:00Z", "-1h"]) {
          expectError(
            yield* api("GET", `/v1/sandboxes/${s.id}/${path}?since=${encodeURIComponent(since)}`),
            400,
            "invalid_request"
          )
        }
        yield* api("DELETE", `/v1/sandboxes/${other.id}`)
      }
      expectError(yield* logs(s.id, "?follow=maybe"), 400, "invalid_request")
      expect((yield* api("DELETE", `/v1/sandboxes/${s.id}`)).status).toBe(202)
    }))
})
