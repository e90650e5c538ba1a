import { describe, expect, it } from "@effect/vitest"
import {
  checkWebhookSignature,
  verifyWebhook,
  verifyWebhookEffect,
  WEBHOOK_SIGNATURE_HEADER,
  WebhookSignatureError
} from "@svc/sdk/Webhooks"
import { Effect } from "effect"
import { execFileSync } from "node:child_process"
import * as crypto from "node:crypto"
import * as http from "node:http"
import type * as net from "node:net"

/** HMAC-SHA-256 from RFC 2104 with the bare hash: independent of createHmac. */
const rfc2104 = (key: string, message: Uint8Array): string => {
  let k = Buffer.from(key, "utf8")
  if (k.length > 64) k = crypto.createHash("sha256").update(k).digest()
  const padded = Buffer.alloc(64)
  k.copy(padded)
  const inner = crypto.createHash("sha256").update(padded.map((b) => b ^ 0x36)).update(message).digest()
  return crypto.createHash("sha256").update(padded.map((b) => b ^ 0x5c)).update(inner).digest("hex")
}

const openssl = (key: string, body: Uint8Array): string =>
  execFileSync("openssl", ["dgst", "-sha256", "-hmac", key], { input: body }).toString().trim().split(" ").pop()!

const secret = "whsec_9vO0y3r2nqCw7p1Jx0Y4Hk3bGf8sT2uVwZ6aQe5dLmA"
const rawBody = Buffer.from(JSON.stringify({
  event: "sandbox.created",
  org_id: "org_1",
  ts: "2026-11-02T10:00:00.000Z",
  data: { sandbox_id: "sb_1", note: "Zoë 😀" }
}))

