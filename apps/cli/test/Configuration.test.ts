/**
 * The configuration as the code reads it against the README's table: every variable a role
 * reads is a row with its default, format and readers, and no row names anything else. And the
 * rules that keep it so: a setting reads its own variable (and a renamed one's former name) and
 * nothing else; variables are read only in `Config.ts` modules, each in one of them; no source
 * reads `process.env`.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Agent from "@svc/agent/Config"
import * as Api from "@svc/api/Config"
import type * as Env from "@svc/config/Env"
import * as Dispatcher from "@svc/dispatcher/Config"
import * as Runtime from "@svc/runtime/Config"
import { ConfigProvider, Effect } from "effect"
import * as Fs from "node:fs"
import * as Path from "node:path"
import * as Cli from "../src/Config.ts"

const root = Path.resolve(import.meta.dirname, "../../..")

/** Who reads what, in the README's order of readers. */
const readers: ReadonlyArray<readonly [string, ReadonlyArray<Env.AnySetting>]> = [
  ["api", Api.settings],
  ["runtime", Runtime.settings],
  ["dispatcher", Dispatcher.settings],
  ["agent", Agent.settings],
  ["svc dev", Cli.devSettings],
  ["svc", Cli.commandSettings]
]

interface Row {
  readonly name: string
  readonly default: string
  readonly format: string
  readonly readBy: string
}

const fromCode = (): Map<string, Row & { readonly setting: Env.AnySetting }> => {
  const rows = new Map<string, Row & { readonly setting: Env.AnySetting }>()
  for (const [reader, settings] of readers) {
    for (const setting of settings) {
      const { name } = setting.variable
      const row = rows.get(name)
      // One variable, one setting: two roles reading it read the same definition.
      if (row !== undefined) expect(row.setting, name).toBe(setting)
      rows.set(name, {
        name,
        default: setting.variable.default,
        format: setting.variable.format,
        readBy: row === undefined ? reader : `${row.readBy}, ${reader}`,
        setting
      })
    }
  }
  return rows
}

const fromReadme = (): Map<string, Row> => {
  const text = Fs.readFileSync(Path.join(root, "README.md"), "utf8")
  const section = text.slice(
    text.indexOf("\n## Configuration\n"),
    text.indexOf("\n## ", text.indexOf("\n## Configuration\n") + 1)
  )
  const rows = new Map<string, Row>()
  for (const line of section.split("\n")) {
    if (!line.startsWith("| `")) continue
    // Cells may be padded (the formatter aligns the columns); none holds a `|`.
    const cells = line.slice(1, -1).split("|").map((cell) => cell.trim())
    const name = /^`([A-Z][A-Z0-9_]*)`$/.exec(cells[0]!)?.[1]
    expect(name, `a row names one variable: ${line}`).toBeDefined()
    expect(rows.has(name!), `${name} has one row`).toBe(false)
    rows.set(name!, { name: name!, default: cells[1]!, format: cells[2]!, readBy: cells[3]! })
  }
  return rows
}

/** A provider over `env` that notes every variable asked for. */
const recording = (env: Record<string, string>) => {
  const asked = new Set<string>()
  const base = ConfigProvider.fromEnv({ env })
  const provider = ConfigProvider.make((path) => {
    asked.add(path.join("_"))
    return base.load(path)
  })
  return { provider, asked }
}

/** Source files of the apps and packages (tests, benchmarks and dependencies aside). */
const sources = (): ReadonlyArray<string> => {
  const out: Array<string> = []
  const walk = (dir: string) => {
    for (const entry of Fs.readdirSync(dir, { withFileTypes: true })) {
      const full = Path.join(dir, entry.name)
      if (entry.isDirectory()) walk(full)
      else if (entry.name.endsWith(".ts")) out.push(full)
    }
  }
  for (const group of ["apps", "packages"]) {
    for (const name of Fs.readdirSync(Path.join(root, group))) {
      const src = Path.join(root, group, name, "src")
      if (Fs.existsSync(src)) walk(src)
    }
  }
  return out
}

describe("configuration", () => {
  it("the README's table lists every variable as the code reads it: default, format, who reads it", () => {
    const code = fromCode()
    const readme = fromReadme()
    expect([...readme.keys()].sort()).toEqual([...code.keys()].sort())
    for (const [name, row] of code) {
      expect(readme.get(name), name).toEqual({ name, default: row.default, format: row.format, readBy: row.readBy })
    }
  })

  it("each setting reads its own variable, and a renamed one its former name, nothing else", () =>
    Effect.gen(function*() {
      for (const row of fromCode().values()) {
        const { provider, asked } = recording({})
        yield* Effect.exit(row.setting.parse(provider))
        const { formerly } = row.setting.variable
        expect([...asked].sort(), row.name).toEqual(formerly === undefined ? [row.name] : [row.name, formerly].sort())
      }
    }).pipe(Effect.runPromise))

  it("the README names the former name of each renamed variable", () => {
    const text = Fs.readFileSync(Path.join(root, "README.md"), "utf8")
    for (const row of fromCode().values()) {
      const { formerly } = row.setting.variable
      if (formerly !== undefined) expect(text, formerly).toContain("`" + formerly + "`")
    }
  })

  it("variables are read only in Config.ts modules, each in one, and never from process.env", () => {
    const definedIn = new Map<string, string>()
    for (const file of sources()) {
      const text = Fs.readFileSync(file, "utf8")
      const relative = Path.relative(root, file)
      const isConfigModule = Path.basename(file) === "Config.ts" || relative === "packages/config/src/Env.ts"
      // The test harness (its servers, the run's keys) and the PATH lookup of local servers aside.
      if (!relative.startsWith("packages/testing/") && !relative.startsWith("packages/local-servers/")) {
        expect(/process\.env/.test(text), `${relative} reads process.env`).toBe(false)
      }
      const reads =
        /\bConfig\.(String|NonEmptyString|Number|Finite|Int|Literal|Literals|Boolean|Duration|Port|Redacted|URL|Schema|schema|Array|Record)\(/
      if (!isConfigModule) expect(reads.test(text), `${relative} reads a variable outside a Config.ts`).toBe(false)
      if (isConfigModule) {
        for (const [, name] of text.matchAll(/"((?:SVC|NATS|DATABASE|OTEL)_[A-Z0-9_]+)"/g)) {
          const other = definedIn.get(name!)
          expect(other === undefined || other === relative, `${name} is read in ${other} and ${relative}`).toBe(true)
          definedIn.set(name!, relative)
        }
      }
    }
    // Each variable of the table is read somewhere (a Config.ts names it).
    for (const name of fromCode().keys()) expect(definedIn.has(name), name).toBe(true)
  })
})
