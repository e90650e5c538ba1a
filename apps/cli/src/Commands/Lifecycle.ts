/**
 * `svc sandbox timeout <id> [--timeout-s N|none] [--idle-timeout-s N|none]`: the keep-alive
 * (PUT /v1/sandboxes/{id}/timeout). `--timeout-s` counts again from now; `none` removes a limit;
 * a flag left out keeps it. Prints the sandbox's limits and when it expires (`--json`: the record).
 *
 *   svc sandbox timeout sbx_... --timeout-s 3600
 *   svc sandbox timeout sbx_... --idle-timeout-s none
 */
import { Console, Effect, Option } from "effect"
import { Argument, Command, Flag } from "effect/cli"
import { call, CliError } from "../Client.ts"

const limit = (name: string) =>
  Flag.String(name).pipe(
    Flag.withDescription("Seconds (1 to 2592000), or `none` to remove it; left out: kept"),
    Flag.optional
  )

/** `none` → null, digits → the number; anything else is refused before a request. */
const parseLimit = (flag: string, value: Option.Option<string>) =>
  Effect.gen(function*() {
    if (Option.isNone(value)) return {}
    const text = value.value.trim()
    if (text === "none") return { [flag.replaceAll("-", "_")]: null }
    if (!/^\d{1,10}$/.test(text)) {
      return yield* new CliError({ message: `--${flag}: a number of seconds or none, not ${JSON.stringify(text)}` })
    }
    return { [flag.replaceAll("-", "_")]: Number(text) }
  })

export const timeout = Command.make(
  "timeout",
  {
    sandboxId: Argument.String("sandbox-id").pipe(Argument.withDescription("The sandbox's id (sbx_...)")),
    timeoutS: limit("timeout-s"),
    idleTimeoutS: limit("idle-timeout-s"),
    json: Flag.Boolean("json").pipe(Flag.withDescription("Print the API's JSON"), Flag.withDefault(false))
  },
  Effect.fn(function*(o) {
    const settings = {
      ...(yield* parseLimit("timeout-s", o.timeoutS)),
      ...(yield* parseLimit("idle-timeout-s", o.idleTimeoutS))
    }
    const { record } = yield* call(async (svc) => (await svc.sandboxes.get(o.sandboxId)).setTimeout(settings))
    if (o.json) return yield* Console.log(JSON.stringify(record, null, 2))
    const show = (n: number | null) => (n === null ? "none" : `${n}s`)
    yield* Console.log(
      `${record.id}  timeout_s=${show(record.timeout_s)}  idle_timeout_s=${show(record.idle_timeout_s)}  expires=${
        record.expiresAt ?? "never"
      }`
    )
  })
).pipe(Command.withDescription("Set or remove a sandbox's timeouts; --timeout-s counts again from now (a keep-alive)"))
