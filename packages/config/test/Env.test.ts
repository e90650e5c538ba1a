import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Duration, Effect, Exit, Result } from "effect"
import * as Env from "../src/Env.ts"

const read = <A>(setting: Env.Setting<A>, env: Record<string, string>) =>
  Effect.runSyncExit(setting.parse(ConfigProvider.fromEnv({ env })))

const value = <A>(exit: Exit.Exit<A, unknown>) => (Exit.isSuccess(exit) ? exit.value : exit)

describe("durations", () => {
  it("reads a whole number and a unit, ms to d", () => {
    const ms = (text: string) => Result.map(Env.parseDuration(text), Duration.toMillis)
    expect(ms("500ms")).toEqual(Result.succeed(500))
    expect(ms(" 30s ")).toEqual(Result.succeed(30_000))
    expect(ms("2m")).toEqual(Result.succeed(120_000))
    expect(ms("1h")).toEqual(Result.succeed(3_600_000))
    expect(ms("7d")).toEqual(Result.succeed(604_800_000))
    expect(ms("0s")).toEqual(Result.succeed(0))
    for (const bad of ["", "30", "1.5s", "1 s", "-1s", "30 seconds", "500 millis", "1w", "1S", "1234567890s"]) {
      expect(Result.isFailure(Env.parseDuration(bad)), bad).toBe(true)
    }
  })

  it("formats the shortest text that reads back the same", () => {
    for (
      const [ms, text] of [[500, "500ms"], [30_000, "30s"], [90_000, "90s"], [120_000, "2m"], [7_200_000, "2h"], [
        604_800_000,
        "7d"
      ], [0, "0s"]] as const
    ) {
      expect(Env.formatDuration(Duration.millis(ms))).toBe(text)
      expect(Result.map(Env.parseDuration(text), Duration.toMillis)).toEqual(Result.succeed(ms))
    }
  })

  it("a setting: its default, a value, a refusal naming the variable", () => {
    const setting = Env.duration("SVC_X_TIMEOUT", Duration.seconds(30), {
      min: Duration.millis(50),
      max: Duration.hours(1)
    })
    expect(setting.variable).toEqual({ name: "SVC_X_TIMEOUT", default: "`30s`", format: "duration" })
    expect(Duration.toMillis(value(read(setting, {})) as Duration.Duration)).toBe(30_000)
    expect(Duration.toMillis(value(read(setting, { SVC_X_TIMEOUT: "250ms" })) as Duration.Duration)).toBe(250)
    for (const bad of ["10ms", "2h", "30", "0s", "1 minute"]) {
      const exit = read(setting, { SVC_X_TIMEOUT: bad })
      expect(Exit.isFailure(exit), bad).toBe(true)
      expect(String(Exit.isFailure(exit) ? exit.cause : "")).toContain("SVC_X_TIMEOUT")
    }
  })
})

describe("other formats", () => {
  it("integers and numbers within a range", () => {
    const count = Env.integer("SVC_X_COUNT", 16, { min: 1, max: 100 })
    expect(count.variable).toEqual({ name: "SVC_X_COUNT", default: "`16`", format: "integer" })
    expect(value(read(count, {}))).toBe(16)
    expect(value(read(count, { SVC_X_COUNT: "3" }))).toBe(3)
    for (const bad of ["0", "101", "1.5", "two"]) {
      expect(Exit.isFailure(read(count, { SVC_X_COUNT: bad })), bad).toBe(true)
    }
    const ratio = Env.number("SVC_X_RATIO", 8, { min: 1 })
    expect(value(read(ratio, { SVC_X_RATIO: "1.5" }))).toBe(1.5)
    expect(Exit.isFailure(read(ratio, { SVC_X_RATIO: "0.5" }))).toBe(true)
  })

  it("flags: 1/true or 0/false, unset or empty is false, anything else refused", () => {
    const setting = Env.flag("SVC_X_ALLOW")
    expect(setting.variable).toEqual({ name: "SVC_X_ALLOW", default: "unset", format: "flag" })
    for (
      const [text, expected] of [["1", true], ["true", true], ["0", false], ["false", false], ["", false]] as const
    ) {
      expect(value(read(setting, { SVC_X_ALLOW: text }))).toBe(expected)
    }
    expect(value(read(setting, {}))).toBe(false)
    for (const bad of ["yes", "on", "maybe", "TRUE"]) {
      expect(Exit.isFailure(read(setting, { SVC_X_ALLOW: bad })), bad).toBe(true)
    }
  })

  it("text, an empty default shown as `empty`", () => {
    expect(Env.text("SVC_X_PREFIX", "").variable.default).toBe("empty")
    expect(Env.text("SVC_X_HOST", "127.0.0.1").variable.default).toBe("`127.0.0.1`")
    expect(value(read(Env.text("SVC_X_HOST", "127.0.0.1"), { SVC_X_HOST: "0.0.0.0" }))).toBe("0.0.0.0")
  })
})

describe("renamed variables", () => {
  it("a duration's former name, still set, fails naming the new one", () => {
    const setting = Env.duration("SVC_X_WAIT", Duration.seconds(30), { formerly: "SVC_X_WAIT_MS" })
    expect(setting.variable).toEqual({
      name: "SVC_X_WAIT",
      default: "`30s`",
      format: "duration",
      formerly: "SVC_X_WAIT_MS"
    })
    expect(Duration.toMillis(value(read(setting, {})) as Duration.Duration)).toBe(30_000)
    expect(Duration.toMillis(value(read(setting, { SVC_X_WAIT: "2s" })) as Duration.Duration)).toBe(2_000)
    for (const env of [{ SVC_X_WAIT_MS: "1500" }, { SVC_X_WAIT_MS: "1500", SVC_X_WAIT: "2s" }]) {
      const exit = read(setting, env)
      expect(Exit.isFailure(exit)).toBe(true)
      expect(String(Exit.isFailure(exit) ? exit.cause : "")).toContain("SVC_X_WAIT_MS was renamed SVC_X_WAIT")
    }
  })
})
