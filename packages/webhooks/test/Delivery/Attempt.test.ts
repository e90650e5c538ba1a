import { assert, describe, expect, layer } from "@effect/vitest"
import { attempt, DEFAULT_ATTEMPT_TIMEOUT_MS, MAX_RESPONSE_BYTES, WebhookSender } from "@svc/webhooks/Delivery/Attempt"
import { deliveryHeaders } from "@svc/webhooks/Delivery/Signature"
import {
  type ResolvedAddress,
  WebhookAddressGuard,
  WebhookResolveError,
  WebhookResolver
} from "@svc/webhooks/Subscriptions/AddressGuard"
import { Effect, Layer } from "effect"
import { execFileSync } from "node:child_process"
import * as fs from "node:fs"
import * as http from "node:http"
import * as https from "node:https"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import type * as tls from "node:tls"

// ---------------------------------------------------------------------------------------------
// Real receivers on 127.0.0.1
// ---------------------------------------------------------------------------------------------

interface Received {
  readonly method: string
  readonly url: string
  readonly headers: http.IncomingHttpHeaders
  readonly body: Buffer
  readonly servername: string | null
}

type Handler = (req: http.IncomingMessage, res: http.ServerResponse) => void

interface Receiver {
  readonly port: number
  readonly received: Array<Received>
  readonly connections: () => number
}

/** A real HTTP(S) server recording every request it fully read; closed with the test's scope. */
const receiver = (
  handle: Handler = (_req, res) => res.end("ok"),
  options: { readonly tls?: Cert; readonly readBody?: boolean } = {}
) =>
  Effect.acquireRelease(
    Effect.callback<{ server: http.Server; receiver: Receiver }>((resume) => {
      const received: Array<Received> = []
      let connections = 0
      const onRequest = (req: http.IncomingMessage, res: http.ServerResponse) => {
        if (options.readBody === false) return handle(req, res)
        const chunks: Array<Buffer> = []
        req.on("data", (chunk: Buffer) => chunks.push(chunk))
        req.on("end", () => {
          received.push({
            method: req.method ?? "",
            url: req.url ?? "",
            headers: req.headers,
            body: Buffer.concat(chunks),
            servername: (req.socket as tls.TLSSocket).servername || null
          })
          handle(req, res)
        })
      }
      const server = options.tls === undefined
        ? http.createServer(onRequest)
        : https.createServer({ key: options.tls.key, cert: options.tls.cert }, onRequest)
      server.on(options.tls === undefined ? "connection" : "secureConnection", () => connections++)
      server.listen(0, "127.0.0.1", () =>
        resume(Effect.succeed({
          server,
          receiver: { port: (server.address() as net.AddressInfo).port, received, connections: () => connections }
        })))
    }),
    ({ server }) =>
      Effect.callback<void>((resume) => {
        server.closeAllConnections()
        server.close(() => resume(Effect.void))
      })
  ).pipe(Effect.map(({ receiver }) => receiver))

/** A port nothing listens on: bind, note, close. */
const closedPort = Effect.callback<number>((resume) => {
  const server = net.createServer()
  server.listen(0, "127.0.0.1", () => {
    const port = (server.address() as net.AddressInfo).port
    server.close(() => resume(Effect.succeed(port)))
  })
})

/** A raw TCP server answering each connection with `reply` (or just closing it). */
const rawServer = (reply: string | null) =>
  Effect.acquireRelease(
    Effect.callback<net.Server>((resume) => {
      const server = net.createServer((socket) => {
        socket.once("data", () => (reply === null ? socket.resetAndDestroy() : socket.end(reply)))
        socket.on("error", () => {})
      })
      server.listen(0, "127.0.0.1", () => resume(Effect.succeed(server)))
    }),
    (server) => Effect.callback<void>((resume) => void server.close(() => resume(Effect.void)))
  ).pipe(Effect.map((server) => (server.address() as net.AddressInfo).port))

// ---------------------------------------------------------------------------------------------
// A self-signed certificate for hook.test, made with openssl and kept in memory only
// ---------------------------------------------------------------------------------------------

interface Cert {
  readonly key: string
  readonly cert: string
}

