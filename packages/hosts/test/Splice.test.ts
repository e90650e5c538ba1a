/**
 * The API's kernel splice of a file's bytes (Splice.ts, native/svc-splice.c), between real
 * sockets: a "host" (a TCP server that sends a file's bytes, then ends, resets or holds its
 * connection) and an "API" (a Node HTTP server whose response gets a `HostBytes` of a connection
 * to that host, as the files route does), read by a plain HTTP client; for an upload, a "sink"
 * host that reads to its end and answers the bytes' hash, the client's body spliced into it
 * (`spliceBody`). What the client sees: every byte in order and the length announced, or a cut
 * body, never a short one taken as whole; and what is left on the machine: no splicer process
 * once the transfer ended, however it ended.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Splice from "@svc/hosts/Splice"
import { Effect } from "effect"
import { createHash } from "node:crypto"
import * as FsSync from "node:fs"
import * as Http from "node:http"
import * as Net from "node:net"
import * as NodePath from "node:path"
import { pipeline } from "node:stream/promises"

const MiB = 1024 * 1024

/** `size` bytes in which every MiB differs (its number first): a block out of order changes the hash. */
const fileBytes = (size: number): Buffer => {
  const bytes = Buffer.alloc(size)
  for (let i = 0; i < size; i += 4096) bytes.writeUInt32BE((i * 2654435761) >>> 0, i)
  return bytes
}
const sha = (bytes: Buffer) => createHash("sha256").update(bytes).digest("hex")

type HostEnd = "end" | "reset" | "hold"

/**
 * A host that sends `bytes` on each connection, then ends, resets, or holds it open; resolves
 * each connection's close. With `segment`, in writes of that many bytes, each sent at once (many
 * small TCP segments, as a loaded host's may be).
 */
const startHost = (bytes: Buffer, then: HostEnd, segment?: number) => {
  const closed: Array<Promise<void>> = []
  const server = Net.createServer((socket) => {
    socket.on("error", () => undefined)
    closed.push(new Promise((resolve) => socket.once("close", () => resolve())))
    const done = () => {
      if (then === "end") socket.end()
      else if (then === "reset") socket.resetAndDestroy()
    }
    if (segment === undefined) return void socket.write(bytes, done)
    socket.setNoDelay(true)
    let at = 0
    const more = () => {
      while (at < bytes.length && !socket.destroyed) {
        const chunk = bytes.subarray(at, at + segment)
        at += chunk.length
        if (!socket.write(chunk)) return void socket.once("drain", more)
      }
      if (at >= bytes.length) done()
    }
    more()
  })
  return new Promise<{ port: number; server: Net.Server; closed: Array<Promise<void>> }>((resolve) =>
    server.listen(0, "127.0.0.1", () => resolve({ port: (server.address() as Net.AddressInfo).port, server, closed }))
  )
}

interface Served {
  readonly spliced: boolean
  /** The response's pipe: its failure (a cut transfer) or its end. */
  readonly piped: Promise<unknown>
}

/**
 * An API whose every request gets the host's bytes as a `HostBytes` of `size` (the first
 * `headBytes` of them read before, as the upgrade's head), spliced if `binary` is given.
 */
const startApi = (hostPort: number, size: number, headBytes: number, binary: Splice.SpliceBinary, idleMs = 10_000) => {
  const served: Array<Served> = []
  const server = Http.createServer((_request, response) => {
    const connection = Net.connect(hostPort, "127.0.0.1")
    connection.once("connect", () => {
      const start = () => {
        const head = headBytes > 0 ? (connection.read(headBytes) as Buffer | null) ?? Buffer.alloc(0) : Buffer.alloc(0)
        const bytes = new Splice.HostBytes(connection, head, size, binary)
        const spliced = bytes.spliceInto({ response, idleMs })
        // As the framework does: its own length check, the head before the body.
        response.strictContentLength = true
        response.writeHead(200, {
          "content-type": "application/octet-stream",
          ...(spliced ? {} : { "content-length": String(size) })
        })
        served.push({ spliced, piped: pipeline(bytes, response).catch((e: unknown) => e) })
      }
      if (headBytes > 0) connection.once("readable", start)
      else start()
    })
  })
  return new Promise<{ port: number; server: Http.Server; served: Array<Served> }>((resolve) =>
    server.listen(0, "127.0.0.1", () => resolve({ port: (server.address() as Net.AddressInfo).port, server, served }))
  )
}

interface Received {
  readonly status: number
  readonly headers: Http.IncomingHttpHeaders
  readonly bytes: Buffer
  /** The body ended whole (`end` with `complete`), not cut. */
  readonly complete: boolean
}

