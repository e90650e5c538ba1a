/**
 * The template bench/tti.ts measures: `debian` plus Debian's own `nodejs` (bookworm's 18.x). The
 * packages the debian root lacks are fetched on this machine with `apt-get download` (cached in
 * .svc/cache/debs-nodejs), written into a `debian` sandbox and installed with `dpkg -i`, and the
 * sandbox is snapshotted as `debian-nodejs`. Also the same `node` run on the host, for its floor.
 */
import { TEST_IMAGE_CACHE_DIR } from "@svc/testing/ImageCache"
import { execFileSync } from "node:child_process"
import * as FsSync from "node:fs"
import * as Fs from "node:fs/promises"
import * as Os from "node:os"
import * as NodePath from "node:path"
import type { Svc } from "../../packages/sdk/src/index.ts"
import { fmt } from "./Measure.ts"

export const NODE_TEMPLATE = "debian-nodejs"
const DEBS_DIR = NodePath.join(TEST_IMAGE_CACHE_DIR, "..", "debs-nodejs")
// bookworm's nodejs and what the debian root lacks of its dependencies (apt-cache depends --recurse).
const DEBS = [
  "nodejs",
  "libnode108",
  "libuv1",
  "libc-ares2",
  "libicu72",
  "node-acorn",
  "node-busboy",
  "node-cjs-module-lexer",
  "node-undici",
  "node-xtend"
]

/** The packages' files, fetched with `apt-get download` unless cached. */
export const ensureDebs = async (log: (line: string) => void): Promise<ReadonlyArray<string>> => {
  await Fs.mkdir(DEBS_DIR, { recursive: true })
  const have = () => FsSync.readdirSync(DEBS_DIR).filter((f) => f.endsWith(".deb"))
  if (DEBS.some((name) => !have().some((f) => f.startsWith(`${name}_`)))) {
    log(`apt-get download ${DEBS.join(" ")} (bookworm's packages, into ${DEBS_DIR})`)
    // bookworm's own nodejs, not a third-party repository's newer one the host may prefer.
    const version = execFileSync("apt-cache", ["madison", "libnode108"], { encoding: "utf8" }).split("|")[1]!.trim()
    execFileSync("apt-get", ["download", ...DEBS.map((d) => d === "nodejs" ? `nodejs=${version}` : d)], {
      cwd: DEBS_DIR,
      stdio: ["ignore", "ignore", "inherit"]
    })
  }
  return have().map((f) => NodePath.join(DEBS_DIR, f))
}

/** The template `debian-nodejs`, built unless it is ready: the packages installed in a `debian` sandbox, snapshotted. */
export const buildTemplate = async (svc: Svc, debs: ReadonlyArray<string>, log: (line: string) => void) => {
  const existing = await svc.templates.get(NODE_TEMPLATE).catch(() => undefined)
  if (existing?.state === "ready") return
  const t0 = performance.now()
  const sandbox = await svc.sandboxes.create({ template: "debian", ram_mb: 512 }, { timeoutMs: 600_000 })
  try {
    await sandbox.exec("mkdir -p /tmp/debs")
    for (const file of debs) {
      await sandbox.files.write(`/tmp/debs/${NodePath.basename(file)}`, new Uint8Array(await Fs.readFile(file)))
    }
    const installed = await sandbox.exec("dpkg -i /tmp/debs/*.deb && rm -rf /tmp/debs && node -v", {
      timeoutMs: 300_000
    })
    if (installed.exit_code !== 0) throw new Error(`dpkg -i: ${installed.stdout}\n${installed.stderr}`)
    await sandbox.snapshot(NODE_TEMPLATE, { timeoutMs: 600_000 })
    log(
      `template ${NODE_TEMPLATE} (node ${installed.stdout.trim().split("\n").at(-1)}) ready in ${
        fmt((performance.now() - t0) / 1000, 1)
      } s`
    )
  } finally {
    await sandbox.delete().catch(() => undefined)
  }
}

/** The template's `node` binary run on the host (its libraries from the same packages), `node -v` ms. */
export const hostNodeTimes = async (debs: ReadonlyArray<string>, runs: number) => {
  const dir = await Fs.mkdtemp(NodePath.join(Os.tmpdir(), "svc-bench-node-"))
  try {
    for (const deb of debs) execFileSync("dpkg-deb", ["-x", deb, dir])
    const env = { LD_LIBRARY_PATH: NodePath.join(dir, "usr/lib/x86_64-linux-gnu"), PATH: "/usr/bin:/bin" }
    const bin = NodePath.join(dir, "usr/bin/node")
    execFileSync(bin, ["-v"], { env })
    const times: Array<number> = []
    for (let i = 0; i < runs; i++) {
      const t0 = performance.now()
      execFileSync(bin, ["-v"], { env })
      times.push(performance.now() - t0)
    }
    return times
  } finally {
    await Fs.rm(dir, { recursive: true, force: true })
  }
}
