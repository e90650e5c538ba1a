import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Schema } from "effect"
import * as E from "../src/Errors.ts"

// docs/contract.md#errors: status, code, and one instance with its details.
const table: ReadonlyArray<readonly [number, string, E.ApiError, Record<string, unknown>]> = [
  [400, "invalid_request", new E.InvalidRequest({ issues: [{ path: "cpu", message: "Expected an integer" }] }), {
    issues: [{ path: "cpu", message: "Expected an integer" }]
  }],
  [400, "invalid_scope", new E.InvalidScope(), {}],
  [400, "invalid_webhook_url", new E.InvalidWebhookUrl(), {}],
  [400, "invalid_event_filter", new E.InvalidEventFilter(), {}],
  [400, "webhook_limit_reached", new E.WebhookLimitReached(), {}],
  [400, "volume_capacity_above_max", new E.VolumeCapacityAboveMax({ requested_gib: 2048, max_gib: 1024 }), {
    requested_gib: 2048,
    max_gib: 1024,
    unit: "GiB"
  }],
  [401, "unauthenticated", new E.Unauthenticated(), {}],
  [401, "token_in_query_not_allowed", new E.TokenInQueryNotAllowed(), {}],
  [402, "usage_limit_reached", new E.UsageLimitReached(), {}],
  [403, "full_access_required", new E.FullAccessRequired(), {}],
  // Added to docs/contract.md#errors: the refusal of a cross-origin state change made with a
  // session cookie.
  [403, "csrf_rejected", new E.CsrfRejected(), {}],
  [403, "insufficient_scope", new E.InsufficientScope({ required_scope: "sandboxes:write" }), {
    required_scope: "sandboxes:write"
  }],
  [403, "sandbox_out_of_scope", new E.SandboxOutOfScope(), {}],
  // Added to docs/contract.md#errors: a sandbox:<id> key asking for more egress than its sandbox has.
  [403, "egress_beyond_ceiling", new E.EgressBeyondCeiling(), {}],
  [403, "secret_manager_not_allowed", new E.SecretManagerNotAllowed(), {}],
  [404, "not_found", new E.NotFound(), {}],
  [409, "conflict", new E.Conflict(), {}],
  [409, "delivery_not_retryable", new E.DeliveryNotRetryable(), {}],
  [413, "payload_too_large", new E.PayloadTooLarge(), {}],
  // Added to docs/contract.md#errors: a body in a content type the route does not take.
  [415, "unsupported_media_type", new E.UnsupportedMediaType(), {}],
  [422, "idempotency_key_reused", new E.IdempotencyKeyReused(), {}],
  // Added to docs/contract.md#errors: the sandbox's kernel refused a file operation.
  [422, "file_refused", new E.FileRefused({ errno: "ENOSPC" }), { errno: "ENOSPC" }],
  [429, "rate_limited", new E.RateLimited({ retry_after_s: 7 }), { retry_after_s: 7 }],
  [429, "quota_exceeded", new E.QuotaExceeded({ quota: "sandboxes", limit: 100 }), { quota: "sandboxes", limit: 100 }],
  [502, "bad_gateway", new E.BadGateway(), {}],
  [503, "unavailable", new E.Unavailable(), {}],
  // Added to docs/contract.md#errors: a create no live host can take now.
  [503, "no_capacity", new E.NoCapacity({ retry_after_s: 1 }), { retry_after_s: 1 }],
  [507, "insufficient_storage", new E.InsufficientStorage(), {}],
  [500, "internal", new E.Internal(), {}]
]

describe("Errors", () => {
  it("covers every row of the contract's error table (and csrf_rejected, unsupported_media_type, no_capacity) once", () => {
    expect(table.length).toBe(E.API_ERRORS.length)
    expect(new Set(table.map(([, code]) => code)).size).toBe(table.length)
  })

  it("encodes to exactly {error, code, ...details} with the right status", () => {
    for (const [status, code, error, details] of table) {
      const encoded = Schema.encodeSync(E.ApiError)(error)
      expect(encoded).toEqual({ error: error.error, code, ...details })
      expect(JSON.stringify(encoded)).not.toContain("_tag")
      expect(JSON.parse(JSON.stringify(error))).toEqual({ error: error.error, code, ...details })
      expect(E.statusOf(error)).toBe(status)
      expect(E.errorBody(error)).toEqual({ status, body: { error: error.error, code, ...details } })
      expect(error.error.length).toBeGreaterThan(0)
      expect(error.message).toBe(error.error)
      const ctor = error.constructor as unknown as { status: number; code: string; ast: Schema.Top["ast"] }
      expect(ctor.status).toBe(status)
      expect(ctor.code).toBe(code)
      expect(ctor.ast.annotations?.httpApiStatus).toBe(status)
    }
  })

  it("keeps a custom message", () => {
    const e = new E.NotFound({ error: "No sandbox sbx_x" })
    expect(Schema.encodeSync(E.NotFound)(e)).toEqual({ error: "No sandbox sbx_x", code: "not_found" })
  })

  it("decodes a wire body back to its class by code", () => {
    for (const [, , error] of table) {
      const decoded = Schema.decodeUnknownSync(E.ApiError)(JSON.parse(JSON.stringify(error)))
      expect(decoded.constructor).toBe(error.constructor)
      expect(decoded.code).toBe(error.code)
    }
    expect(() => Schema.decodeUnknownSync(E.ApiError)({ error: "x", code: "nope" })).toThrow()
    expect(() => Schema.decodeUnknownSync(E.ApiError)({ error: "x", code: "volume_capacity_above_max" })).toThrow()
  })

  it("renders anything else as internal without details", () => {
    expect(E.errorBody(new Error("connection refused at 10.0.0.3"))).toEqual({
      status: 500,
      body: { error: "Internal error", code: "internal" }
    })
    expect(E.errorBody(undefined).status).toBe(500)
  })

  it.effect("is a yieldable error matched by catchTag", () =>
    Effect.gen(function*() {
      const exit = yield* Effect.exit(Effect.fail(new E.RateLimited({ retry_after_s: 3 })))
      expect(Exit.isFailure(exit)).toBe(true)
      const caught = yield* Effect.gen(function*() {
        return yield* new E.SandboxOutOfScope()
      }).pipe(Effect.catchTag("SandboxOutOfScope", (e) => Effect.succeed(e.code)))
      expect(caught).toBe("sandbox_out_of_scope")
    }))

  it("turns schema failures into invalid_request issues with paths", () => {
    const Body = Schema.Struct({ cpu: Schema.Int, volumes: Schema.Array(Schema.Struct({ mount_path: Schema.String })) })
    const exit = Schema.decodeUnknownExit(Body)({ cpu: 1.5, volumes: [{ mount_path: 3 }] }, { errors: "all" })
    if (Exit.isSuccess(exit)) throw new Error("expected a failure")
    const failure = exit.cause.reasons.find((r) => r._tag === "Fail")
    if (failure?._tag !== "Fail") throw new Error("expected a Fail reason")
    const e = E.invalidRequestFrom(failure.error)
    expect(e.code).toBe("invalid_request")
    expect(e.issues.map((i) => i.path)).toEqual(["cpu", "volumes.0.mount_path"])
    expect(e.issues.every((i) => i.message.length > 0)).toBe(true)
  })
})
