/**
 * The CLI's client of the /v1 API: the SDK's `Svc` (`@svc/sdk`), for every user command.
 *
 * Credentials: `SVC_API_KEY` and `SVC_API_URL` (default http://127.0.0.1:8080), else
 * `<SVC_STATE_DIR>/dev-credentials.json` (`{base_url, api_key}`, written for the dev stack);
 * the variables are read in `Config.ts`. A non-2xx
 * answer fails with `error <code>: <message>` (and each validation issue on its own line, and a
 * hint where one helps).
 */
import { Svc, SvcError } from "@svc/sdk"
import { Config, Effect, Option, Redacted, Schema } from "effect"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { ApiKey, ApiUrl, DEFAULT_API_URL, StateDir } from "./Client/Config.ts"

export class CliError extends Schema.TaggedError<CliError>()("CliError", { message: Schema.String }) {}

interface Credentials {
  readonly baseUrl: string
  readonly apiKey: string
}

const DevCredentials = Schema.Struct({ base_url: Schema.String, api_key: Schema.String })

/** From the environment, else the dev stack's file. */
export const credentials = Effect.gen(function*() {
  const { key, url, stateDir } = yield* Config.all({ key: ApiKey, url: ApiUrl, stateDir: StateDir }).pipe(
    Effect.mapError((e) => new CliError({ message: e.message }))
  )
  if (Option.isSome(key)) {
    return {
      baseUrl: Option.getOrElse(url, () => DEFAULT_API_URL),
      apiKey: Redacted.value(key.value)
    } satisfies Credentials
  }
  const file = Path.join(stateDir, "dev-credentials.json")
  const text = yield* Effect.try({
    try: () => Fs.readFileSync(file, "utf8"),
    catch: () =>
      new CliError({
        message:
          `No credentials: set SVC_API_KEY (and SVC_API_URL), or, in the repository, run \`svc dev\` (writes ${file})`
      })
  })
  const dev = yield* Schema.decodeUnknownEffect(Schema.fromJsonString(DevCredentials))(text).pipe(
    Effect.mapError(() => new CliError({ message: `${file} is not {base_url, api_key}` }))
  )
  return { baseUrl: Option.getOrElse(url, () => dev.base_url), apiKey: dev.api_key } satisfies Credentials
})

/** What to do about an error, when the error alone does not say. */
const hintOf = (e: SvcError, baseUrl: string): string | undefined => {
  switch (e.code) {
    case "network_error":
      return `is the API running at ${baseUrl}? (\`npm start\` runs one; SVC_API_URL points elsewhere)`
    case "unauthenticated":
      return "the key is not valid (revoked, expired or mistyped): check SVC_API_KEY"
    case "insufficient_scope":
      return `the key lacks the scope ${String(e.details["required_scope"] ?? "")}: mint one with it`
    case "full_access_required":
      return "this needs a full-access (\"*\") key"
    case "rate_limited":
      return "too many requests: wait a little and try again"
    default:
      return undefined
  }
}

/** A SvcError as the CLI prints it: `error <code>: <message>`, its issues, a hint. */
export const cliErrorOf = (e: unknown, baseUrl: string): CliError => {
  if (!(e instanceof SvcError)) return new CliError({ message: `error: ${e instanceof Error ? e.message : String(e)}` })
  const issues = e.issues.map((i) => `\n  ${i.path || "(body)"}: ${i.message}`).join("")
  const errno = typeof e.details["errno"] === "string" ? ` (${e.details["errno"]})` : ""
  const hint = hintOf(e, baseUrl)
  return new CliError({ message: `error ${e.code}: ${e.message}${errno}${issues}${hint ? `\nhint: ${hint}` : ""}` })
}

/** The SDK's client on the CLI's credentials. */
export const client = Effect.map(credentials, (creds) => new Svc({ baseUrl: creds.baseUrl, apiKey: creds.apiKey }))

/** One SDK call; a thrown SvcError becomes the CLI's error message. */
export const call = <A>(f: (svc: Svc) => Promise<A>) =>
  Effect.flatMap(client, (svc) =>
    Effect.tryPromise({
      try: () => f(svc),
      catch: (e) => cliErrorOf(e, svc.baseUrl)
    }))

/** Progress of a wait, on stderr (stdout keeps the result): each new state once, with the time. */
export const progress = (label: string) => {
  const start = Date.now()
  let last = ""
  return (record: { readonly state: string }) => {
    if (record.state === last) return
    last = record.state
    process.stderr.write(`${label}: ${record.state} (${((Date.now() - start) / 1000).toFixed(1)} s)\n`)
  }
}

/** A `CliError` is the user's answer, not a crash: its message on stderr, exit status 1. */
export const reportCliError = <A, E, R>(effect: Effect.Effect<A, E | CliError, R>) =>
  Effect.catchIf(effect, (e): e is CliError => e instanceof CliError, (e) =>
    Effect.sync(() => {
      process.stderr.write(e.message + "\n")
      process.exitCode = 1
    }))
