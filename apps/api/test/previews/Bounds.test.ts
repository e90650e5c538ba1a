/**
 * Held preview requests are bounded per sandbox and end when idle (issue 25, item 11): the attack
 * that found it held 3,000 requests to a sandbox's port whose server never answers, each costing
 * the API ~4 descriptors with no timeout (12,069 descriptors). The API runs as a child process
 * (its descriptors read from /proc/<pid>/fd) with a small bound and a short idle timeout.
 */
import { expect, layer } from "@effect/vitest"
import { SecretBox } from "@svc/crypto/SecretBox"
import * as Runtime from "@svc/runtime/Runtime"
import * as TestDatabase from "@svc/testing/TestDatabase"
import * as TestNats from "@svc/testing/TestNats"
import { Context, Effect, Layer } from "effect"
import * as FsSync from "node:fs"
import * as Http from "node:http"
import { call, eventually, Identity } from "../../testing/Sandboxes.ts"
import { spawnPlatform } from "../support/Roles.ts"

const CAP = 20
const ATTEMPTS = 100

class Env extends Context.Service<Env, {
  readonly base: string
  readonly apiPid: number
  readonly servicePorts: ReadonlyArray<number>
  readonly token: string
}>()("PreviewBounds.test/Env") {}

const EnvLayer = Layer.effect(
  Env,
  Effect.gen(function*() {
    const { apiPid, base, servicePorts } = yield* spawnPlatform({
      api: {
        SVC_PREVIEW_CONNECTIONS_PER_SANDBOX: String(CAP),
        SVC_PREVIEW_IDLE_TIMEOUT: "2s",
        // The test's own requests, all under one key.
        SVC_RATE_LIMIT_PER_SECOND: "1000",
        SVC_RATE_LIMIT_BURST: "1000"
      }
    })
    const org = yield* (yield* Identity).org("previews")
    return { base, apiPid, servicePorts, token: org.token }
  })
).pipe(
  Layer.provideMerge(Layer.mergeAll(Runtime.make({ supervisor: { intervalMs: 200 } }), Identity.layer)),
  Layer.provideMerge(Layer.mergeAll(TestDatabase.layerWithUrl, TestNats.layer, SecretBox.layer))
)

/**
 * The process's open descriptors, less its pooled connections to NATS and Postgres (their pools
 * grow with load and keep what they opened; they are not what a preview holds).
 */
const fdsOf = (pid: number, pooled: ReadonlyArray<number>) => {
  const remotePort = new Map<string, number>()
  for (const table of ["tcp", "tcp6"]) {
    for (const line of FsSync.readFileSync(`/proc/${pid}/net/${table}`, "utf8").split("\n").slice(1)) {
      const fields = line.trim().split(/\s+/)
      if (fields.length > 9) remotePort.set(fields[9]!, parseInt(fields[2]!.split(":")[1]!, 16))
    }
  }
  let n = 0
  for (const fd of FsSync.readdirSync(`/proc/${pid}/fd`)) {
    let link = ""
    try {
      link = FsSync.readlinkSync(`/proc/${pid}/fd/${fd}`)
    } catch {
      continue
    }
    const inode = /^socket:\[(\d+)\]$/.exec(link)?.[1]
    if (inode !== undefined && pooled.includes(remotePort.get(inode) ?? -1)) continue
    n++
  }
  return n
}

type Ended =
  | { readonly _tag: "Answer"; readonly status: number; readonly retryAfter: string | undefined }
  | { readonly _tag: "Closed" }

/** A preview GET (the org's key lets it in); `ended` settles with its answer or the connection's end. */
const previewRequest = (base: string, host: string, token: string) => {
  let settled = false
  const ended = new Promise<Ended>((resolve) => {
    const url = new URL(base)
    const done = (value: Ended) => {
      settled = true
      resolve(value)
    }
    const req = Http.request({
      host: url.hostname,
      port: Number(url.port),
      path: "/",
      agent: false,
      headers: { host, authorization: `Bearer ${token}` }
    }, (res) => {
      res.resume()
      res.on(
        "end",
        () => done({ _tag: "Answer", status: res.statusCode ?? 0, retryAfter: res.headers["retry-after"] as string })
      )
      res.on("error", () => done({ _tag: "Closed" }))
    })
    req.on("error", () => done({ _tag: "Closed" }))
    req.end()
  })
  return { ended, settled: () => settled }
}

