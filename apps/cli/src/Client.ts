/**
 * The CLI's client of the /v1 API, shared by `svc sandbox` and `svc webhook`.
 *
 * Credentials: `SVC_API_KEY` and `SVC_API_URL` (default http://127.0.0.1:8080), else
 * `<SVC_STATE_DIR>/dev-credentials.json` (`{base_url, api_key}`, written for the dev stack);
 * the variables are read in `Config.ts`. A non-2xx
 * answer fails with `error <code>: <message>` (and each validation issue on its own line).
 */
import { Config, Effect, Option, Redacted, Schema } from "effect"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { ApiKey, ApiUrl, DEFAULT_API_URL, StateDir } from "./Config.ts"

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
        message: `No credentials: set SVC_API_KEY (and SVC_API_URL), or run \`svc dev\` (writes ${file})`
      })
  })
  const dev = yield* Schema.decodeUnknownEffect(Schema.fromJsonString(DevCredentials))(text).pipe(
    Effect.mapError(() => new CliError({ message: `${file} is not {base_url, api_key}` }))
  )
  return { baseUrl: Option.getOrElse(url, () => dev.base_url), apiKey: dev.api_key } satisfies Credentials
})

/** One API call; a non-2xx answer is a `CliError` with the API's code and message. */
export const request = (method: string, path: string, body?: unknown, extraHeaders?: Record<string, string>) =>
  Effect.gen(function*() {
    const creds = yield* credentials
    const url = creds.baseUrl.replace(/\/+$/, "") + path
    const response = yield* Effect.tryPromise({
      try: () =>
        fetch(url, {
          method,
          headers: {
            ...extraHeaders,
            authorization: `Bearer ${creds.apiKey}`,
            ...(body !== undefined ? { "content-type": "application/json" } : {})
          },
          ...(body !== undefined ? { body: JSON.stringify(body) } : {})
        }),
      catch: (cause) => new CliError({ message: `cannot reach ${creds.baseUrl}: ${String(cause)}` })
    })
    const text = yield* Effect.promise(() => response.text())
    let json: any = undefined
    try {
      json = text.length > 0 ? JSON.parse(text) : undefined
    } catch {
      // Not JSON: reported below when it matters.
    }
    if (!response.ok) {
      const issues = Array.isArray(json?.issues) && json.issues.length > 0
        ? "\n" +
          json.issues.map((i: { path: string; message: string }) => `  ${i.path || "(body)"}: ${i.message}`).join("\n")
        : ""
      return yield* new CliError({
        message: `error ${json?.code ?? response.status}: ${json?.error ?? text.slice(0, 300)}${issues}`
      })
    }
    return json
  })

/** A `CliError` is the user's answer, not a crash: its message on stderr, exit status 1. */
export const reportCliError = <A, E, R>(effect: Effect.Effect<A, E | CliError, R>) =>
  Effect.catchIf(effect, (e): e is CliError => e instanceof CliError, (e) =>
    Effect.sync(() => {
      process.stderr.write(e.message + "\n")
      process.exitCode = 1
    }))

/**
 * A GET whose body is text (a build log), copied to `out` as it arrives (a followed log until
 * the server ends it). A non-2xx answer is a `CliError` like `request`'s.
 */
export const streamTo = (path: string, out: NodeJS.WritableStream) =>
  Effect.gen(function*() {
    const creds = yield* credentials
    const response = yield* Effect.tryPromise({
      try: () =>
        fetch(creds.baseUrl.replace(/\/+$/, "") + path, { headers: { authorization: `Bearer ${creds.apiKey}` } }),
      catch: (cause) => new CliError({ message: `cannot reach ${creds.baseUrl}: ${String(cause)}` })
    })
    if (!response.ok) {
      const text = yield* Effect.promise(() => response.text())
      const json = yield* Effect.sync(() => {
        try {
          return JSON.parse(text)
        } catch {
          return undefined
        }
      })
      return yield* new CliError({
        message: `error ${json?.code ?? response.status}: ${json?.error ?? text.slice(0, 300)}`
      })
    }
    yield* Effect.tryPromise({
      try: async () => {
        for await (const chunk of response.body ?? []) out.write(chunk)
      },
      catch: (cause) => new CliError({ message: `the answer was cut: ${String(cause)}` })
    })
  })
