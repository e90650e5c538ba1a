/**
 * Vitest global set-up: one throwaway NATS (JetStream) and one throwaway Postgres for the whole
 * run, unless `NATS_URL` / `DATABASE_URL` name servers to reuse. Test files then take their own
 * database and their own NATS prefix from them (see TestDatabase / TestNats), which is cheap.
 * Both servers are stopped at the end; they also die with this process if it is killed.
 * `SVC_ENCRYPTION_KEYS` is the fixed test key unless the run sets one (TestSecrets.ts).
 */
import { startNats, startPostgres } from "@svc/local-servers/Servers"
import { useTestEncryptionKeys } from "./TestSecrets.ts"

export default async function setup() {
  // Inherited by the test processes, so SecretBox.layer reads it as in production.
  useTestEncryptionKeys()
  const stops: Array<() => Promise<void>> = []
  if (!process.env.NATS_URL) {
    const nats = await startNats()
    process.env.SVC_TEST_NATS_URL = nats.url
    stops.push(nats.stop)
  }
  if (!process.env.DATABASE_URL) {
    const pg = await startPostgres()
    process.env.SVC_TEST_DATABASE_URL = pg.url
    stops.push(pg.close)
  }
  return async () => {
    await Promise.all(stops.map((stop) => stop()))
  }
}
