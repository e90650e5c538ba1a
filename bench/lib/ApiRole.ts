/**
 * The API role as a benchmark's subject: `node apps/api/src/main.ts` in a process of its own,
 * with the per-key rate limit raised (the benchmark measures the server, not the limit), and a
 * `*` key minted as a user would (sign-up, then a key made with the session).
 */
import { freePort, waitForPort } from "@svc/local-servers/Servers"
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"

/**
 * The API role's entry point: this checkout's, or BENCH_API_ROOT's (another checkout of the
 * repository, for before/after figures with the same benchmark).
 */
export const apiMain = (): string => path.join(apiRoot(), "apps/api/src/main.ts")

/** `svc`'s entry point, of the same checkout as `apiMain` (for `svc dev`). */
export const cliMain = (): string => path.join(apiRoot(), "apps/cli/src/main.ts")

/**
 * The in-process measure of the API's routes (api-inprocess.ts) of the same checkout, if it has
 * one (checkouts before it do not).
 */
export const apiInProcess = (): string | undefined => {
  const script = path.join(apiRoot(), "bench/lib/api-inprocess.ts")
  return fs.existsSync(script) ? script : undefined
}

const apiRoot = () => process.env.BENCH_API_ROOT ?? new URL("../..", import.meta.url).pathname

/** The throughput of the server, not of the per-key rate limit: raised for a run. */
export const NO_RATE_LIMIT = {
  SVC_RATE_LIMIT_PER_SECOND: "100000000",
  SVC_RATE_LIMIT_BURST: "100000000"
}

export interface Role {
  readonly url: string
  readonly pid: number
  readonly child: ChildProcess
}

/** Starts `script` (a path under the repository) with node; resolves once it listens. */
export const startRole = async (
  args: ReadonlyArray<string>,
  env: Record<string, string>,
  port?: number
): Promise<Role> => {
  const listen = port ?? await freePort()
  const child = spawn(process.execPath, args, {
    env: { ...process.env, ...NO_RATE_LIMIT, SVC_PORT: String(listen), SVC_HOST: "127.0.0.1", ...env },
    stdio: ["ignore", "ignore", "inherit"]
  })
  await waitForPort(listen, 120_000, child)
  return { url: `http://127.0.0.1:${listen}`, pid: child.pid!, child }
}

/** Stops roles started here and waits for them to exit. */
export const stopRoles = (roles: ReadonlyArray<{ readonly child: ChildProcess }>) =>
  Promise.all(roles.map(({ child }) =>
    new Promise((resolve) => {
      if (child.exitCode !== null) return resolve(null)
      child.once("exit", resolve)
      child.kill("SIGTERM")
    })
  ))

/**
 * Signs up and mints a `*` key with the session, as a user would; `send` is how a request reaches
 * the API (`fetch` over a socket, or a handler in-process).
 */
export const mintKey = async (
  base: string,
  send: (url: string, init: RequestInit) => Promise<Response> = fetch
): Promise<string> => {
  const email = `bench-${Date.now()}-${Math.random().toString(36).slice(2)}@example.com`
  const up = await send(`${base}/v1/auth/sign-up`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ email, password: "a benchmark password", org_name: "bench" })
  })
  if (up.status !== 201) throw new Error(`sign-up answered ${up.status}`)
  const cookie = up.headers.get("set-cookie")!.split(";")[0]!
  const key = await send(`${base}/v1/auth/api-keys`, {
    method: "POST",
    headers: { "content-type": "application/json", cookie, origin: base },
    body: JSON.stringify({ name: "bench" })
  })
  if (key.status !== 201) throw new Error(`mint answered ${key.status}`)
  return ((await key.json()) as { token: string }).token
}
