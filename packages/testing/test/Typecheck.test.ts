/** The whole workspace typechecks (strict), as part of the tests. */
import { expect, it } from "@effect/vitest"
import { spawnSync } from "node:child_process"
import * as path from "node:path"

const root = path.resolve(import.meta.dirname, "../../..")

it("tsc finds no error in the workspace", () => {
  const tsc = path.join(root, "node_modules", ".bin", "tsc")
  const result = spawnSync(tsc, ["-p", path.join(root, "tsconfig.json"), "--noEmit", "--pretty", "false"], {
    cwd: root,
    encoding: "utf8"
  })
  // The compiler's own report is the most useful failure message.
  expect(result.stdout + result.stderr).toBe("")
  expect(result.status).toBe(0)
}, 120_000)
