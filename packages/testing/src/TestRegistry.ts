/**
 * A real OCI registry for tests and benchmarks: Debian's `docker-registry` (the CNCF
 * distribution registry) on loopback, with TLS from a throwaway CA (`Tls.ts`: its certificate
 * names `localhost`, 127.0.0.1 and the `name` given) and, when `auth` is set, htpasswd basic auth (bcrypt, from
 * `htpasswd`), storing its blobs under a temporary folder. Images are made by the tests as OCI
 * layouts (`ImageSpec`: layers from folders, whiteout files written as OCI names them, the
 * config given) and pushed with `skopeo copy`. `blobFile` names where a blob's bytes are stored,
 * so a test can tamper with one behind the registry's back.
 */
import { Effect } from "effect"
import { execFile, execFileSync, spawn } from "node:child_process"
import { createHash } from "node:crypto"
import * as Fs from "node:fs"
import * as Net from "node:net"
import * as Os from "node:os"
import * as Path from "node:path"
import { promisify } from "node:util"
import { freePort } from "./TestProcess.ts"
import { makeTestCertificates, type TestCertificates } from "./Tls.ts"

const run = promisify(execFile)

export interface TestRegistry {
  /** `<name>:<port>` (`localhost` without a name): what image references name. */
  readonly host: string
  readonly port: number
  readonly certificates: TestCertificates
  /** Where the registry keeps a blob's bytes (`sha256:<hex>`). */
  readonly blobFile: (digest: string) => string
  /** Pushes an OCI layout's `tag` as `repository:tag`. */
  readonly push: (layout: string, tag: string, repository: string) => Effect.Effect<void>
}

/** A layer: files (path → content, or a folder when the content is null) and their modes. */
export type LayerSpec = FilesLayer | RawLayer

export interface FilesLayer {
  readonly files: Readonly<Record<string, string | Uint8Array | null>>
  readonly modes?: Readonly<Record<string, number>>
  /** Owners (`uid:gid`) of some paths; the rest are 0:0. */
  readonly owners?: Readonly<Record<string, string>>
}

/** A layer given as its gzip blob (what no `tar` writes: a decompression bomb), and its tar's sha256. */
export interface RawLayer {
  readonly gzip: Buffer
  readonly diffId: string
}

export interface ImageSpec {
  readonly layers: ReadonlyArray<LayerSpec>
  readonly config?: {
    readonly Env?: ReadonlyArray<string>
    readonly WorkingDir?: string
    readonly User?: string
    readonly Entrypoint?: ReadonlyArray<string>
    readonly Cmd?: ReadonlyArray<string>
    readonly ExposedPorts?: Record<string, object>
  }
  readonly architecture?: string
}

const sha256 = (bytes: Buffer | string) => createHash("sha256").update(bytes).digest("hex")

/** Writes `image` as an OCI layout under `dir` with `tag`; its manifest digest. */
export const writeOciLayout = (dir: string, tag: string, image: ImageSpec): string => {
  const blobs = Path.join(dir, "blobs", "sha256")
  Fs.mkdirSync(blobs, { recursive: true })
  const put = (bytes: Buffer | string) => {
    const hex = sha256(bytes)
    Fs.writeFileSync(Path.join(blobs, hex), bytes)
    return { digest: `sha256:${hex}`, size: Buffer.byteLength(bytes) }
  }
  const layers: Array<{ mediaType: string; digest: string; size: number }> = []
  const diffIds: Array<string> = []
  for (const layer of image.layers) {
    if ("gzip" in layer) {
      diffIds.push(layer.diffId)
      layers.push({ mediaType: "application/vnd.oci.image.layer.v1.tar+gzip", ...put(layer.gzip) })
      continue
    }
    const root = Fs.mkdtempSync(Path.join(Os.tmpdir(), "svc-oci-layer-"))
    try {
      for (const [path, content] of Object.entries(layer.files)) {
        const target = Path.join(root, path)
        if (content === null) Fs.mkdirSync(target, { recursive: true })
        else {
          Fs.mkdirSync(Path.dirname(target), { recursive: true })
          Fs.writeFileSync(target, content)
        }
        const mode = layer.modes?.[path]
        if (mode !== undefined) Fs.chmodSync(target, mode)
      }
      const owners = Object.entries(layer.owners ?? {})
      for (const [path, owner] of owners) {
        const [uid, gid] = owner.split(":").map(Number)
        Fs.lchownSync(Path.join(root, path), uid!, gid!)
      }
      const tar = execFileSync("tar", [
        "--create",
        "--sort=name",
        "--numeric-owner",
        "--mtime=@0",
        "--format=pax",
        "--pax-option=delete=atime,delete=ctime",
        "--directory",
        root,
        "."
      ], { maxBuffer: 1024 * 1024 * 1024 })
      diffIds.push(`sha256:${sha256(tar)}`)
      const gz = execFileSync("gzip", ["-n", "-1"], { input: tar, maxBuffer: 1024 * 1024 * 1024 })
      layers.push({ mediaType: "application/vnd.oci.image.layer.v1.tar+gzip", ...put(gz) })
    } finally {
      Fs.rmSync(root, { recursive: true, force: true })
    }
  }
  const config = put(JSON.stringify({
    architecture: image.architecture ?? "amd64",
    os: "linux",
    config: image.config ?? {},
    rootfs: { type: "layers", diff_ids: diffIds }
  }))
  const manifest = put(JSON.stringify({
    schemaVersion: 2,
    mediaType: "application/vnd.oci.image.manifest.v1+json",
    config: { mediaType: "application/vnd.oci.image.config.v1+json", ...config },
    layers
  }))
  Fs.writeFileSync(Path.join(dir, "oci-layout"), JSON.stringify({ imageLayoutVersion: "1.0.0" }))
  const indexFile = Path.join(dir, "index.json")
  const index = Fs.existsSync(indexFile)
    ? JSON.parse(Fs.readFileSync(indexFile, "utf8"))
    : { schemaVersion: 2, manifests: [] }
  index.manifests = index.manifests.filter((m: any) => m.annotations?.["org.opencontainers.image.ref.name"] !== tag)
  index.manifests.push({
    mediaType: "application/vnd.oci.image.manifest.v1+json",
    ...manifest,
    annotations: { "org.opencontainers.image.ref.name": tag }
  })
  Fs.writeFileSync(indexFile, JSON.stringify(index))
  return manifest.digest
}

