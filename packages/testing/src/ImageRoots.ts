/**
 * The image archives the test suite's agents share (`debian`, then `code`), built in the
 * background by a process of their own, started when a run begins: an agent that needs one
 * meanwhile waits on the builder's lock (`Debian.ensureDebianArchive`), then finds it cached.
 * The process outlives a run that ends first (what it builds is a cache: the next run finds it,
 * or waits on its lock); a run that finds both cached starts nothing that lasts. Its output goes
 * to `prebuild.log` in the cache folder.
 *
 *   node packages/testing/src/ImageRoots.ts      builds both, one after the other
 */
import * as Debian from "@svc/host/Debian"
import { spawn } from "node:child_process"
import * as Fs from "node:fs"
import * as NodePath from "node:path"
import { fileURLToPath } from "node:url"
import { TEST_IMAGE_CACHE_DIR } from "./ImageCache.ts"

const RECIPES = [Debian.DEFAULT_RECIPE, Debian.CODE_RECIPE]

let started = false

export const prebuildImageRoots = (): void => {
  if (started) return
  started = true
  const cached = RECIPES.every((recipe) =>
    Fs.existsSync(NodePath.join(TEST_IMAGE_CACHE_DIR, `debian-${Debian.recipeKey(recipe)}.tar.sha256`))
  )
  if (cached) return
  Fs.mkdirSync(TEST_IMAGE_CACHE_DIR, { recursive: true })
  const out = Fs.openSync(NodePath.join(TEST_IMAGE_CACHE_DIR, "prebuild.log"), "a")
  const child = spawn(process.execPath, [fileURLToPath(import.meta.url)], {
    detached: true,
    stdio: ["ignore", out, out]
  })
  child.unref()
  Fs.closeSync(out)
}

const build = async () => {
  for (const recipe of RECIPES) {
    await Debian.ensureDebianArchive(
      TEST_IMAGE_CACHE_DIR,
      recipe,
      (line) => process.stdout.write(`[image roots] ${line}\n`)
    )
  }
}

if (import.meta.main) {
  build().catch((error: unknown) => {
    // The files that need the roots build them themselves and fail with the reason.
    process.stderr.write(`[image roots] not built: ${error instanceof Error ? error.message : String(error)}\n`)
    process.exitCode = 1
  })
}