describe("verifyWebhook", () => {
  it("accepts the RFC 4231 test vector", () => {
    expect(verifyWebhook({
      rawBody: "what do ya want for nothing?",
      signatureHeader: "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
      secret: "Jefe"
    })).toBe(true)
  })

  it("accepts signatures computed independently (openssl, RFC 2104 by hand), bytes or string, any hex case", () => {
    const byOpenssl = `sha256=${openssl(secret, rawBody)}`
    const byHand = `sha256=${rfc2104(secret, rawBody)}`
    expect(byOpenssl).toBe(byHand)
    expect(verifyWebhook({ rawBody, signatureHeader: byOpenssl, secret })).toBe(true)
    expect(verifyWebhook({ rawBody: new Uint8Array(rawBody), signatureHeader: byHand, secret })).toBe(true)
    expect(verifyWebhook({ rawBody: rawBody.toString("utf8"), signatureHeader: byHand, secret })).toBe(true)
    expect(verifyWebhook({ rawBody, signatureHeader: `sha256=${rfc2104(secret, rawBody).toUpperCase()}`, secret }))
      .toBe(true)
    expect(verifyWebhook({ rawBody, signatureHeader: [byHand], secret })).toBe(true)
    for (const body of [Buffer.alloc(0), crypto.randomBytes(10_000)]) {
      expect(verifyWebhook({ rawBody: body, signatureHeader: `sha256=${openssl(secret, body)}`, secret })).toBe(true)
    }
  })

  const good = `sha256=${rfc2104(secret, rawBody)}`
  const hex = good.slice(7)
  const flipped = (hex[0] === "0" ? "1" : "0") + hex.slice(1)
  const refusals: ReadonlyArray<readonly [string, Parameters<typeof verifyWebhook>[0], string]> = [
    ["missing prefix", { rawBody, signatureHeader: hex, secret }, "malformed_signature"],
    ["other algorithm prefix", { rawBody, signatureHeader: `sha1=${hex}`, secret }, "malformed_signature"],
    ["upper-case prefix", { rawBody, signatureHeader: `SHA256=${hex}`, secret }, "malformed_signature"],
    ["short", { rawBody, signatureHeader: good.slice(0, -2), secret }, "malformed_signature"],
    ["long", { rawBody, signatureHeader: `${good}00`, secret }, "malformed_signature"],
    ["non-hex", { rawBody, signatureHeader: `sha256=${"z".repeat(64)}`, secret }, "malformed_signature"],
    ["whitespace inside", { rawBody, signatureHeader: `sha256= ${hex.slice(1)}`, secret }, "malformed_signature"],
    ["prefix only", { rawBody, signatureHeader: "sha256=", secret }, "malformed_signature"],
    ["empty header", { rawBody, signatureHeader: "", secret }, "missing_signature"],
    ["absent header", { rawBody, signatureHeader: undefined, secret }, "missing_signature"],
    ["null header", { rawBody, signatureHeader: null, secret }, "missing_signature"],
    ["two headers", { rawBody, signatureHeader: [good, good], secret }, "missing_signature"],
    ["no header in a list", { rawBody, signatureHeader: [], secret }, "missing_signature"],
    ["one flipped digit", { rawBody, signatureHeader: `sha256=${flipped}`, secret }, "signature_mismatch"],
    ["wrong secret", { rawBody, signatureHeader: good, secret: `${secret}x` }, "signature_mismatch"],
    ["tampered body", {
      rawBody: Buffer.from(rawBody.toString().replace("sb_1", "sb_2")),
      signatureHeader: good,
      secret
    }, "signature_mismatch"],
    ["re-serialised JSON", {
      rawBody: JSON.stringify(JSON.parse(rawBody.toString()), null, 2),
      signatureHeader: good,
      secret
    }, "signature_mismatch"],
    ["empty body", { rawBody: "", signatureHeader: good, secret }, "signature_mismatch"],
    ["empty secret", { rawBody, signatureHeader: good, secret: "" }, "missing_secret"],
    [
      "parsed JSON instead of bytes",
      { rawBody: JSON.parse(rawBody.toString()), signatureHeader: good, secret },
      "invalid_body"
    ]
  ]
  it.each(refusals)("refuses: %s", (_name, options, reason) => {
    expect(verifyWebhook(options)).toBe(false)
    expect(checkWebhookSignature(options)?.reason).toBe(reason)
  })

  it.effect("the Effect variant succeeds or fails with a typed error", () =>
    Effect.gen(function*() {
      yield* verifyWebhookEffect({ rawBody, signatureHeader: good, secret })
      const error = yield* Effect.flip(
        verifyWebhookEffect({ rawBody, signatureHeader: good, secret: "another secret!!" })
      )
      expect(error).toBeInstanceOf(WebhookSignatureError)
      expect(error.reason).toBe("signature_mismatch")
    }))
})

describe("a node:http receiver as in the README", () => {
  it("verifies a signed POST over real HTTP and refuses a tampered one", async () => {
    const outcomes: Array<number> = []
    const server = http.createServer((req, res) => {
      const chunks: Array<Buffer> = []
      req.on("data", (chunk: Buffer) => chunks.push(chunk))
      req.on("end", () => {
        const ok = verifyWebhook({
          rawBody: Buffer.concat(chunks),
          signatureHeader: req.headers[WEBHOOK_SIGNATURE_HEADER],
          secret
        })
        res.statusCode = ok ? 204 : 401
        outcomes.push(res.statusCode)
        res.end()
      })
    })
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
    try {
      const url = `http://127.0.0.1:${(server.address() as net.AddressInfo).port}/hook`
      const good = `sha256=${openssl(secret, rawBody)}`
      const post = (body: Uint8Array, signature: string) =>
        fetch(url, {
          method: "POST",
          body,
          headers: { "content-type": "application/json", "x-svc-signature": signature }
        })
      expect((await post(rawBody, good)).status).toBe(204)
      expect((await post(Buffer.from(`${rawBody.toString()} `), good)).status).toBe(401)
      expect(outcomes).toEqual([204, 401])
    } finally {
      server.closeAllConnections()
      await new Promise((resolve) => server.close(resolve))
    }
  })
})
