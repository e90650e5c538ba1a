/**
 * What the OpenAPI document says of the limits every answer shares, which no endpoint declares
 * itself because the global middleware and Node enforce them (`OpenApi.Transform` of `Api`):
 * - every response carries `RateLimit-Limit`, `RateLimit-Remaining` and `RateLimit-Reset` (the
 *   IETF draft's fields, draft-ietf-httpapi-ratelimit-headers), a 429 also `Retry-After`;
 * - 413 `payload_too_large` and 415 `unsupported_media_type` on every operation that takes a
 *   body, 431 (headers over Node's limit) and 500 `internal` on every operation;
 * - every integer is a JavaScript safe integer: `format: int64` (or `int32` when its bounds fit).
 * The OWASP API Security ruleset checks the result (`.spectral.yaml`, apps/api/test/OpenApi.test.ts).
 */
import { MAX_ERROR_MESSAGE } from "../Errors.ts"

/** The keys of an OpenAPI path item that are operations (the others: parameters, summary, ...). */
const OPERATIONS = new Set(["get", "put", "post", "delete", "options", "head", "patch", "trace"])

const COUNT = { type: "integer", format: "int64", minimum: 0, maximum: Number.MAX_SAFE_INTEGER } as const

const HEADERS = {
  "RateLimit-Limit": {
    description: "The burst of the token bucket that decided this request: the credential's " +
      "(`SVC_RATE_LIMIT_BURST`), the client address's sign-in (`SVC_SIGN_IN_RATE_BURST`) or failed-credential " +
      "one (`SVC_FAILED_AUTH_RATE_BURST`, also what answers no bucket decided report).",
    required: true,
    schema: COUNT
  },
  "RateLimit-Remaining": {
    description: "Whole requests that bucket admits now.",
    required: true,
    schema: COUNT
  },
  "RateLimit-Reset": {
    description: "Seconds until that bucket is full again.",
    required: true,
    schema: COUNT
  },
  "Retry-After": {
    description: "With `rate_limited`: seconds until the bucket admits a request again (also `retry_after_s` of " +
      "the body). A `quota_exceeded` 429 has none: it lasts until the org stops or deletes a sandbox.",
    required: false,
    schema: COUNT
  }
} as const

const header = (name: keyof typeof HEADERS) => ({ $ref: `#/components/headers/${name}` })
const RATE_HEADERS = {
  "RateLimit-Limit": header("RateLimit-Limit"),
  "RateLimit-Remaining": header("RateLimit-Remaining"),
  "RateLimit-Reset": header("RateLimit-Reset")
}

/** The contract's error body of one code (`{error, code}`), as the document's error schemas are. */
const errorSchema = (code: string) => ({
  type: "object",
  properties: {
    error: { type: "string", maxLength: MAX_ERROR_MESSAGE, description: "A message for people" },
    code: { type: "string", enum: [code] }
  },
  required: ["error", "code"],
  additionalProperties: false
})

/** The error schemas of the shared answers, by code, as the document names them. */
const COMPONENT_OF = {
  payload_too_large: "PayloadTooLargeEncoded",
  unsupported_media_type: "UnsupportedMediaTypeEncoded",
  internal: "InternalEncoded"
} as const

const json = (schema: unknown) => ({ "application/json": { schema } })

const SHARED_RESPONSES: Record<string, { readonly description: string; readonly code: keyof typeof COMPONENT_OF }> = {
  "413": {
    description:
      "The body is over the route's limit: 1 MiB; a template's 68 MiB (a 50 MiB context as base64); file uploads none but the sandbox's disk (`payload_too_large`)",
    code: "payload_too_large"
  },
  "415": {
    description: "The route does not take a body of this content type (`unsupported_media_type`)",
    code: "unsupported_media_type"
  }
}

const INT32_MIN = -(2 ** 31)
const INT32_MAX = 2 ** 31 - 1

/** `format` of every integer schema that has none (the document's and the ruleset's walk: any depth). */
const formatIntegers = (node: unknown): void => {
  if (Array.isArray(node)) {
    for (const item of node) formatIntegers(item)
    return
  }
  if (typeof node !== "object" || node === null) return
  const schema = node as Record<string, unknown>
  if (schema.type === "integer" && schema.format === undefined) {
    const fits = typeof schema.minimum === "number" && schema.minimum >= INT32_MIN &&
      typeof schema.maximum === "number" && schema.maximum <= INT32_MAX
    schema.format = fits ? "int32" : "int64"
  }
  for (const value of Object.values(schema)) formatIntegers(value)
}

export const declareLimits = (spec: Record<string, any>): Record<string, any> => {
  const schemas: Record<string, unknown> = { ...spec.components?.schemas }
  // The endpoints' own error lists declare some of these already (the same shape).
  for (const [code, component] of Object.entries(COMPONENT_OF)) schemas[component] ??= errorSchema(code)
  spec.components = { ...spec.components, schemas, headers: { ...spec.components?.headers, ...HEADERS } }
  const errorContent = (code: keyof typeof COMPONENT_OF) => json({ $ref: `#/components/schemas/${COMPONENT_OF[code]}` })
  for (const item of Object.values<Record<string, any>>(spec.paths ?? {})) {
    for (const [method, operation] of Object.entries(item)) {
      if (!OPERATIONS.has(method)) continue
      const responses: Record<string, any> = (operation.responses ??= {})
      if (operation.requestBody !== undefined) {
        for (const [status, { code, description }] of Object.entries(SHARED_RESPONSES)) {
          responses[status] ??= { description, content: errorContent(code) }
        }
      }
      responses["431"] ??= {
        description: "The request's headers are over Node's limit (16 KiB): answered by Node before any route " +
          "(`payload_too_large`, without the RateLimit fields)",
        content: errorContent("payload_too_large")
      }
      responses["500"] ??= {
        description: "An unexpected failure; details only in the server's log",
        content: errorContent("internal")
      }
      for (const [status, response] of Object.entries<Record<string, any>>(responses)) {
        if (response.$ref !== undefined) continue
        response.headers = status === "431"
          ? {
            ...response.headers,
            ...Object.fromEntries(
              Object.keys(RATE_HEADERS).map((
                name
              ) => [name, { ...HEADERS[name as keyof typeof HEADERS], required: false }])
            )
          }
          : {
            ...response.headers,
            ...RATE_HEADERS,
            ...(status === "429" ? { "Retry-After": header("Retry-After") } : {})
          }
      }
    }
  }
  formatIntegers(spec)
  return spec
}