const makeCert = (): Cert => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "svc-webhook-cert-"))
  try {
    execFileSync("openssl", [
      "req",
      "-x509",
      "-newkey",
      "ec",
      "-pkeyopt",
      "ec_paramgen_curve:prime256v1",
      "-nodes",
      "-days",
      "1",
      "-subj",
      "/CN=hook.test",
      "-addext",
      "subjectAltName=DNS:hook.test",
      "-keyout",
      path.join(dir, "key.pem"),
      "-out",
      path.join(dir, "cert.pem")
    ], { stdio: "ignore" })
    return {
      key: fs.readFileSync(path.join(dir, "key.pem"), "utf8"),
      cert: fs.readFileSync(path.join(dir, "cert.pem"), "utf8")
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
}
const cert = makeCert()

// ---------------------------------------------------------------------------------------------
// Resolver whose answers change between lookups (DNS rebinding) and which counts lookups
// ---------------------------------------------------------------------------------------------

const lookups: Array<string> = []
/** Per name, the answers of successive lookups; the last one repeats. */
const answers = new Map<string, Array<ReadonlyArray<string>>>()

const scriptedResolver = Layer.succeed(WebhookResolver)(WebhookResolver.of({
  lookup: (hostname) =>
    Effect.suspend(() => {
      lookups.push(hostname)
      const queue = answers.get(hostname)
      if (queue === undefined || queue.length === 0) {
        return Effect.fail(new WebhookResolveError({ hostname, message: "lookup failed (ENOTFOUND)" }))
      }
      const next = queue.length > 1 ? queue.shift()! : queue[0]!
      return Effect.succeed(next.map((address): ResolvedAddress => ({ address, family: net.isIPv6(address) ? 6 : 4 })))
    })
}))

// No reuse of checked answers here (AddressGuard.test.ts tests that cache): each attempt asks DNS.
const guard = WebhookAddressGuard.layerWith({
  allowedSubnets: [{ address: "127.0.0.0", prefix: 8, family: "ipv4" }],
  targetCacheMs: 0
}).pipe(Layer.provide(scriptedResolver))

const body = (text: string) => new TextEncoder().encode(text)
const headersFor = (payload: Uint8Array) =>
  deliveryHeaders({
    secret: "whsec_test_secret_0123456789",
    body: payload,
    event: "ping",
    webhookId: "wh_1",
    deliveryId: "dl_1"
  })

describe("WebhookSender.attempt", () => {
  layer(WebhookSender.layerWith({ ca: cert.cert }).pipe(Layer.provideMerge(guard)), { excludeTestServices: true })(
    (it) => {
      it.effect("200: succeeded; the receiver gets exactly the body bytes and the delivery headers", () =>
        Effect.gen(function*() {
          const hook = yield* receiver()
          // Binary, non-UTF-8 bytes too: the body must arrive untouched.
          const payload = new Uint8Array([...body("{\"event\":\"ping\"}"), 0, 0xff, 0xfe, 0x80, 10])
          const result = yield* attempt({
            url: `http://127.0.0.1:${hook.port}/hook?x=1`,
            body: payload,
            headers: headersFor(payload)
          })
          expect(result).toMatchObject({ outcome: "succeeded", responseCode: 200, error: null })
          assert.isTrue(result.durationMs >= 0)
          expect(hook.received).toHaveLength(1)
          const got = hook.received[0]!
          expect(got.method).toBe("POST")
          expect(got.url).toBe("/hook?x=1")
          expect(Buffer.compare(got.body, Buffer.from(payload))).toBe(0)
          expect(got.headers).toMatchObject({
            ...headersFor(payload),
            host: `127.0.0.1:${hook.port}`,
            "content-length": String(payload.byteLength),
            "user-agent": "svc-webhooks/1"
          })
        }))

      it.effect("204 is a success", () =>
        Effect.gen(function*() {
          const hook = yield* receiver((_req, res) => {
            res.statusCode = 204
            res.end()
          })
          const result = yield* attempt({ url: `http://127.0.0.1:${hook.port}/`, body: body("{}"), headers: {} })
          expect(result).toMatchObject({ outcome: "succeeded", responseCode: 204, error: null })
        }))

      it.effect.each([400, 404, 410, 429, 500, 503])(
        "%s is a failure with its code",
        (status) =>
          Effect.gen(function*() {
            const hook = yield* receiver((_req, res) => {
              res.statusCode = status
              res.end("nope, and this body is never reported")
            })
            const result = yield* attempt({ url: `http://127.0.0.1:${hook.port}/`, body: body("{}"), headers: {} })
            expect(result).toMatchObject({ outcome: "failed", responseCode: status, error: `HTTP ${status}` })
          })
      )

      it.effect.each([301, 302, 303, 307, 308])(
        "%s is a failure and the redirect is not followed",
        (status) =>
          Effect.gen(function*() {
            const target = yield* receiver()
            const hook = yield* receiver((_req, res) => {
              res.writeHead(status, { location: `http://127.0.0.1:${target.port}/elsewhere` })
              res.end()
            })
            const result = yield* attempt({ url: `http://127.0.0.1:${hook.port}/`, body: body("{}"), headers: {} })
            expect(result).toMatchObject({
              outcome: "failed",
              responseCode: status,
              error: `redirect not followed (HTTP ${status})`
            })
            expect(hook.received).toHaveLength(1)
            expect(target.received).toHaveLength(0)
            expect(target.connections()).toBe(0)
          })
      )

      it.effect("a receiver that never answers times out and its socket is closed", () =>
        Effect.gen(function*() {
          let closed = false
          const hook = yield* receiver((req) => req.socket.on("close", () => (closed = true)))
          const result = yield* attempt({
            url: `http://127.0.0.1:${hook.port}/`,
            body: body("{}"),
            headers: {},
            timeoutMs: 300
          })
          expect(result).toMatchObject({ outcome: "failed", responseCode: null, error: "timeout after 300 ms" })
          assert.isTrue(result.durationMs >= 250)
          yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 50)))
          assert.isTrue(closed)
        }))

      it.effect("a 200 whose body never finishes is a timeout, not a success", () =>
        Effect.gen(function*() {
          const hook = yield* receiver((_req, res) => {
            res.writeHead(200, { "content-length": "100" })
            res.write("partial")
          })
          const result = yield* attempt({
            url: `http://127.0.0.1:${hook.port}/`,
            body: body("{}"),
            headers: {},
            timeoutMs: 300
          })
          expect(result).toMatchObject({ outcome: "failed", responseCode: 200, error: "timeout after 300 ms" })
        }))

      it.effect("a receiver that never reads the body times out (the deadline covers sending)", () =>
        Effect.gen(function*() {
          const hook = yield* receiver(() => {}, { readBody: false })
          const big = new Uint8Array(32 * 1024 * 1024)
          const result = yield* attempt({
            url: `http://127.0.0.1:${hook.port}/`,
            body: big,
            headers: {},
            timeoutMs: 300
          })
          expect(result).toMatchObject({ outcome: "failed", responseCode: null, error: "timeout after 300 ms" })
        }))

      it.effect("a closed port is connection refused", () =>
        Effect.gen(function*() {
          const port = yield* closedPort
          const result = yield* attempt({ url: `http://127.0.0.1:${port}/`, body: body("{}"), headers: {} })
          expect(result).toMatchObject({ outcome: "failed", responseCode: null, error: "connection refused" })
        }))

      it.effect("a connection reset before any answer is a failure", () =>
        Effect.gen(function*() {
          const port = yield* rawServer(null)
          const result = yield* attempt({ url: `http://127.0.0.1:${port}/`, body: body("{}"), headers: {} })
          expect(result).toMatchObject({ outcome: "failed", responseCode: null, error: "connection reset" })
        }))

      it.effect("a response that is not HTTP is a failure", () =>
        Effect.gen(function*() {
          const port = yield* rawServer("SSH-2.0-OpenSSH_9.6\r\n\r\n")
          const result = yield* attempt({ url: `http://127.0.0.1:${port}/`, body: body("{}"), headers: {} })
          expect(result.outcome).toBe("failed")
          expect(result.responseCode).toBe(null)
          expect(result.error).toMatch(/^invalid HTTP response \(HPE_/)
        }))

      it.effect("a huge response body is read only up to the cap; the status decides", () =>
        Effect.gen(function*() {
          let sent = 0
          const hook = yield* receiver((_req, res) => {
            const chunk = Buffer.alloc(64 * 1024, 97)
            const pump = () => {
              while (sent < 64 * 1024 * 1024) {
                sent += chunk.length
                if (!res.write(chunk)) return void res.once("drain", pump)
              }
              res.end()
            }
            res.on("error", () => {})
            pump()
          })
          const result = yield* attempt({
            url: `http://127.0.0.1:${hook.port}/`,
            body: body("{}"),
            headers: {},
            timeoutMs: 3_000
          })
          expect(result).toMatchObject({ outcome: "succeeded", responseCode: 200, error: null })
          // The receiver could not push its 64 MiB: we stopped reading shortly after the cap.
          assert.isTrue(sent > MAX_RESPONSE_BYTES && sent < 64 * 1024 * 1024)
        }))

      it.effect("keeps connections alive between attempts to one receiver", () =>
        Effect.gen(function*() {
          const hook = yield* receiver()
          for (let i = 0; i < 5; i++) {
            const result = yield* attempt({
              url: `http://127.0.0.1:${hook.port}/`,
              body: body(`{"n":${i}}`),
              headers: {}
            })
            expect(result.outcome).toBe("succeeded")
          }
          expect(hook.received.map((r) => r.body.toString())).toEqual([0, 1, 2, 3, 4].map((i) => `{"n":${i}}`))
          expect(hook.connections()).toBe(1)
        }))

      it.effect("a pooled connection the receiver dropped is replaced by a fresh one within the attempt", () =>
        Effect.gen(function*() {
          const served = new WeakMap<net.Socket, number>()
          // Each connection serves one request; a second request on it is reset unanswered.
          const hook = yield* receiver((req, res) => {
            const count = (served.get(req.socket) ?? 0) + 1
            served.set(req.socket, count)
            if (count > 1) return void req.socket.resetAndDestroy()
            res.end("ok")
          })
          const url = `http://127.0.0.1:${hook.port}/`
          expect((yield* attempt({ url, body: body("{\"n\":1}"), headers: {} })).outcome).toBe("succeeded")
          const second = yield* attempt({ url, body: body("{\"n\":2}"), headers: {} })
          expect(second).toMatchObject({ outcome: "succeeded", responseCode: 200, error: null })
          // The second delivery reached the receiver twice: once on the dropped connection, once fresh.
          expect(hook.received.map((r) => r.body.toString())).toEqual(["{\"n\":1}", "{\"n\":2}", "{\"n\":2}"])
          expect(hook.connections()).toBe(2)
        }))

      it.effect("caller headers cannot override Host or the framing", () =>
        Effect.gen(function*() {
          const hook = yield* receiver()
          const payload = body("{\"a\":1}")
          const result = yield* attempt({
            url: `http://127.0.0.1:${hook.port}/`,
            body: payload,
            headers: { Host: "evil.example", "Content-Length": "1", "Transfer-Encoding": "chunked", "X-Custom": "yes" }
          })
          expect(result.outcome).toBe("succeeded")
          const got = hook.received[0]!
          expect(got.headers.host).toBe(`127.0.0.1:${hook.port}`)
          expect(got.headers["content-length"]).toBe(String(payload.byteLength))
          expect(got.headers["transfer-encoding"]).toBeUndefined()
          expect(got.headers["x-custom"]).toBe("yes")
          expect(got.body.toString()).toBe("{\"a\":1}")
        }))

      it.effect("a header value with CR/LF is refused before sending", () =>
        Effect.gen(function*() {
          const hook = yield* receiver()
          const result = yield* attempt({
            url: `http://127.0.0.1:${hook.port}/`,
            body: body("{}"),
            headers: { "x-svc-event": "ping\r\nx-injected: 1" }
          })
          expect(result).toMatchObject({ outcome: "failed", responseCode: null, error: "invalid request header" })
          expect(hook.connections()).toBe(0)
        }))

      it.effect("a non-public target is refused without connecting", () =>
        Effect.gen(function*() {
          for (
            const url of [
              "http://10.0.0.1/",
              "http://169.254.169.254/latest/meta-data/",
              "http://[::1]/",
              "ftp://127.0.0.1/"
            ]
          ) {
            const result = yield* attempt({ url, body: body("{}"), headers: {} })
            expect(result.outcome).toBe("failed")
            expect(result.responseCode).toBe(null)
            expect(result.error).toMatch(/^refused: /)
          }
        }))

      it.effect("DNS rebinding: the request goes to the address checked, and DNS is asked once per attempt", () =>
        Effect.gen(function*() {
          const hook = yield* receiver()
          // First answer: allowed loopback; any later lookup: a private address.
          answers.set("rebind.test", [["127.0.0.1"], ["10.0.0.7"]])
          lookups.length = 0
          const url = `http://rebind.test:${hook.port}/in`
          const first = yield* attempt({ url, body: body("{}"), headers: {} })
          expect(first).toMatchObject({ outcome: "succeeded", responseCode: 200 })
          // One lookup by the guard; Node did not resolve the name again (it could not: the system
          // resolver does not know rebind.test).
          expect(lookups).toEqual(["rebind.test"])
          expect(hook.received[0]!.headers.host).toBe(`rebind.test:${hook.port}`)
          const second = yield* attempt({ url, body: body("{}"), headers: {} })
          expect(second.outcome).toBe("failed")
          expect(second.error).toContain("non-public")
          expect(lookups).toEqual(["rebind.test", "rebind.test"])
          expect(hook.received).toHaveLength(1)
        }))

      it.effect("a name that does not resolve is a failure", () =>
        Effect.gen(function*() {
          const result = yield* attempt({ url: "http://nowhere.test/", body: body("{}"), headers: {} })
          expect(result).toMatchObject({
            outcome: "failed",
            responseCode: null,
            error: "refused: url host does not resolve"
          })
        }))

      it.effect("https: connects to the checked address with the URL's host as SNI and Host header", () =>
        Effect.gen(function*() {
          const hook = yield* receiver(undefined, { tls: cert })
          answers.set("hook.test", [["127.0.0.1"]])
          const payload = body("{\"secure\":true}")
          const result = yield* attempt({
            url: `https://hook.test:${hook.port}/tls`,
            body: payload,
            headers: headersFor(payload)
          })
          expect(result).toMatchObject({ outcome: "succeeded", responseCode: 200, error: null })
          const got = hook.received[0]!
          expect(got.servername).toBe("hook.test")
          expect(got.headers.host).toBe(`hook.test:${hook.port}`)
          expect(got.body.toString()).toBe("{\"secure\":true}")
        }))

      it.effect("https: a certificate for another name is a TLS failure", () =>
        Effect.gen(function*() {
          const hook = yield* receiver(undefined, { tls: cert })
          answers.set("other.test", [["127.0.0.1"]])
          const result = yield* attempt({ url: `https://other.test:${hook.port}/`, body: body("{}"), headers: {} })
          expect(result).toMatchObject({
            outcome: "failed",
            responseCode: null,
            error: "tls: ERR_TLS_CERT_ALTNAME_INVALID"
          })
          expect(hook.received).toHaveLength(0)
        }))
    }
  )

  layer(WebhookSender.layer.pipe(Layer.provideMerge(guard)), { excludeTestServices: true })((it) => {
    it.effect("https: an untrusted (self-signed) certificate is a TLS failure", () =>
      Effect.gen(function*() {
        const hook = yield* receiver(undefined, { tls: cert })
        answers.set("hook.test", [["127.0.0.1"]])
        const result = yield* attempt({ url: `https://hook.test:${hook.port}/`, body: body("{}"), headers: {} })
        expect(result.outcome).toBe("failed")
        expect(result.error).toMatch(/^tls: (DEPTH_ZERO_SELF_SIGNED_CERT|SELF_SIGNED_CERT_IN_CHAIN)$/)
        expect(hook.received).toHaveLength(0)
      }))

    it.effect("without timeoutMs the 5 s default applies: an answer after 1 s succeeds", () =>
      Effect.gen(function*() {
        expect(DEFAULT_ATTEMPT_TIMEOUT_MS).toBe(5_000)
        const hook = yield* receiver((_req, res) => void setTimeout(() => res.end("late"), 1_000))
        const result = yield* attempt({ url: `http://127.0.0.1:${hook.port}/`, body: body("{}"), headers: {} })
        expect(result).toMatchObject({ outcome: "succeeded", responseCode: 200 })
      }))
  })
})