/** A GET of the API; `whileOpen` runs once the head came (the body not yet read), before reading on. */
const get = (port: number, whileOpen?: (response: Http.IncomingMessage) => Promise<void>) =>
  new Promise<Received>((resolve, reject) => {
    const request = Http.get({ host: "127.0.0.1", port, path: "/file", agent: false }, async (response) => {
      const chunks: Array<Buffer> = []
      let ended = false
      response.pause()
      response.once("end", () => (ended = true))
      response.once("close", () =>
        resolve({
          status: response.statusCode!,
          headers: response.headers,
          bytes: Buffer.concat(chunks),
          complete: ended && response.complete
        }))
      if (whileOpen !== undefined) {
        try {
          await whileOpen(response)
        } catch (e) {
          response.destroy()
          return reject(e)
        }
      }
      response.on("data", (chunk: Buffer) => chunks.push(chunk))
      response.resume()
    })
    request.once("error", reject)
  })

/** The splicer processes this process started that are still running. */
const splicers = (): Array<number> =>
  FsSync.readdirSync("/proc").filter((entry) => /^\d+$/.test(entry)).map(Number).filter((pid) => {
    try {
      const stat = FsSync.readFileSync(`/proc/${pid}/stat`, "utf8")
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1])
      return ppid === process.pid && stat.includes("(svc-splice-")
    } catch {
      return false
    }
  })

/** A process's CPU time so far, in ticks (user + system). */
const cpuTicks = (pid: number): number => {
  const fields = FsSync.readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ")
  return Number(fields[11]) + Number(fields[12])
}

