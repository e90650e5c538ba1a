/**
 * The dashboard's build: the first load stays under its budget of JavaScript (gzipped), the
 * terminal (xterm.js) and the notebook are not part of it, a build is redone only when its inputs
 * change, the weight is measured over what the page really loads, and the browser code
 * typechecks.
 */
import { expect, it } from "@effect/vitest"
import { spawnSync } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { BUDGET_BYTES, ensureBuilt, isFresh, measure, PACKAGE } from "../scripts/build.ts"

const root = Path.resolve(PACKAGE, "../..")

it("the first load is under 200 KB of JavaScript gzipped, without the terminal or the notebook", async () => {
  await ensureBuilt({ quiet: true })
  expect(isFresh()).toBe(true)
  const weight = measure()
  expect(weight.firstLoad.length).toBeGreaterThan(0)
  expect(BUDGET_BYTES).toBe(200 * 1024)
  expect(weight.firstLoadGzip).toBeGreaterThan(0)
  expect(weight.firstLoadGzip, JSON.stringify(weight.firstLoad)).toBeLessThan(BUDGET_BYTES)
  // xterm.js is a chunk of its own, fetched when a terminal opens; the notebook too.
  expect(weight.firstLoad.map((f) => f.file).join(" ")).not.toMatch(/Terminal/)
  expect(weight.firstLoad.map((f) => f.file).join(" ")).not.toMatch(/Notebook/)
  expect(weight.totalGzip).toBeGreaterThan(weight.firstLoadGzip)
  // Built again only when something changed.
  expect(await ensureBuilt({ quiet: true })).toBe(false)
}, 300_000)

it("measures what the page loads: its scripts and what they import statically, not dynamic imports", () => {
  const dist = Fs.mkdtempSync(Path.join(Os.tmpdir(), "svc-dashboard-weight-"))
  try {
    Fs.mkdirSync(Path.join(dist, "assets"))
    Fs.writeFileSync(
      Path.join(dist, "index.html"),
      `<script type="module" crossorigin src="/assets/entry.js"></script>` +
        `<link rel="modulepreload" crossorigin href="/assets/preloaded.js">`
    )
    const big = (n: number) => `export const x=${JSON.stringify("a".repeat(n))};`
    Fs.writeFileSync(
      Path.join(dist, "assets", "entry.js"),
      `import{a as b}from"./shared.js";const t=()=>import("./lazy.js");export{t};` + big(10)
    )
    Fs.writeFileSync(Path.join(dist, "assets", "shared.js"), `export*from"./deeper.js";` + big(10))
    Fs.writeFileSync(Path.join(dist, "assets", "deeper.js"), big(10))
    Fs.writeFileSync(Path.join(dist, "assets", "preloaded.js"), big(10))
    Fs.writeFileSync(Path.join(dist, "assets", "lazy.js"), big(50_000))
    const weight = measure(dist)
    expect(weight.firstLoad.map((f) => f.file).sort()).toEqual([
      "assets/deeper.js",
      "assets/entry.js",
      "assets/preloaded.js",
      "assets/shared.js"
    ])
    expect(weight.totalGzip).toBeGreaterThan(weight.firstLoadGzip)
  } finally {
    Fs.rmSync(dist, { recursive: true, force: true })
  }
})

it("the dashboard's browser code typechecks (its own project: DOM types, Preact's JSX)", () => {
  const tsc = Path.join(root, "node_modules", ".bin", "tsc")
  const result = spawnSync(tsc, ["-p", Path.join(PACKAGE, "tsconfig.json"), "--noEmit", "--pretty", "false"], {
    cwd: root,
    encoding: "utf8"
  })
  expect(result.stdout + result.stderr).toBe("")
  expect(result.status).toBe(0)
}, 120_000)
