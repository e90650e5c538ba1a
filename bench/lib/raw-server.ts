/**
 * The HTTP baseline, in a process of its own: a raw node:http server answering a small JSON body
 * to every request (`raw`), or accepting every POST with 204 after reading its body (`sink`, the
 * webhook receiver's floor). Prints its port on stdout once listening.
 */
import * as http from "node:http"
import type { AddressInfo } from "node:net"

const mode = process.argv[2] ?? "raw"
const body = JSON.stringify({ status: "ok" })
const server = http.createServer((req, res) => {
  if (mode === "sink") {
    req.resume()
    req.on("end", () => {
      res.writeHead(204)
      res.end()
    })
    return
  }
  res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(body) })
  res.end(body)
})
server.keepAliveTimeout = 60_000
server.listen(0, "127.0.0.1", () => {
  process.stdout.write(`${(server.address() as AddressInfo).port}\n`)
})
process.on("SIGTERM", () => process.exit(0))
