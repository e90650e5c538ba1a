/**
 * Sandboxes as the benchmarks make them: timed from the answer to `POST /v1/sandboxes` to their
 * running event read back from the EVENTS stream, or polled until running for a bench that only
 * needs one; all deleted through the API when the run ends.
 */
import { Effect } from "effect"
import { Nats } from "../../packages/bus/src/Nats.ts"
import * as Events from "../../packages/events/src/Streams.ts"
import type { Call } from "./Api.ts"

/**
 * What the EVENTS stream says of sandboxes, as it arrives: when each first ran
 * (`performance.now()`), which were deleted, how the host made each (`restore`: a warm pool entry
 * adopted, `cold-boot`: a start); `running(id)` completes once it ran (or went to `error`).
 */
export const watchSandboxEvents = Effect.gen(function*() {
  const nats = yield* Nats
  const runningAt = new Map<string, number>()
  const deleted = new Set<string>()
  const viaOf = new Map<string, string>()
  const waiters = new Map<string, () => void>()
  const stream = yield* Events.ensure()
  const consumer = yield* Effect.promise(() => nats.js.consumers.get(stream))
  yield* Effect.acquireRelease(
    Effect.promise(() =>
      consumer.consume({
        callback: (msg) => {
          const e = JSON.parse(new TextDecoder().decode(msg.data))
          const id = e.data?.sandbox_id as string
          if (e.event === "sandbox.state_updated" && e.data.state === "running" && !runningAt.has(id)) {
            runningAt.set(id, performance.now())
            waiters.get(id)?.()
          }
          if (e.event === "sandbox.state_updated" && e.data.state === "error") waiters.get(id)?.()
          if (e.event === "sandbox.deleted") deleted.add(id)
          if (e.event === "sandbox.created") viaOf.set(id, e.data.via as string)
        }
      })
    ),
    (m) => Effect.promise(() => m.close().catch(() => undefined))
  )
  const running = (id: string) =>
    Effect.callback<void>((resume) => {
      if (runningAt.has(id)) return resume(Effect.void)
      waiters.set(id, () => resume(Effect.void))
    })
  return { runningAt, deleted, viaOf, running }
})

export type SandboxEvents = Effect.Success<typeof watchSandboxEvents>

/**
 * `createRunning(body)`: POST /v1/sandboxes (`{region: "local", ram_mb: 64}` and `body`) → its
 * running event, in ms from the answer. `onPosted` hears of each sandbox as it is answered, with
 * when its POST was sent (`performance.now()`). Every sandbox made is deleted at the end of the
 * scope (each DELETE tried up to 5 times), waiting up to two minutes for their deleted events.
 */
export const sandboxMaker = (options: {
  readonly base: string
  readonly key: string
  readonly events: SandboxEvents
  readonly onPosted?: (id: string, sent: number) => void
}) =>
  Effect.gen(function*() {
    const { base, events, key } = options
    const post = (body: object) =>
      Effect.promise(async () => {
        const sent = performance.now()
        const response = await fetch(`${base}/v1/sandboxes`, {
          method: "POST",
          headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
          body: JSON.stringify(body)
        })
        const json = await response.json() as { id: string }
        if (response.status !== 201) throw new Error(`create: ${response.status} ${JSON.stringify(json)}`)
        options.onPosted?.(json.id, sent)
        return { id: json.id, at: performance.now() }
      })
    const made: Array<string> = []
    const createRunning = (body: object) =>
      Effect.gen(function*() {
        const t = yield* post({ region: "local", ram_mb: 64, ...body })
        made.push(t.id)
        yield* events.running(t.id).pipe(Effect.timeout("60 seconds"))
        const done = events.runningAt.get(t.id)
        if (done === undefined) throw new Error(`sandbox ${t.id} did not run`)
        return { id: t.id, posted: t.at, latency: done - t.at }
      })

    // Everything this run made goes, whatever happens.
    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        const t0 = performance.now()
        yield* Effect.forEach(made, (id) =>
          Effect.promise(async () => {
            for (let attempt = 0; attempt < 5; attempt++) {
              const r = await fetch(`${base}/v1/sandboxes/${id}`, {
                method: "DELETE",
                headers: { authorization: `Bearer ${key}` }
              })
              await r.arrayBuffer()
              if (r.status === 202) return
              await new Promise((resolve) => setTimeout(resolve, 500))
            }
            console.log(`could not delete ${id}`)
          }), { concurrency: 8, discard: true })
        const deadline = Date.now() + 120_000
        while (made.some((id) => !events.deleted.has(id)) && Date.now() < deadline) yield* Effect.sleep("100 millis")
        const n = made.filter((id) => events.deleted.has(id)).length
        console.log(
          `\ncleaned up: ${n} of ${made.length} sandboxes deleted through the API in ${
            ((performance.now() - t0) / 1000).toFixed(1)
          } s`
        )
      })
    )
    return { createRunning, made }
  })

/**
 * POST /v1/sandboxes of `body` → state `running` (read every 10 ms), in ms; its id pushed to
 * `made` as soon as it is answered (for the clean-up).
 */
export const timeToRunning = (call: Call, body: object, made: Array<string>) =>
  Effect.gen(function*() {
    const t0 = performance.now()
    const created = yield* call("POST", "/v1/sandboxes", body)
    if (created.status !== 201) throw new Error(`create: ${created.status} ${created.text}`)
    made.push(created.json.id)
    for (;;) {
      const got = yield* call("GET", `/v1/sandboxes/${created.json.id}`)
      if (got.json.state === "running") return performance.now() - t0
      if (got.json.state === "error") throw new Error(`sandbox: ${got.json.errorMessage}`)
      yield* Effect.sleep("10 millis")
    }
  })

/** Polls the sandbox every 100 ms, `tries` times at the most, until it is in `state`. */
export const waitForState = (call: Call, id: string, state: string, tries: number) =>
  Effect.gen(function*() {
    for (let i = 0; i < tries; i++) {
      const { json } = yield* call("GET", `/v1/sandboxes/${id}`)
      if (json.state === state) return
      if (json.state === "error") throw new Error(`sandbox ${id}: error`)
      yield* Effect.sleep("100 millis")
    }
    throw new Error(`sandbox ${id} is not ${state}`)
  })

/**
 * One sandbox of `body`, running (polled, `tries` times at the most); deleted at the end of the
 * scope. Its id.
 */
export const runningSandbox = (call: Call, body: object, tries: number) =>
  Effect.gen(function*() {
    const created = yield* call("POST", "/v1/sandboxes", body)
    if (created.status !== 201) throw new Error(`create: ${created.status} ${created.text}`)
    const id = created.json.id as string
    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        yield* call("DELETE", `/v1/sandboxes/${id}`)
        yield* Effect.ignore(waitForState(call, id, "deleted", tries))
      })
    )
    yield* waitForState(call, id, "running", tries)
    return id
  })
