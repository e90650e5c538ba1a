/**
 * Delivery signing (docs/contract.md#delivery-request, #signature): `x-svc-signature: sha256=<hex
 * HMAC-SHA-256>` over the raw request bytes, keyed with the webhook secret. The key is the UTF-8
 * bytes of the secret string exactly as stored (a generated `whsec_...` secret is used whole,
 * prefix included, not decoded), so a receiver only needs the string it was given.
 */
import * as crypto from "node:crypto"

/** Header names of a delivery request (docs/contract.md#delivery-request). */
export const HEADER_CONTENT_TYPE = "content-type"
export const HEADER_EVENT = "x-svc-event"
export const HEADER_WEBHOOK_ID = "x-svc-delivery-webhook-id"
export const HEADER_SIGNATURE = "x-svc-signature"
/** The same on every attempt of one delivery, so receivers can de-duplicate. */
export const HEADER_DELIVERY_ID = "x-svc-delivery-id"

export const SIGNATURE_PREFIX = "sha256="
export const SECRET_PREFIX = "whsec_"

/** `sha256=` + lower-case hex of HMAC-SHA-256(secret, body). */
export const sign = (secret: string, body: Uint8Array | string): string =>
  SIGNATURE_PREFIX + crypto.createHmac("sha256", secret).update(body).digest("hex")

/**
 * A new signing secret: `whsec_` + 32 random bytes (256 bits) from the CSPRNG as base64url
 * (43 characters), 49 characters in all, well above the 16-character minimum of
 * docs/contract.md#webhook-record.
 */
export const generateSecret = (): string => SECRET_PREFIX + crypto.randomBytes(32).toString("base64url")

/**
 * Everything a delivery POST carries (docs/contract.md#delivery-request), the signature computed
 * over `body`.
 */
export const deliveryHeaders = (options: {
  readonly secret: string
  readonly body: Uint8Array
  readonly event: string
  readonly webhookId: string
  readonly deliveryId: string
}): Record<string, string> => ({
  [HEADER_CONTENT_TYPE]: "application/json",
  [HEADER_EVENT]: options.event,
  [HEADER_WEBHOOK_ID]: options.webhookId,
  [HEADER_DELIVERY_ID]: options.deliveryId,
  [HEADER_SIGNATURE]: sign(options.secret, options.body)
})
