import { describe, expect, it } from "@effect/vitest"
import {
  deliveryHeaders,
  generateSecret,
  HEADER_CONTENT_TYPE,
  HEADER_DELIVERY_ID,
  HEADER_EVENT,
  HEADER_SIGNATURE,
  HEADER_WEBHOOK_ID,
  sign
} from "@svc/webhooks/Delivery/Signature"
import { execFileSync } from "node:child_process"
import * as crypto from "node:crypto"

/** HMAC-SHA-256 written out from RFC 2104 with the bare hash, independent of createHmac. */
const rfc2104 = (key: Uint8Array, message: Uint8Array): string => {
  const block = 64
  let k = Buffer.from(key)
  if (k.length > block) k = crypto.createHash("sha256").update(k).digest()
  const padded = Buffer.alloc(block)
  k.copy(padded)
  const ipad = Buffer.from(padded.map((b) => b ^ 0x36))
  const opad = Buffer.from(padded.map((b) => b ^ 0x5c))
  const inner = crypto.createHash("sha256").update(ipad).update(message).digest()
  return crypto.createHash("sha256").update(opad).update(inner).digest("hex")
}

const openssl = (key: string, body: Uint8Array): string =>
  execFileSync("openssl", ["dgst", "-sha256", "-hmac", key], { input: body }).toString().trim().split(" ").pop()!

describe("sign", () => {
  it("matches the RFC 4231 test vectors", () => {
    expect(sign("Jefe", "what do ya want for nothing?")).toBe(
      "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    )
    expect(sign("\x0b".repeat(20), "Hi There")).toBe(
      "sha256=b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"
    )
  })

  it("signs the raw bytes: agrees with a hand-written RFC 2104 HMAC and with openssl", () => {
    const secret = generateSecret()
    const bodies = [
      new Uint8Array(0),
      new TextEncoder().encode(
        JSON.stringify({ event: "ping", org_id: "org_1", ts: "2026-11-01T00:00:00.000Z", data: {} })
      ),
      new TextEncoder().encode("{\"name\":\"Zoë 😀\"}"),
      crypto.randomBytes(4096),
      crypto.randomBytes(100)
    ]
    for (const body of bodies) {
      const expected = `sha256=${rfc2104(Buffer.from(secret, "utf8"), body)}`
      expect(sign(secret, body)).toBe(expected)
      expect(sign(secret, body)).toBe(`sha256=${openssl(secret, body)}`)
    }
    // A key longer than the block size is hashed first (RFC 2104 section 2).
    const longKey = "k".repeat(200)
    expect(sign(longKey, "body")).toBe(`sha256=${rfc2104(Buffer.from(longKey), Buffer.from("body"))}`)
  })

  it("changes with any byte of the body or the secret", () => {
    const body = Buffer.from("{\"a\":1}")
    const base = sign("s3cret-s3cret-s3cret", body)
    expect(sign("s3cret-s3cret-s3creT", body)).not.toBe(base)
    expect(sign("s3cret-s3cret-s3cret", Buffer.from("{\"a\":2}"))).not.toBe(base)
    expect(sign("s3cret-s3cret-s3cret", Buffer.from("{\"a\": 1}"))).not.toBe(base)
    expect(base).toMatch(/^sha256=[0-9a-f]{64}$/)
  })
})

describe("generateSecret", () => {
  it("is whsec_ and 32 random bytes as base64url, never repeating", () => {
    const secrets = new Set(Array.from({ length: 200 }, generateSecret))
    expect(secrets.size).toBe(200)
    for (const secret of secrets) {
      expect(secret).toMatch(/^whsec_[A-Za-z0-9_-]{43}$/)
      expect(Buffer.from(secret.slice(6), "base64url")).toHaveLength(32)
      expect(secret.length).toBeGreaterThanOrEqual(16)
    }
  })
})

describe("deliveryHeaders", () => {
  it("carries the contract's delivery headers and x-svc-delivery-id, signed over the body", () => {
    const body = Buffer.from("{\"event\":\"ping\"}")
    const headers = deliveryHeaders({
      secret: "0123456789abcdef",
      body,
      event: "ping",
      webhookId: "wh_1",
      deliveryId: "dl_1"
    })
    expect(headers).toEqual({
      "content-type": "application/json",
      "x-svc-event": "ping",
      "x-svc-delivery-webhook-id": "wh_1",
      "x-svc-delivery-id": "dl_1",
      "x-svc-signature": `sha256=${rfc2104(Buffer.from("0123456789abcdef"), body)}`
    })
    expect([HEADER_CONTENT_TYPE, HEADER_EVENT, HEADER_WEBHOOK_ID, HEADER_SIGNATURE, HEADER_DELIVERY_ID]).toEqual([
      "content-type",
      "x-svc-event",
      "x-svc-delivery-webhook-id",
      "x-svc-signature",
      "x-svc-delivery-id"
    ])
  })
})
