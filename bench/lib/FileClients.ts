/**
 * The clients `bench/files.ts` moves a file's bytes with through the API, each counting what
 * it receives: `request` over `node:http` (a body streamed, chunked or of declared length) and
 * `rawGet`, a download read from its socket as the baseline's output is read from its pipe.
 */
import * as Http from "node:http"
import * as Net from "node:net"
import { Readable } from "node:stream"

/** What a transfer's client received: the status, the body's bytes, and its first 1000 characters. */
export interface Received {
  readonly status: number
  readonly bytes: number
  readonly text: string
}

/** A request; a body is sent chunked, or with `length` as its `Content-Length` (a file's known size). */
export const request = (
  base: URL,
  token: string,
  method: string,
  path: string,
  body?: Iterable<Buffer>,
  type?: string,
  length?: number
) =>
  new Promise<Received>((resolve, reject) => {
    const req = Http.request({
      host: base.hostname,
      port: Number(base.port),
      method,
      path,
      headers: {
        authorization: `Bearer ${token}`,
        ...(body !== undefined ? { "content-type": type ?? "application/octet-stream" } : {}),
        ...(body !== undefined
          ? length !== undefined ? { "content-length": String(length) } : { "transfer-encoding": "chunked" }
          : {})
      }
    }, (res) => {
      let bytes = 0
      let text = ""
      res.on("data", (c: Buffer) => {
        bytes += c.length
        if (text.length < 1000) text += c.subarray(0, 1000).toString("utf8")
      })
      res.on("end", () => resolve({ status: res.statusCode ?? 0, bytes, text }))
      res.on("error", reject)
    })
    req.on("error", reject)
    if (body === undefined) req.end()
    else Readable.from(body, { objectMode: false }).pipe(req)
  })

/**
 * A GET read from its socket as the baseline's `tar` output is read from its pipe: Node's
 * stream of the descriptor, the bytes counted, no HTTP parser per chunk (the response's head is
 * split off the first chunks, the body is its `Content-Length`). Through `node:http` the client
 * was the slower end of a 1 GiB download: it took 1.9-2.2 s where curl into /dev/null took
 * 0.8-0.95 s from the same API in the same window (bench/README.md, 2026-11-28 13:20), so the
 * figure measured the client; its figure stays beside (`file down (node:http)`).
 */
export const rawGet = (base: URL, token: string, path: string) =>
  new Promise<Received>((resolve, reject) => {
    const socket = Net.connect(Number(base.port), base.hostname)
    /** The head, until its end came; then undefined, and the body is counted. */
    let head: Buffer | undefined = Buffer.alloc(0)
    let status = 0
    let length: number | undefined
    let bytes = 0
    let text = ""
    socket.on("connect", () =>
      socket.write(
        `GET ${path} HTTP/1.1\r\nhost: ${base.host}\r\nauthorization: Bearer ${token}\r\nconnection: close\r\n\r\n`
      ))
    socket.on("data", (chunk: Buffer) => {
      if (head === undefined) {
        bytes += chunk.length
        return
      }
      head = Buffer.concat([head, chunk])
      const end = head.indexOf("\r\n\r\n")
      if (end < 0) return
      const lines = head.subarray(0, end).toString("latin1").split("\r\n")
      status = Number(lines[0]!.split(" ")[1])
      const declared = lines.find((line) => /^content-length:/i.test(line))
      if (declared !== undefined) length = Number(declared.split(":")[1])
      const body = head.subarray(end + 4)
      head = undefined
      bytes += body.length
      text = body.subarray(0, 1000).toString("utf8")
    })
    socket.on("error", reject)
    socket.on("end", () => {
      if (length !== undefined && bytes !== length) reject(new Error(`GET ${path}: ${bytes} of ${length} bytes`))
      else resolve({ status, bytes, text })
    })
  })