/** Starts a registry; `auth` makes every pull and push need that user and password. */
export const startTestRegistry = (
  options: {
    readonly auth?: { readonly user: string; readonly password: string }
    /** The name images reference it by (its certificate names it; resolve it to 127.0.0.1). */
    readonly name?: string
  } = {}
) =>
  Effect.gen(function*() {
    const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "svc-registry-"))
    yield* Effect.addFinalizer(() => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true })))
    const certificates = makeTestCertificates(Path.join(dir, "tls"), options.name !== undefined ? [options.name] : [])
    const port = yield* freePort
    const htpasswd = Path.join(dir, "htpasswd")
    if (options.auth !== undefined) {
      const line = execFileSync("htpasswd", ["-Bbn", options.auth.user, options.auth.password], { encoding: "utf8" })
      Fs.writeFileSync(htpasswd, line.trim() + "\n")
    }
    const config = Path.join(dir, "config.yml")
    Fs.writeFileSync(
      config,
      [
        "version: 0.1",
        "log:",
        "  level: error",
        "storage:",
        "  filesystem:",
        `    rootdirectory: ${Path.join(dir, "data")}`,
        "http:",
        `  addr: 127.0.0.1:${port}`,
        "  tls:",
        `    certificate: ${certificates.serverCertFile}`,
        `    key: ${certificates.serverKeyFile}`,
        ...(options.auth !== undefined
          ? ["auth:", "  htpasswd:", "    realm: svc-test", `    path: ${htpasswd}`]
          : []),
        ""
      ].join("\n")
    )
    const child = yield* Effect.acquireRelease(
      Effect.sync(() =>
        spawn("setpriv", ["--pdeathsig", "SIGKILL", "--", "docker-registry", "serve", config], {
          stdio: ["ignore", "ignore", "pipe"]
        })
      ),
      (child) =>
        Effect.promise(() =>
          new Promise<void>((resolve) => {
            if (child.exitCode !== null || child.signalCode !== null) return resolve()
            child.once("exit", () => resolve())
            child.kill("SIGKILL")
          })
        )
    )
    let stderr = ""
    child.stderr?.on("data", (chunk) => (stderr = (stderr + String(chunk)).slice(-4000)))
    // Ready once it accepts connections.
    const deadline = Date.now() + 20_000
    for (;;) {
      const open = yield* Effect.promise(() =>
        new Promise<boolean>((resolve) => {
          const socket = Net.connect(port, "127.0.0.1")
          socket.once("connect", () => (socket.destroy(), resolve(true)))
          socket.once("error", () => resolve(false))
        })
      )
      if (open) break
      if (child.exitCode !== null || Date.now() > deadline) {
        return yield* Effect.die(new Error(`docker-registry did not start: ${stderr}`))
      }
      yield* Effect.sleep("50 millis")
    }
    const host = `${options.name ?? "localhost"}:${port}`
    return {
      host,
      port,
      certificates,
      blobFile: (digest) => {
        const hex = digest.replace(/^sha256:/, "")
        return Path.join(dir, "data", "docker", "registry", "v2", "blobs", "sha256", hex.slice(0, 2), hex, "data")
      },
      push: (layout, tag, repository) =>
        Effect.promise(() =>
          run("skopeo", [
            "copy",
            "--quiet",
            "--dest-tls-verify=false",
            ...(options.auth !== undefined ? ["--dest-creds", `${options.auth.user}:${options.auth.password}`] : []),
            `oci:${layout}:${tag}`,
            `docker://localhost:${port}/${repository}`
          ], { env: { PATH: process.env["PATH"] ?? "/usr/bin:/bin", HOME: dir } })
        ).pipe(Effect.asVoid)
    } satisfies TestRegistry
  })
