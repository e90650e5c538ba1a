/**
 * `svc events [--events a,b] [--after ID]`: the org's events as they happen (GET /v1/events),
 * one JSON line each (`{id, event, org_id, ts, data}`), until interrupted. What the key may read
 * decides what arrives.
 */
import { Console, Effect, Option } from "effect"
import { Command, Flag } from "effect/cli"
import { CliError, credentials } from "../Client.ts"

const follow = Effect.fn(
  function*(o: { readonly events: Option.Option<string>; readonly after: Option.Option<string> }) {
    const creds = yield* credentials
    const query = Option.isSome(o.events) ? `?events=${encodeURIComponent(o.events.value)}` : ""
    const response = yield* Effect.tryPromise({
      try: (signal) =>
        fetch(`${creds.baseUrl.replace(/\/+$/, "")}/v1/events${query}`, {
          headers: {
            authorization: `Bearer ${creds.apiKey}`,
            accept: "text/event-stream",
            ...(Option.isSome(o.after) ? { "last-event-id": o.after.value } : {})
          },
          signal
        }),
      catch: (cause) => new CliError({ message: `cannot reach ${creds.baseUrl}: ${String(cause)}` })
    })
    if (!response.ok || response.body === null) {
      const json = yield* Effect.promise(() =>
        response.json().then(
          (v) => v as { code?: string; error?: string },
          () => ({} as { code?: string; error?: string })
        )
      )
      return yield* new CliError({ message: `error ${json.code ?? response.status}: ${json.error ?? ""}` })
    }
    const body = response.body
    // The answer's head comes once the server follows the stream: nothing after this is missed.
    yield* Console.error("following the org's events (Ctrl-C stops)")
    yield* Effect.tryPromise({
      try: async () => {
        const decoder = new TextDecoder()
        let buffer = ""
        for await (const chunk of body) {
          buffer += decoder.decode(chunk, { stream: true })
          let end: number
          while ((end = buffer.indexOf("\n\n")) !== -1) {
            const block = buffer.slice(0, end)
            buffer = buffer.slice(end + 2)
            let id = ""
            let data = ""
            for (const line of block.split("\n")) {
              if (line.startsWith("id:")) {
                id = line.slice(3).trim()
              } else if (line.startsWith("data:")) {
                data += line.slice(5).trim()
              }
            }
            if (data !== "") process.stdout.write(JSON.stringify({ id: Number(id), ...JSON.parse(data) }) + "\n")
          }
        }
      },
      catch: (cause) => new CliError({ message: `the event stream ended: ${String(cause)}` })
    })
  }
)

export const events = Command.make(
  "events",
  {
    events: Flag.String("events").pipe(
      Flag.withDescription("Only these events (comma-separated names)"),
      Flag.optional
    ),
    after: Flag.String("after").pipe(Flag.withDescription("Resume after this event id"), Flag.optional)
  },
  follow
).pipe(Command.withDescription("Follow the org's events as they happen, one JSON line each"))
