/**
 * The platform's settings are environment variables. Each is read in one `Config.ts` module (one
 * per package or role that has settings), lazily (inside a layer, through Effect's `Config`, so
 * a test's `ConfigProvider` applies and nothing is read at import), with one default. This
 * module gives those modules their formats, and lets each setting carry its name, default and
 * format: every `Config.ts` exports its `settings`, and the README's configuration table is
 * checked against them.
 *
 * Formats:
 * - duration: a whole number and a unit, `ms`, `s`, `m`, `h` or `d`: `500ms`, `30s`, `2m`, `1h`, `7d`;
 * - flag: `1` or `true`, `0` or `false`;
 * - integer, number, text; lists are comma-separated.
 *
 * An empty variable is an unset one (Effect's `ConfigProvider.fromEnv`).
 */
import { Config, Duration, Effect, Result, Schema, type SchemaAST, SchemaIssue, SchemaTransformation } from "effect"

/** One environment variable as the README's configuration table lists it. */
export interface Variable {
  readonly name: string
  /** The README's cell: a value in backticks (`` `30s` ``), or words for what stands in for one. */
  readonly default: string
  /** The README's cell: `duration`, `flag`, `integer`, ... */
  readonly format: string
  /** The name it had before (a renamed variable still set stops start-up, naming this one). */
  readonly formerly?: string
}

/** A `Config` that also says which variable it reads, with what default and in what format. */
export type Setting<A> = Config.Config<A> & { readonly variable: Variable }

/** Attaches the README's description to a config (for the formats this module has no constructor for). */
export const describe = <A>(config: Config.Config<A>, variable: Variable): Setting<A> =>
  Object.assign(config, { variable })

/** Any setting, for the lists of them each `Config.ts` exports. */
export type AnySetting = Setting<unknown>

const code = (value: string | number) => "`" + String(value) + "`"

// ---------------------------------------------------------------------------------------------
// Durations
// ---------------------------------------------------------------------------------------------

const UNIT_MS = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const
const GRAMMAR = /^(\d{1,9})(ms|s|m|h|d)$/

/** `500ms`, `30s`, `2m`, `1h`, `7d` (spaces around it allowed) → a duration; zero is `0s`. */
export const parseDuration = (input: string): Result.Result<Duration.Duration, string> => {
  const match = GRAMMAR.exec(input.trim())
  if (match === null) return Result.fail(`"${input}" is not a duration such as 500ms, 30s, 2m, 1h or 7d`)
  return Result.succeed(Duration.millis(Number(match[1]) * UNIT_MS[match[2] as keyof typeof UNIT_MS]))
}

/** The shortest text `parseDuration` reads back as the same duration (whole milliseconds). */
export const formatDuration = (duration: Duration.Duration): string => {
  const ms = Math.round(Duration.toMillis(duration))
  for (const unit of ["d", "h", "m", "s"] as const) {
    if (ms !== 0 && ms % UNIT_MS[unit] === 0) return `${ms / UNIT_MS[unit]}${unit}`
  }
  return ms === 0 ? "0s" : `${ms}ms`
}

export interface DurationRange {
  /** Default: 1ms (a duration of zero is refused). */
  readonly min?: Duration.Duration
  readonly max?: Duration.Duration
}

export interface DurationOptions extends DurationRange {
  /**
   * The variable's name before it took the duration format (`SVC_X_MS`): still set, it fails
   * start-up with a message naming the new one, rather than being ignored without a word.
   */
  readonly formerly?: string
}

/** `parseDuration` within a range; the message says what is wrong. */
export const parseDurationIn = (input: string, range: DurationRange = {}): Result.Result<Duration.Duration, string> =>
  Result.flatMap(parseDuration(input), (duration) => {
    const min = range.min ?? Duration.millis(1)
    if (Duration.isLessThan(duration, min)) {
      return Result.fail(
        Duration.isZero(min) ? `"${input}" is negative` : `"${input}" is shorter than ${formatDuration(min)}`
      )
    }
    if (range.max !== undefined && Duration.isGreaterThan(duration, range.max)) {
      return Result.fail(`"${input}" is longer than ${formatDuration(range.max)}`)
    }
    return Result.succeed(duration)
  })

