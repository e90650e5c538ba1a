/**
 * An upload that stalls: it declares `declared` bytes, sends `sent` of them, then nothing more
 * while its client keeps the connection open (the tests of transfer slots and idle bounds).
 */
import * as Http from "node:http"

/** How an upload ended: its answer, or the connection closed under it. */
export type Ended =
  | { readonly _tag: "Answer"; readonly status: number; readonly retryAfter: string | undefined; readonly body: string }
  | { readonly _tag: "Closed"; readonly message: string }

export const stalledUpload = (
  base: string,
  token: string,
  sandboxId: string,
  path: string,
  options: { readonly declared: number; readonly sent: number }
) => {
  let settled = false
  const url = new URL(base)
  const req = Http.request({
    host: url.hostname,
    port: Number(url.port),
    method: "PUT",
    path: `/v1/sandboxes/${sandboxId}/files?path=${encodeURIComponent(path)}`,
    agent: false,
    headers: {
      authorization: `Bearer ${token}`,
      "content-type": "application/octet-stream",
      "content-length": options.declared
    }
  })
  const ended = new Promise<Ended>((resolve) => {
    const done = (value: Ended) => {
      settled = true
      resolve(value)
    }
    req.on("error", (e) => done({ _tag: "Closed", message: e.message }))
    req.on("response", (res) => {
      let body = ""
      res.on("data", (c: Buffer) => (body += c.toString("utf8")))
      res.on("end", () =>
        done({
          _tag: "Answer",
          status: res.statusCode ?? 0,
          retryAfter: res.headers["retry-after"] as string | undefined,
          body
        }))
      res.on("error", (e) => done({ _tag: "Closed", message: e.message }))
    })
  })
  req.write(Buffer.alloc(options.sent, 7))
  return { ended, settled: () => settled, destroy: () => req.destroy() }
}
