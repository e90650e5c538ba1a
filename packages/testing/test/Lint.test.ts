/**
 * The workspace passes the checks of the Effect repositories (`pnpm lint`): oxlint with their rule
 * set, dprint's formatting, and the Effect language service's diagnostics; and no package declares
 * a dependency that nothing uses. `pnpm lint:fix` fixes what can be fixed by machine.
 */
import { expect, it } from "@effect/vitest"
import { spawnSync } from "node:child_process"
import * as path from "node:path"
import { unusedDependencies } from "../src/Dependencies.ts"

const root = path.resolve(import.meta.dirname, "../../..")

/**
 * The tool's report when it fails, "" when it passes (the report is the useful failure message).
 * Generous time: dprint compiles its plugins on a first run (about a minute on a busy machine).
 */
const problems = (bin: string, args: ReadonlyArray<string>) => {
  const result = spawnSync(path.join(root, "node_modules", ".bin", bin), args, { cwd: root, encoding: "utf8" })
  if (result.error !== undefined) return `${bin} did not run: ${result.error.message}`
  return result.status === 0
    ? ""
    : `${bin} ${args.join(" ")} exited ${result.status}:\n${result.stdout}${result.stderr}`
}

it("oxlint finds no problem", () => {
  expect(problems("oxlint", ["-f", "unix"])).toBe("")
}, 300_000)

it("every file is formatted as dprint formats it (pnpm format)", () => {
  expect(problems("dprint", ["check", "--list-different"])).toBe("")
}, 300_000)

it("the Effect language service reports no error or warning", () => {
  const project = path.join(root, "tsconfig.json")
  // Suggestions ("message" severity) are hints, not problems.
  const args = ["diagnostics", "--project", project, "--strict", "--severity", "error,warning", "--format", "text"]
  expect(problems("effect-tsgo", args)).toBe("")
}, 300_000)

it("every declared dependency is used", () => {
  expect(unusedDependencies(root)).toEqual([])
})