/** Text ⇄ duration in the platform's format; a bad value is a schema issue naming `name`. */
export const DurationFromText = (name: string, range: DurationRange = {}) =>
  Schema.String.pipe(
    Schema.decodeTo(
      Schema.Duration,
      SchemaTransformation.transformEffect({
        decode: (input: string, options) =>
          Result.match(parseDurationIn(input, range), {
            onSuccess: (duration) => Effect.succeed(duration),
            onFailure: (message) =>
              Effect.fail(new SchemaIssue.InvalidValue({ message: `${name}: ${message}` }, input, options))
          }),
        encode: (duration: Duration.Duration) => Effect.succeed(formatDuration(duration))
      })
    )
  )

/** A duration variable (`30s`) with its default. */
export const duration = (
  name: string,
  defaultValue: Duration.Duration,
  options: DurationOptions = {}
): Setting<Duration.Duration> => {
  const value = Config.schema(DurationFromText(name, options), name).pipe(Config.withDefault(defaultValue))
  const config = options.formerly === undefined ?
    value :
    Config.all([renamed(options.formerly, name, "a duration such as 30s"), value]).pipe(
      Config.map(([, duration]) => duration)
    )
  return describe(config, {
    name,
    default: code(formatDuration(defaultValue)),
    format: "duration",
    ...(options.formerly !== undefined ? { formerly: options.formerly } : {})
  })
}

/** Fails when the retired variable `former` is set, naming its successor. */
const renamed = (former: string, name: string, format: string): Config.Config<void> =>
  Config.option(Config.String(former)).pipe(
    Config.mapEffect((value) =>
      value._tag === "None"
        ? Effect.void
        : Effect.fail(
          new Config.ConfigError(
            new Schema.SchemaError(
              new SchemaIssue.InvalidValue({ message: `${former} was renamed ${name} (${format}); set that instead` })
            )
          )
        )
    )
  )

// ---------------------------------------------------------------------------------------------
// Numbers, flags, text
// ---------------------------------------------------------------------------------------------

/** `min` and `max` are inclusive; `above` is an exclusive minimum (a rate above zero). */
export type NumberRange =
  | { readonly min: number; readonly max?: number }
  | { readonly above: number; readonly max?: number }

const between = (range: NumberRange): readonly [SchemaAST.Check<number>, ...Array<SchemaAST.Check<number>>] => {
  const lower = "above" in range ? Schema.isGreaterThan(range.above) : Schema.isGreaterThanOrEqualTo(range.min)
  return range.max === undefined ? [lower] : [lower, Schema.isLessThanOrEqualTo(range.max)]
}

/** A whole number within `range`. */
export const integer = (name: string, defaultValue: number, range: NumberRange): Setting<number> =>
  describe(Config.schema(Schema.Int.check(...between(range)), name).pipe(Config.withDefault(defaultValue)), {
    name,
    default: code(defaultValue),
    format: "integer"
  })

/** A number (fractions allowed) within `range`. */
export const number = (name: string, defaultValue: number, range: NumberRange): Setting<number> =>
  describe(Config.schema(Schema.Finite.check(...between(range)), name).pipe(Config.withDefault(defaultValue)), {
    name,
    default: code(defaultValue),
    format: "number"
  })

/** `1`/`true` or `0`/`false`; unset is false. Anything else is refused rather than guessed. */
export const flag = (name: string): Setting<boolean> =>
  describe(
    Config.Literals(["1", "true", "0", "false"], name).pipe(
      Config.map((value) => value === "1" || value === "true"),
      Config.withDefault(false)
    ),
    { name, default: "unset", format: "flag" }
  )

/** A string (`format` names what it holds for the README: `address`, `name`, ...); an empty default shows as `empty`. */
export const text = (name: string, defaultValue: string, format = "text"): Setting<string> =>
  describe(Config.String(name).pipe(Config.withDefault(defaultValue)), {
    name,
    default: defaultValue === "" ? "empty" : code(defaultValue),
    format
  })
