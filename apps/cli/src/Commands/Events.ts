/**
 * `svc events [--events a,b] [--after ID]`: the org's events as they happen (GET /v1/events),
 * one JSON line each (`{id, event, org_id, ts, data}`), until interrupted. What the key may read
 * decides what arrives.
 */
import { Console, Effect, Option } from "effect"
import { Command, Flag } from "effect/cli"
import { client, cliErrorOf } from "../Client.ts"

const follow = Effect.fn(
  function*(o: { readonly events: Option.Option<string>; readonly after: Option.Option<string> }) {
    const svc = yield* client
    // The SDK's stream reconnects after a cut connection, resuming after the last event printed.
    const stream = svc.events({
      events: Option.getOrUndefined(o.events)?.split(",").map((e) => e.trim()),
      lastEventId: Option.getOrUndefined(o.after)
    })
    // The answer's head comes once the server follows the stream: nothing after this is missed.
    yield* Effect.tryPromise({ try: () => stream.connected, catch: (e) => cliErrorOf(e, svc.baseUrl) })
    yield* Console.error("following the org's events (Ctrl-C stops)")
    yield* Effect.tryPromise({
      try: async (signal) => {
        signal.addEventListener("abort", () => stream.close(), { once: true })
        for await (const { id, ...event } of stream) {
          process.stdout.write(JSON.stringify({ id: Number(id), ...event }) + "\n")
        }
      },
      catch: (e) => cliErrorOf(e, svc.baseUrl)
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
