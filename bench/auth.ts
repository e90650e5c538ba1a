/**
 * Revocation propagation between two API processes sharing Postgres and NATS: a key is warmed
 * into process B's cache, DELETE goes to process A, and the clock stops when B refuses the key
 * (polled from the moment DELETE returns). Median of 25. Target: < 50 ms. (The authenticated
 * request's throughput is bench/api.ts.)
 *   npm run bench auth     (or: node bench/auth.ts)
 */
import { startNats, startPostgres } from "@svc/local-servers/Servers"
import { useTestEncryptionKeys } from "@svc/testing/TestSecrets"
import { cliMain, mintKey, type Role, startRole, stopRoles } from "./lib/ApiRole.ts"
import { fmt } from "./lib/Measure.ts"
import { record } from "./lib/Report.ts"
import { median } from "./lib/Stats.ts"

const REVOCATIONS = Number(process.env.BENCH_REVOCATIONS ?? 25)

/** The revocation runs poll revoked keys from one address: not the limit of failed credentials. */
const NO_FAILED_AUTH_LIMIT = {
  SVC_FAILED_AUTH_RATE_PER_MINUTE: "100000000",
  SVC_FAILED_AUTH_RATE_BURST: "100000000"
}

const [nats, pg] = await Promise.all([startNats(), startPostgres()])
useTestEncryptionKeys()

const json = async (res: Response) => ({ status: res.status, body: await res.json().catch(() => null) as any })

const roles: Array<Role> = []
try {
  // `svc api` twice, one after the other: both migrate the same database at start.
  const env = { ...NO_FAILED_AUTH_LIMIT, DATABASE_URL: pg.url, NATS_URL: nats.url }
  roles.push(await startRole([cliMain(), "api"], env))
  roles.push(await startRole([cliMain(), "api"], env))
  const [a, b] = roles.map((role) => role.url) as [string, string]
  const admin = { authorization: `Bearer ${await mintKey(a)}`, "content-type": "application/json" }
  // Both processes hear each other's presence within milliseconds of starting; give it a moment.
  await new Promise((r) => setTimeout(r, 500))
  const samples: Array<number> = []
  let refusedAtOnce = 0
  for (let i = 0; i < REVOCATIONS; i++) {
    const minted = await fetch(`${a}/v1/auth/api-keys`, {
      method: "POST",
      headers: admin,
      body: JSON.stringify({ name: `r${i}` })
    }).then(json)
    const auth = { authorization: `Bearer ${minted.body.token}` }
    for (let j = 0; j < 3; j++) {
      const warm = await fetch(`${b}/v1/auth/me`, { headers: auth })
      await warm.arrayBuffer()
      if (warm.status !== 200) throw new Error(`warm-up answered ${warm.status}`)
    }
    const started = performance.now()
    const revoked = await fetch(`${a}/v1/auth/api-keys/${minted.body.id}`, { method: "DELETE", headers: admin })
    await revoked.arrayBuffer()
    if (revoked.status !== 200) throw new Error(`DELETE answered ${revoked.status}`)
    for (let attempt = 0;; attempt++) {
      const res = await fetch(`${b}/v1/auth/me`, { headers: auth })
      await res.arrayBuffer()
      if (res.status === 401) {
        if (attempt === 0) refusedAtOnce++
        break
      }
      if (performance.now() - started > 5000) throw new Error("process B still accepts the key after 5 s")
    }
    samples.push(performance.now() - started)
  }
  samples.sort((x, y) => x - y)
  console.log(`Revocation propagation between two API processes (DELETE on A, until B refuses), ${REVOCATIONS} keys`)
  console.log(
    `  median ${fmt(median(samples), 2)} ms  p90 ${fmt(samples[Math.floor(samples.length * 0.9)]!, 2)} ms  max ${
      fmt(samples[samples.length - 1]!, 2)
    } ms  (target < 50 ms)`
  )
  console.log(`  B refused on the first request after DELETE returned: ${refusedAtOnce}/${REVOCATIONS}`)
  record({
    bench: "auth",
    figure: "revocation seen by a second API process, median",
    value: median(samples),
    unit: "ms",
    target: "< 50 ms",
    met: median(samples) < 50,
    runs: REVOCATIONS
  })
} finally {
  await stopRoles(roles)
  await Promise.all([nats.stop(), pg.close()])
}
