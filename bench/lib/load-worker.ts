/**
 * The load generator, run as its own process so that it never competes with the server under
 * test for the same event loop: `connections` keep-alive connections, each sending the next
 * request as soon as the previous answered, for `durationMs`. Prints one JSON line.
 */
import * as http from "node:http"

const { url, connections, durationMs, headers, method, body } = JSON.parse(process.argv[2]!) as {
  url: string
  connections: number
  durationMs: number
  headers?: Record<string, string>
  method?: string
  body?: string
}

const agent = new http.Agent({ keepAlive: true, maxSockets: connections })
const target = new URL(url)
let ok = 0
let failed = 0
const latencies: Array<number> = []

const once = () =>
  new Promise<void>((resolve) => {
    const started = performance.now()
    const req = http.request(
      {
        host: target.hostname,
        port: target.port,
        path: target.pathname + target.search,
        method: method ?? "GET",
        agent,
        headers
      },
      (res) => {
        res.resume()
        res.on("end", () => {
          if (res.statusCode! >= 200 && res.statusCode! < 300) ok++
          else failed++
          latencies.push(performance.now() - started)
          resolve()
        })
      }
    )
    req.on("error", () => {
      failed++
      resolve()
    })
    req.end(body)
  })

const deadline = Date.now() + durationMs
const loop = async () => {
  while (Date.now() < deadline) await once()
}
const started = performance.now()
await Promise.all(Array.from({ length: connections }, loop))
const elapsed = (performance.now() - started) / 1000
latencies.sort((a, b) => a - b)
const q = (p: number) => latencies[Math.min(latencies.length - 1, Math.floor(p * latencies.length))] ?? 0
console.log(JSON.stringify({ ok, failed, rps: ok / elapsed, p50: q(0.5), p99: q(0.99) }))
agent.destroy()