layer(EnvLayer, { excludeTestServices: true, timeout: 240_000 })("held preview requests", (it) => {
  it.effect(
    "past SVC_PREVIEW_CONNECTIONS_PER_SANDBOX a sandbox's preview requests are 429; held ones end after the idle timeout; the API's descriptors stay bounded and come back",
    () =>
      Effect.gen(function*() {
        const env = yield* Env
        const api = (method: string, path: string, body?: unknown) =>
          call(env.base, method, path, { token: env.token, ...(body !== undefined ? { body } : {}) })
        const created = yield* api("POST", "/v1/sandboxes", { ram_mb: 256, exposed_ports: [8080] })
        expect(created.status, created.text).toBe(201)
        const id = created.json.id as string
        yield* eventually(api("GET", `/v1/sandboxes/${id}`), (r) => r.json?.state === "running")
        // A server that takes every connection and never answers.
        const started = yield* api("POST", `/v1/sandboxes/${id}/exec`, {
          cmd: [
            "sh",
            "-c",
            "printf '#!/bin/sh\\nexec sleep 1000\\n' > /srv/hold.sh && chmod +x /srv/hold.sh && " +
            "setsid nc -ll -p 8080 -e /srv/hold.sh </dev/null >/dev/null 2>&1 &"
          ]
        })
        expect(started.status, started.text).toBe(200)
        yield* eventually(
          api("POST", `/v1/sandboxes/${id}/exec`, {
            cmd: ["sh", "-c", "cat /proc/net/tcp /proc/net/tcp6 | awk '$2 ~ /:1F90$/ && $4 == \"0A\"' | wc -l"]
          }),
          (r) => r.json?.stdout?.trim() === "1"
        )
        const host = `8080-${id}.preview.localhost`
        // A first request, answered once idle: the API's paths are warm before the idle reading.
        const warm = yield* Effect.promise(() => previewRequest(env.base, host, env.token).ended)
        expect(warm).toEqual({ _tag: "Answer", status: 502, retryAfter: undefined })
        const idle = fdsOf(env.apiPid, env.servicePorts)

        const requests = Array.from({ length: ATTEMPTS }, () => previewRequest(env.base, host, env.token))
        // Past the bound: answered at once with 429 and Retry-After.
        const refused = yield* Effect.promise(() =>
          new Promise<Array<Ended>>((resolve) => {
            const first: Array<Ended> = []
            for (const r of requests) {
              void r.ended.then((ended) => {
                first.push(ended)
                if (first.length === ATTEMPTS - CAP) resolve(first)
              })
            }
          })
        )
        for (const ended of refused) expect(ended).toEqual({ _tag: "Answer", status: 429, retryAfter: "1" })
        const held = requests.filter((r) => !r.settled())
        expect(held.length).toBe(CAP)
        // What the held ones cost the API: bounded by the cap (two descriptors each, a few spare),
        // where 100 held requests cost ~400 before.
        const holding = fdsOf(env.apiPid, env.servicePorts)
        console.log(`preview bounds: api fds idle ${idle}, ${CAP} held of ${ATTEMPTS} ${holding}`)
        expect(holding - idle).toBeLessThanOrEqual(4 * CAP)

        // Nothing moves on them: each ends after the idle timeout with 502, and the descriptors go.
        const ends = yield* Effect.promise(() => Promise.all(held.map((r) => r.ended)))
        for (const ended of ends) expect(ended).toEqual({ _tag: "Answer", status: 502, retryAfter: undefined })
        yield* eventually(Effect.sync(() => fdsOf(env.apiPid, env.servicePorts)), (n) => n <= idle + 2)
        // The sandbox's share is free again: a new request is let in (and ends idle, not 429).
        const again = yield* Effect.promise(() => previewRequest(env.base, host, env.token).ended)
        expect(again).toEqual({ _tag: "Answer", status: 502, retryAfter: undefined })
        yield* api("DELETE", `/v1/sandboxes/${id}`)
      }),
    200_000
  )
})