const eventually = async (check: () => boolean, what: string, ms = 10_000) => {
  const until = Date.now() + ms
  while (!check()) {
    if (Date.now() > until) throw new Error(`not within ${ms} ms: ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
}

/** The splicer's binary, built for the test (its scope removes it). */
const builtSplicer = Effect.gen(function*() {
  const binary = yield* Splice.build
  yield* Effect.promise(() => eventually(() => binary() !== undefined, "the splicer built", 60_000))
  return binary
})

const close = (...servers: Array<Net.Server>) =>
  Effect.promise(() => Promise.all(servers.map((server) => new Promise((resolve) => server.close(resolve)))))

describe("Splice", () => {
  it.effect(
    "a scope closed while the splicer is being built waits for the build, then removes its folder",
    () =>
      Effect.gen(function*() {
        const binary = yield* Effect.scoped(Splice.build)
        const built = binary()
        expect(built).toBeDefined()
        expect(FsSync.existsSync(NodePath.dirname(built!))).toBe(false)
      }),
    60_000
  )

  it.effect(
    "moves every byte in order, Node's read-ahead first; the length is announced and the connection closes after",
    () =>
      Effect.gen(function*() {
        const binary = yield* builtSplicer
        const size = 24 * MiB + 12345
        const bytes = fileBytes(size)
        const host = yield* Effect.promise(() => startHost(bytes, "hold"))
        for (const headBytes of [0, 1000]) {
          const api = yield* Effect.promise(() => startApi(host.port, size, headBytes, binary))
          const received = yield* Effect.promise(() => get(api.port))
          expect(api.served[0]!.spliced).toBe(true)
          expect(received.status).toBe(200)
          expect(received.headers["content-length"]).toBe(String(size))
          expect(received.headers["connection"]).toBe("close")
          expect(received.complete).toBe(true)
          expect(received.bytes.length).toBe(size)
          expect(sha(received.bytes)).toBe(sha(bytes))
          yield* close(api.server)
        }
        // Each transfer ended its connection to the host (held open by the host: the API closed it).
        yield* Effect.promise(() => Promise.all(host.closed))
        yield* Effect.promise(() => eventually(() => splicers().length === 0, "no splicer left"))
        yield* close(host.server)
      }).pipe(Effect.scoped),
    60_000
  )

  it.effect(
    "a host that sent more than the file's size: the client gets exactly the size, whole",
    () =>
      Effect.gen(function*() {
        const binary = yield* builtSplicer
        const size = 3 * MiB
        const bytes = fileBytes(size + 4096)
        for (const splicer of [binary, () => undefined]) {
          const host = yield* Effect.promise(() => startHost(bytes, "hold"))
          const api = yield* Effect.promise(() => startApi(host.port, size, 0, splicer))
          const received = yield* Effect.promise(() => get(api.port))
          expect(api.served[0]!.spliced).toBe(splicer === binary)
          expect(received.complete).toBe(true)
          expect(sha(received.bytes)).toBe(sha(bytes.subarray(0, size)))
          yield* close(api.server, host.server)
        }
      }).pipe(Effect.scoped),
    60_000
  )

  it.effect(
    "a host that ends or resets before the size: the client sees a cut body, spliced or not",
    () =>
      Effect.gen(function*() {
        const binary = yield* builtSplicer
        const size = 8 * MiB
        for (const then of ["end", "reset"] as const) {
          for (const splicer of [binary, () => undefined]) {
            const host = yield* Effect.promise(() => startHost(fileBytes(size / 2), then))
            const api = yield* Effect.promise(() => startApi(host.port, size, 0, splicer))
            const received = yield* Effect.promise(() => get(api.port))
            expect(api.served[0]!.spliced).toBe(splicer === binary)
            expect(received.complete).toBe(false)
            expect(received.bytes.length).toBeLessThan(size)
            const failure = yield* Effect.promise(() => api.served[0]!.piped)
            expect(failure).toBeInstanceOf(Error)
            yield* close(api.server, host.server)
          }
        }
        yield* Effect.promise(() => eventually(() => splicers().length === 0, "no splicer left"))
      }).pipe(Effect.scoped),
    60_000
  )

  it.effect(
    "the splicer runs unprivileged, holding only the two connections; a client that goes away ends it and the host's connection",
    () =>
      Effect.gen(function*() {
        const binary = yield* builtSplicer
        const size = 256 * MiB
        const host = yield* Effect.promise(() => startHost(fileBytes(size), "hold", 512))
        const api = yield* Effect.promise(() => startApi(host.port, size, 0, binary))
        const received = yield* Effect.promise(() =>
          get(api.port, async (response) => {
            // The client reads nothing yet: the splicer waits on a full connection.
            await eventually(() => splicers().length === 1, "the splicer running")
            const [pid] = splicers()
            const status = FsSync.readFileSync(`/proc/${pid}/status`, "utf8")
            const uid = process.geteuid!() === 0 ? "65534" : String(process.geteuid!())
            expect(status).toMatch(new RegExp(`^Uid:\\s+${uid}\\s+${uid}\\s+${uid}\\s+${uid}$`, "m"))
            expect(status).toMatch(/^NoNewPrivs:\s+1$/m)
            const fds = FsSync.readdirSync(`/proc/${pid}/fd`).map(Number).sort((a, b) => a - b)
            // stdin and stderr (/dev/null), the answer's pipe, the two connections, its own pipe's two ends.
            expect(fds).toEqual([0, 1, 2, 3, 4, 5, 6])
            for (const fd of [3, 4]) expect(FsSync.readlinkSync(`/proc/${pid}/fd/${fd}`)).toMatch(/^socket:/)
            // Nothing can move while the client reads nothing: the splicer sleeps in poll, it does not spin.
            const before = cpuTicks(pid!)
            await new Promise((resolve) => setTimeout(resolve, 500))
            expect(cpuTicks(pid!) - before).toBeLessThanOrEqual(2)
            response.destroy()
          })
        )
        expect(received.complete).toBe(false)
        expect(yield* Effect.promise(() => api.served[0]!.piped)).toBeInstanceOf(Error)
        yield* Effect.promise(() => eventually(() => splicers().length === 0, "the splicer ended"))
        yield* Effect.promise(() => Promise.all(host.closed))
        yield* close(api.server, host.server)
      }).pipe(Effect.scoped),
    60_000
  )

  it.effect(
    "a client that stops reading for the idle bound: the splicer ends and the body is cut",
    () =>
      Effect.gen(function*() {
        const binary = yield* builtSplicer
        const size = 256 * MiB
        const host = yield* Effect.promise(() => startHost(fileBytes(size), "hold"))
        const api = yield* Effect.promise(() => startApi(host.port, size, 0, binary, 300))
        const received = yield* Effect.promise(() =>
          get(api.port, async () => {
            await eventually(() => splicers().length === 1, "the splicer running")
            await eventually(() => splicers().length === 0, "the splicer ended on its idle bound")
          })
        )
        expect(received.complete).toBe(false)
        const failure = yield* Effect.promise(() => api.served[0]!.piped)
        expect(failure).toMatchObject({ _tag: "SplicerFailed", errno: Splice.ETIMEDOUT })
        yield* close(api.server, host.server)
      }).pipe(Effect.scoped),
    60_000
  )
})

/**
 * A host that reads a connection to its end and answers the bytes' hash (or, with `answerAt`,
 * answers "early" once that many came, and closes); resolves what it read.
 */
const startSink = (answerAt?: number) => {
  const received: Array<Promise<Buffer>> = []
  const server = Net.createServer((socket) => {
    socket.on("error", () => undefined)
    const chunks: Array<Buffer> = []
    let size = 0
    received.push(
      new Promise((resolve) => {
        socket.on("data", (chunk: Buffer) => {
          chunks.push(chunk)
          size += chunk.length
          if (answerAt !== undefined && size >= answerAt) socket.end("early\n")
        })
        socket.once("end", () => {
          const bytes = Buffer.concat(chunks)
          socket.end(`${sha(bytes)}\n`)
          resolve(bytes)
        })
        socket.once("close", () => resolve(Buffer.concat(chunks)))
      })
    )
  })
  return new Promise<{ port: number; server: Net.Server; received: Array<Promise<Buffer>> }>((resolve) =>
    server.listen(0, "127.0.0.1", () => resolve({ port: (server.address() as Net.AddressInfo).port, server, received }))
  )
}

/** An API whose every request's body goes to the sink by `Splice.spliceBody`, answered with the splice's outcome and the sink's answer. */
const startUploadApi = (sinkPort: number, binary: string, idleMs = 10_000) => {
  const outcomes: Array<Promise<unknown>> = []
  const server = Http.createServer((request, response) => {
    const host = Net.connect(sinkPort, "127.0.0.1")
    host.on("error", () => undefined)
    let answer = ""
    host.on("data", (chunk: Buffer) => (answer += chunk.toString("utf8")))
    const answered = new Promise<void>((resolve) => host.once("close", () => resolve()))
    host.once("connect", () => {
      expect(Splice.canSpliceBody(request, host)).toBe(true)
      const outcome = Splice.spliceBody(binary, request, host, { response, idleMs }, new AbortController().signal)
      outcomes.push(outcome.then(() => "done", (e: unknown) => e))
      outcome.then(
        async () => {
          host.end()
          await answered
          response.writeHead(200, { "content-type": "text/plain" }).end(answer)
        },
        () => {
          host.resetAndDestroy()
          response.destroy()
        }
      )
    })
  })
  return new Promise<{ port: number; server: Http.Server; outcomes: Array<Promise<unknown>> }>((resolve) =>
    server.listen(0, "127.0.0.1", () => resolve({ port: (server.address() as Net.AddressInfo).port, server, outcomes }))
  )
}

/** A PUT of `declared` bytes of which `bytes` are sent (then the connection is cut, if fewer); the answer or the cut. */
const upload = (port: number, bytes: Buffer, declared = bytes.length) =>
  new Promise<{ status: number; headers: Http.IncomingHttpHeaders; text: string } | "cut">((resolve) => {
    const request = Http.request({
      host: "127.0.0.1",
      port,
      method: "PUT",
      path: "/file",
      agent: false,
      headers: { "content-length": String(declared) }
    }, (response) => {
      let text = ""
      response.on("data", (chunk: Buffer) => (text += chunk.toString("utf8")))
      response.once("end", () => resolve({ status: response.statusCode!, headers: response.headers, text }))
      response.once("error", () => resolve("cut"))
    })
    request.once("error", () => resolve("cut"))
    request.write(bytes, () => {
      if (bytes.length < declared) setTimeout(() => request.destroy(), 100)
      else request.end()
    })
  })

describe("Splice of an upload's body", () => {
  it.effect(
    "moves every byte of the declared length, what Node had parsed first; the response closes its connection",
    () =>
      Effect.gen(function*() {
        const binary = (yield* builtSplicer)()!
        const bytes = fileBytes(24 * MiB + 777)
        const sink = yield* Effect.promise(() => startSink())
        const api = yield* Effect.promise(() => startUploadApi(sink.port, binary))
        const answer = yield* Effect.promise(() => upload(api.port, bytes))
        expect(yield* Effect.promise(() => api.outcomes[0]!)).toBe("done")
        expect(answer).toMatchObject({ status: 200, text: `${sha(bytes)}\n` })
        expect(answer !== "cut" && answer.headers["connection"]).toBe("close")
        yield* Effect.promise(() => eventually(() => splicers().length === 0, "no splicer left"))
        yield* close(api.server, sink.server)
      }).pipe(Effect.scoped),
    60_000
  )

  it.effect(
    "a body cut before its declared length fails on the client's side; a host that stops reading, on its own",
    () =>
      Effect.gen(function*() {
        const binary = (yield* builtSplicer)()!
        const sink = yield* Effect.promise(() => startSink())
        const api = yield* Effect.promise(() => startUploadApi(sink.port, binary))
        expect(yield* Effect.promise(() => upload(api.port, fileBytes(4 * MiB), 16 * MiB))).toBe("cut")
        expect(yield* Effect.promise(() => api.outcomes[0]!)).toMatchObject({ _tag: "SplicerFailed", side: "from" })
        yield* close(api.server, sink.server)

        const early = yield* Effect.promise(() => startSink(2 * MiB))
        const refusing = yield* Effect.promise(() => startUploadApi(early.port, binary))
        yield* Effect.promise(() => upload(refusing.port, fileBytes(64 * MiB)))
        const failed = yield* Effect.promise(() => refusing.outcomes[0]!)
        expect(failed).toMatchObject({ _tag: "SplicerFailed", side: "to" })
        yield* Effect.promise(() => eventually(() => splicers().length === 0, "no splicer left"))
        yield* close(refusing.server, early.server)
      }).pipe(Effect.scoped),
    60_000
  )
})
