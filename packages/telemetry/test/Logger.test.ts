/**
 * The JSON-lines logger: one object per line with the trace and span of the span it was written
 * in and the fiber's annotations; credentials never written, whether as a field named like one
 * or as text that holds one.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Logger } from "effect"
import { formatJsonLine, scrub } from "../src/Logger.ts"

/** The lines `effect` logs through the JSON logger of `svc-test`, parsed. */
const linesOf = <A, E>(effect: Effect.Effect<A, E>) =>
  Effect.gen(function*() {
    const lines: Array<string> = []
    const collect = Logger.map(formatJsonLine("svc-test"), (line) => {
      lines.push(line)
    })
    yield* Effect.exit(effect.pipe(Effect.provide(Logger.layer([collect]))))
    return lines.map((line) => JSON.parse(line) as Record<string, unknown>)
  })

describe("JSON logs", () => {
  it.effect("a line holds the service, level, message, annotations, and the trace and span it was written in", () =>
    Effect.gen(function*() {
      let ids: { traceId: string; spanId: string } | undefined
      const [line] = yield* linesOf(
        Effect.gen(function*() {
          const span = yield* Effect.currentSpan
          ids = { traceId: span.traceId, spanId: span.spanId }
          yield* Effect.logWarning("sandbox started", { sandbox: "sbx_1" })
        }).pipe(Effect.withSpan("Test.span"), Effect.annotateLogs({ requestId: "req_abc123456" }))
      )
      expect(line).toMatchObject({
        level: "WARN",
        service: "svc-test",
        message: ["sandbox started", { sandbox: "sbx_1" }],
        requestId: "req_abc123456",
        trace_id: ids!.traceId,
        span_id: ids!.spanId
      })
      expect(new Date(String(line!["ts"])).toISOString()).toBe(line!["ts"])
    }))

  it.effect("outside any span there is no trace id; a failure's cause is written", () =>
    Effect.gen(function*() {
      const [line] = yield* linesOf(Effect.logError("boom", new Error("disk full")))
      expect(line!["trace_id"]).toBeUndefined()
      expect(JSON.stringify(line)).toContain("disk full")
    }))

  it.effect("credentials are never written: fields named like one, keys, tokens and secrets in text", () =>
    Effect.gen(function*() {
      const key = "svc_live_0123456789abcdefghijABCDEFGHIJ0123456789"
      const secret = "whsec_c2VjcmV0LXNpZ25pbmcta2V5LWZvci10ZXN0cw"
      const preview = "svc_pv_abcdef.0123456789"
      const bearer = "opaque-bearer-credential-42"
      const lines = yield* linesOf(
        Effect.gen(function*() {
          yield* Effect.logInfo(`calling with ${key}`, { authorization: `Bearer ${bearer}`, token: "t0k3n-value" })
          yield* Effect.logInfo("webhook", { nested: { secret: "plain-secret-value", url: `https://x/?s=${secret}` } })
          yield* Effect.logInfo(`preview ${preview}`).pipe(Effect.annotateLogs({ password: "hunter2-hunter2" }))
          return yield* Effect.fail(new Error(`refused ${key}`))
        }).pipe(Effect.tapCause((cause) => Effect.logError("failed", cause)))
      )
      const text = lines.map((l) => JSON.stringify(l)).join("\n")
      for (const value of [key, secret, preview, bearer, "t0k3n-value", "plain-secret-value", "hunter2-hunter2"]) {
        expect(text).not.toContain(value)
      }
      expect(text).toContain("svc_live_<redacted>")
      expect(text).toContain("<redacted>")
      expect(lines.length).toBe(4)
    }))

  it("scrub keeps the rest of the text", () => {
    expect(scrub("GET /v1/sandboxes with Bearer abc.def and whsec_xyz, id sbx_1")).toBe(
      "GET /v1/sandboxes with Bearer <redacted> and whsec_<redacted>, id sbx_1"
    )
  })
})
