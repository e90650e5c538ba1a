/**
 * Receiver-side verification of webhook deliveries (docs/contract.md#signature): the
 * `x-svc-signature` header is `sha256=` + hex HMAC-SHA-256 of the raw request body, keyed with the
 * webhook's signing secret (the UTF-8 bytes of the secret string exactly as returned at creation,
 * `whsec_` prefix included).
 *
 * Compute over the raw bytes as received, never over re-serialised JSON.
 */
import { Effect, Schema } from "effect"
import * as crypto from "node:crypto"

/**
 * Header names a delivery carries (docs/contract.md#delivery-request). Node lower-cases incoming
 * names.
 */
export const WEBHOOK_SIGNATURE_HEADER = "x-svc-signature"
export const WEBHOOK_EVENT_HEADER = "x-svc-event"
export const WEBHOOK_ID_HEADER = "x-svc-delivery-webhook-id"
export const WEBHOOK_DELIVERY_ID_HEADER = "x-svc-delivery-id"

const PREFIX = "sha256="
const HEX_SHA256 = /^[0-9a-fA-F]{64}$/

export const WebhookSignatureFailure = Schema.Literals([
  "missing_secret",
  "invalid_body",
  "missing_signature",
  "malformed_signature",
  "signature_mismatch"
])
export type WebhookSignatureFailure = typeof WebhookSignatureFailure.Type

export class WebhookSignatureError extends Schema.TaggedError<WebhookSignatureError>()("WebhookSignatureError", {
  reason: WebhookSignatureFailure,
  message: Schema.String
}) {}

export interface VerifyWebhookOptions {
  /** The request body exactly as received (a string is taken as its UTF-8 bytes). */
  readonly rawBody: Uint8Array | string
  /** The `x-svc-signature` header as your framework gives it (Node: string | string[] | undefined). */
  readonly signatureHeader: string | ReadonlyArray<string> | null | undefined
  /** The webhook's signing secret. */
  readonly secret: string
}

/** Why a delivery does not verify, or null when it does. */
export const checkWebhookSignature = (options: VerifyWebhookOptions): WebhookSignatureError | null => {
  if (typeof options.secret !== "string" || options.secret.length === 0) {
    return new WebhookSignatureError({ reason: "missing_secret", message: "no signing secret configured" })
  }
  if (typeof options.rawBody !== "string" && !(options.rawBody instanceof Uint8Array)) {
    // The usual mistake: passing the parsed JSON instead of the bytes that were signed.
    return new WebhookSignatureError({
      reason: "invalid_body",
      message: "rawBody must be the raw request bytes or string"
    })
  }
  const header = options.signatureHeader
  // One delivery carries one signature; several headers are refused rather than guessed between.
  const value = typeof header === "string" ? header : header != null && header.length === 1 ? header[0] : undefined
  if (value === undefined || value === "") {
    return new WebhookSignatureError({
      reason: "missing_signature",
      message: `missing or repeated ${WEBHOOK_SIGNATURE_HEADER} header`
    })
  }
  if (!value.startsWith(PREFIX)) {
    return new WebhookSignatureError({
      reason: "malformed_signature",
      message: "signature does not start with sha256="
    })
  }
  const hex = value.slice(PREFIX.length)
  if (!HEX_SHA256.test(hex)) {
    return new WebhookSignatureError({ reason: "malformed_signature", message: "signature is not 64 hex digits" })
  }
  const expected = crypto.createHmac("sha256", options.secret).update(options.rawBody).digest()
  const given = Buffer.from(hex, "hex")
  // Equal length is guaranteed by the pattern above, and checked again since timingSafeEqual throws otherwise.
  if (given.length !== expected.length || !crypto.timingSafeEqual(given, expected)) {
    return new WebhookSignatureError({ reason: "signature_mismatch", message: "signature does not match the body" })
  }
  return null
}

/** True when the delivery's signature matches its raw body and your secret. Never throws. */
export const verifyWebhook = (options: VerifyWebhookOptions): boolean => checkWebhookSignature(options) === null

/** Effect variant: succeeds with nothing, or fails with a `WebhookSignatureError` saying why. */
export const verifyWebhookEffect = (options: VerifyWebhookOptions): Effect.Effect<void, WebhookSignatureError> =>
  Effect.suspend(() => {
    const error = checkWebhookSignature(options)
    return error === null ? Effect.void : Effect.fail(error)
  })
