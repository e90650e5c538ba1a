/**
 * One tag, one class: `Effect.catchTag("X")` matches every error whose `_tag` is "X", so two
 * classes sharing a tag would be caught by each other's handlers. And one class per wire `code`
 * (the domain's API errors), so every part of the stack answers a contract error the same way.
 * Imports every module of packages/<package>/src and apps/<app>/src but the entry points
 * (`main.ts` runs its role when imported).
 */
import { describe, expect, it } from "@effect/vitest"
import { Schema } from "effect"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { pathToFileURL } from "node:url"
import * as Errors from "../packages/domain/src/Errors.ts"

const root = Path.resolve(import.meta.dirname, "..")

const sourceModules = (): Array<string> =>
  ["packages", "apps"].flatMap((group) =>
    Fs.readdirSync(Path.join(root, group)).flatMap((pkg) => {
      const src = Path.join(root, group, pkg, "src")
      if (!Fs.existsSync(src)) return []
      return Fs.readdirSync(src, { recursive: true, encoding: "utf8" })
        .filter((file) => file.endsWith(".ts") && !file.endsWith(".d.ts") && Path.basename(file) !== "main.ts")
        .map((file) => Path.join(src, file))
    })
  )

/** A class's tag: its `_tag` schema field (TaggedError, TaggedClass) or prototype `_tag` (the API errors). */
const tagOf = (value: unknown): string | undefined => {
  if (typeof value !== "function" || value.prototype === undefined) return undefined
  const field = (value as { readonly fields?: Record<string, unknown> }).fields?.["_tag"]
  const literal = (field as { readonly ast?: { readonly literal?: unknown } } | undefined)?.ast?.literal
  if (typeof literal === "string") return literal
  const onPrototype: unknown = Reflect.get(value.prototype, "_tag")
  return typeof onPrototype === "string" ? onPrototype : undefined
}

interface Found {
  readonly cls: Function
  readonly module: string
  readonly name: string
}

/** Tags carried by more than one class, with where each class is exported. */
const sharedTags = (found: ReadonlyArray<Found & { readonly tag: string }>) => {
  const byTag = new Map<string, Map<Function, string>>()
  for (const { cls, module, name, tag } of found) {
    const classes = byTag.get(tag) ?? new Map<Function, string>()
    if (!classes.has(cls)) classes.set(cls, `${name} (${module})`)
    byTag.set(tag, classes)
  }
  return [...byTag]
    .filter(([, classes]) => classes.size > 1)
    .map(([tag, classes]) => `${tag}: ${[...classes.values()].join(", ")}`)
}

const exportedClasses = async (): Promise<Array<Found>> => {
  const found: Array<Found> = []
  for (const file of sourceModules()) {
    const module: Record<string, unknown> = await import(pathToFileURL(file).href)
    for (const [name, value] of Object.entries(module)) {
      if (typeof value === "function") found.push({ cls: value, module: Path.relative(root, file), name })
    }
  }
  return found
}

describe("error classes", () => {
  it("no two exported tagged classes share a tag", async () => {
    const tagged = (await exportedClasses()).flatMap((f) => {
      const tag = tagOf(f.cls)
      return tag === undefined ? [] : [{ ...f, tag }]
    })
    // The walk reached the errors of the domain, the driver, the bus and the URL guard.
    const tags = new Set(tagged.map((t) => t.tag))
    for (const tag of ["NotFound", "DriverFailure", "BusError", "WebhookResolveError"]) expect(tags).toContain(tag)
    expect(sharedTags(tagged)).toEqual([])
  }, 120_000)

  it("one class per wire code: the domain's API errors", async () => {
    const withCode = (await exportedClasses()).filter((f) =>
      typeof Reflect.get(f.cls, "code") === "string" && typeof Reflect.get(f.cls, "status") === "number"
    )
    const classes = new Set(withCode.map((f) => f.cls))
    expect([...classes].sort((a, b) => a.name.localeCompare(b.name))).toEqual(
      [...Errors.API_ERRORS].sort((a, b) => a.name.localeCompare(b.name))
    )
    const codes = Errors.API_ERRORS.map((c) => c.code)
    expect(new Set(codes).size).toBe(codes.length)
  }, 120_000)

  it("the check sees a shared tag", () => {
    class First extends Schema.TaggedError<First>()("Clash", { reason: Schema.String }) {}
    class Second extends Schema.TaggedError<Second>()("Clash", { error: Schema.String }) {}
    const found = [First, Second, Errors.NotFound].map((cls, i) => ({
      cls,
      module: `m${i}`,
      name: cls.name,
      tag: tagOf(cls)!
    }))
    expect(found.map((f) => f.tag)).toEqual(["Clash", "Clash", "NotFound"])
    expect(sharedTags(found)).toEqual(["Clash: First (m0), Second (m1)"])
  })
})
