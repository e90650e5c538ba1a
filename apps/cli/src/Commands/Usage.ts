/**
 * `svc usage` and `svc usage limits`: a client of the /v1 billing routes
 * (docs/contract.md#billing); account-level, so the key must be a `*` key. Credentials as for
 * `svc sandbox`. API errors print `error <code>: <message>` and exit 1.
 *
 *   svc usage                                   # this month's spend, limits, blocked or not
 *   svc usage limits --hard 50000000 --alert 40000000
 *   svc usage limits --hard none                # remove the hard limit
 *
 * Amounts are integer micros (a millionth of the currency unit); the summary also shows them
 * in units (`12.345678`).
 */
import type { Usage } from "@svc/sdk"
import { Console, Effect, Option } from "effect"
import { Command, Flag } from "effect/cli"
import { call, CliError } from "../Client.ts"

const print = (value: unknown) => Console.log(JSON.stringify(value, null, 2))
const json = Flag.Boolean("json").pipe(Flag.withDescription("Print the API's JSON"), Flag.withDefault(false))

/** `12345678` micros as `12.345678`. */
export const formatMicros = (micros: number): string => {
  const units = Math.floor(micros / 1_000_000)
  return `${units}.${String(micros % 1_000_000).padStart(6, "0")}`
}

const amount = (micros: number | null) => (micros === null ? "none" : `${formatMicros(micros)} (${micros} micros)`)

const summary = (u: Usage) =>
  [
    `period      ${u.period_start} .. ${u.period_end}`,
    `spend       ${amount(u.spend_micros)}`,
    `hard limit  ${amount(u.hard_limit_micros)}`,
    `alert       ${amount(u.alert_micros)}`,
    `blocked     ${u.blocked ? "yes: creating or starting sandboxes is refused (402)" : "no"}`
  ].join("\n")

const show = (o: { readonly json: boolean }) => (usage: Usage) => (o.json ? print(usage) : Console.log(summary(usage)))

/** A flag's value: micros (digits) or `none` (null: removed). */
export const parseLimit = (flag: string, text: string): Effect.Effect<number | null, CliError> => {
  if (text === "none") return Effect.succeed(null)
  if (/^\d{1,16}$/.test(text) && Number.isSafeInteger(Number(text))) return Effect.succeed(Number(text))
  return Effect.fail(new CliError({ message: `--${flag}: "${text}" is not a number of micros or none` }))
}

const limitFlag = (name: string, what: string) =>
  Flag.String(name).pipe(Flag.withDescription(`${what} in micros, or none to remove it`), Flag.optional)

const limits = Command.make(
  "limits",
  {
    hard: limitFlag("hard", "The hard limit (at it the org is blocked)"),
    alert: limitFlag("alert", "The alert value"),
    json
  },
  Effect.fn(function*(o) {
    const body: { hard_limit_micros?: number | null; alert_micros?: number | null } = {}
    if (Option.isSome(o.hard)) body.hard_limit_micros = yield* parseLimit("hard", o.hard.value)
    if (Option.isSome(o.alert)) body.alert_micros = yield* parseLimit("alert", o.alert.value)
    yield* show(o)(yield* call((svc) => svc.billing.setLimits(body)))
  })
).pipe(Command.withDescription("Set the hard limit and the alert value (an omitted one is kept)"))

export const usage = Command.make(
  "usage",
  { json },
  Effect.fn(function*(o) {
    yield* show(o)(yield* call((svc) => svc.billing.usage()))
  })
).pipe(
  Command.withDescription("This month's metered spend, the limits, and whether the org is blocked"),
  Command.withSubcommands([limits])
)
