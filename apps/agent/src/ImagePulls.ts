/**
 * Pulls of OCI images for template builds (`TemplateImages.build` with an `image`): the manifest
 * for linux/amd64 and its config from the registry (@svc/host/Oci/Registry, with the build's
 * registry secret opened here, in memory, and offered only to the hosts its `allowed_hosts`
 * names), then each layer blob: taken from the layer cache when a blob of that digest became a
 * layer before (the image store has it: no registry download), otherwise pulled in one stream
 * (@svc/host/Oci/Pull): rewritten as a platform layer while it downloads, that layer sent to the
 * image store as chunks no object names yet and extracted here into a hidden folder at the same
 * time, and named (the store's object meta published, the folder moved into place) only once the
 * blob matched its digest. Two builds on this host pulling one blob share the pull.
 */
import { beginContentPut, type ObjectStore } from "@svc/bus/Objects"
import { SecretBox } from "@svc/crypto/SecretBox"
import { allowedRules } from "@svc/domain/Address"
import { parseImageReference } from "@svc/domain/ImageReference"
import { parseSecretDestination, secretDestinationMatches } from "@svc/domain/Secret"
import { hostsFileReader } from "@svc/egress/HostsFile"
import { secretValueAad } from "@svc/host-protocol/Egress"
import { type BuildImage, type BuildImageSource, ociLayerCacheKey } from "@svc/host-protocol/Images"
import { MAX_LAYERS } from "@svc/host/Driver"
import { LAYER_HEX, layerDir, type LayerImport } from "@svc/host/ImageLayers"
import * as OciConfig from "@svc/host/Oci/Config"
import { ImageConfigBlob, runConfigOf } from "@svc/host/Oci/ImageConfig"
import { pullLayer } from "@svc/host/Oci/Pull"
import { credentialOf, openRegistry, PullError } from "@svc/host/Oci/Registry"
import { Duration, Effect, Result, Schema } from "effect"
import * as Fs from "node:fs/promises"
import * as NodePath from "node:path"

const MIB = 1024 * 1024

/** A pull failed; `message` is the build's `errorMessage` (never a credential). */
export class ImagePullFailed extends Schema.TaggedError<ImagePullFailed>()("ImagePullFailed", {
  message: Schema.String
}) {}
const LAYER_CONCURRENCY = 3
/**
 * Chunks of a layer in the store: each is one JetStream publish and its ack (a few in flight at
 * once, `beginContentPut`); the library's 128 KiB made an upload a chain of round trips
 * (bench/images.ts). Just under NATS's default max_payload (1 MiB; lowered to a smaller server's
 * own). Readers take whatever size the chunks are.
 */
export const LAYER_STORE_CHUNK_BYTES = 1020 * 1024
const decodeConfig = Schema.decodeUnknownResult(Schema.fromJsonString(ImageConfigBlob))

export interface PulledImage {
  /** The platform layers, bottom first. */
  readonly layers: ReadonlyArray<string>
  readonly env: Readonly<Record<string, string>>
  readonly image: BuildImage
  /** The image's own, for a Dockerfile's CMD or ENTRYPOINT to replace one of. */
  readonly entrypoint: ReadonlyArray<string> | null
  readonly cmd: ReadonlyArray<string> | null
}

/** What of the layer cache (a KV bucket) pulls use. */
export interface LayerCacheKv {
  get(key: string): Promise<{ readonly operation: string; string(): string } | null>
  put(key: string, value: Uint8Array): Promise<unknown>
}

export interface ImagePullDeps {
  readonly dataDir: string
  readonly layerCache: LayerCacheKv
  readonly openStore: Effect.Effect<ObjectStore, unknown>
  /** Each layer extracted here, pulled from the store when absent. */
  readonly ensureLayers: (layers: ReadonlyArray<string>) => Effect.Effect<void, { readonly message: string }>
  /** A layer extracted here as it arrives, put in place by its `commit` (`ImageLayers.beginLayerImport`). */
  readonly beginImport: Effect.Effect<LayerImport, { readonly message: string }>
}

/** A file's content in the topmost layer that has it: text, null (removed there), undefined. */
const topmost = async (dataDir: string, layers: ReadonlyArray<string>, path: string) => {
  for (const hex of [...layers].reverse()) {
    const file = NodePath.join(layerDir(dataDir, hex), path)
    const st = await Fs.lstat(file).catch(() => undefined)
    if (st === undefined) continue
    if (st.isCharacterDevice() || !st.isFile()) return null
    return st.size > MIB ? null : await Fs.readFile(file, "utf8")
  }
  return undefined
}

export const make = (deps: ImagePullDeps) =>
  Effect.gen(function*() {
    const box = yield* SecretBox
    const allowed = allowedRules(yield* OciConfig.RegistryAllowedSubnets)
    const caFile = yield* OciConfig.RegistryCaFile
    const hostsFile = yield* OciConfig.RegistryHostsFile
    const hosts = hostsFileReader(hostsFile)
    const imageMax = (yield* OciConfig.ImageMaxMb) * MIB
    const layerMax = (yield* OciConfig.ImageLayerMaxMb) * MIB
    const stallMs = Duration.toMillis(yield* OciConfig.ImagePullStallTimeout)
    const extraCa = caFile === "" ? [] : yield* Effect.promise(() => Fs.readFile(caFile, "utf8")).pipe(
      Effect.map((pem) => [pem])
    )
    /** Blob digest → the pull of it running now on this host. */
    const inFlight = new Map<string, Promise<{ hex: string; bytes: number }>>()

    const cached = (digest: string) =>
      Effect.gen(function*() {
        const entry = yield* Effect.tryPromise(() => deps.layerCache.get(ociLayerCacheKey(digest))).pipe(
          Effect.orElseSucceed(() => null)
        )
        const hex = entry?.operation === "PUT" ? entry.string() : ""
        if (!LAYER_HEX.test(hex)) return undefined
        const stored = yield* deps.openStore.pipe(
          Effect.flatMap((objects) => Effect.tryPromise(() => objects.info(hex))),
          Effect.map((info) => info !== null),
          Effect.orElseSucceed(() => false)
        )
        if (!stored) return undefined
        const present = yield* Effect.result(deps.ensureLayers([hex]))
        return present._tag === "Success" ? hex : undefined
      })

    const pull = Effect.fn("ImagePulls.pull")(function*(source: BuildImageSource, log: (line: string) => void) {
      const parsed = parseImageReference(source.ref)
      if (Result.isFailure(parsed)) {
        return yield* Effect.fail(new ImagePullFailed({ message: `image: ${parsed.failure}` }))
      }
      const ref = parsed.success
      const value = source.secret === undefined
        ? undefined
        : yield* box.open(source.secret.sealedValue, secretValueAad(source.secret.id)).pipe(
          Effect.mapError(() => new ImagePullFailed({ message: "the registry secret does not open on this host" }))
        )
      const destinations = (source.secret?.allowedHosts ?? [])
        .map(parseSecretDestination)
        .filter(Result.isSuccess)
        .map((r) => r.success)
      const session = openRegistry(ref, {
        allowed,
        hosts: hosts(),
        extraCa,
        stallMs,
        credential: value === undefined ? undefined : credentialOf(value),
        mayAuthenticate: (host, port) =>
          destinations.some((entry) => secretDestinationMatches(entry, { scheme: "https", host, port }))
      })
      const attempt = <A>(what: () => Promise<A>) =>
        Effect.tryPromise({
          try: what,
          catch: (e) => new ImagePullFailed({ message: e instanceof Error ? e.message : String(e) })
        })
      log(`pulling ${ref.registry}/${ref.repository}:${ref.reference} for linux/amd64`)
      const manifest = yield* attempt(() => session.manifest())
      const configBytes = yield* attempt(() => session.blobBytes(manifest.config.digest, 4 * MIB, "the image config"))
      const config = decodeConfig(configBytes.toString("utf8"))
      if (Result.isFailure(config)) {
        return yield* Effect.fail(new ImagePullFailed({ message: "the image config is malformed" }))
      }
      const { architecture, os } = config.success
      if ((architecture !== undefined && architecture !== "amd64") || (os !== undefined && os !== "linux")) {
        return yield* Effect.fail(
          new ImagePullFailed({ message: `the image is for ${os ?? "?"}/${architecture ?? "?"}, not linux/amd64` })
        )
      }
      if (manifest.layers.length > MAX_LAYERS - 4) {
        return yield* Effect.fail(
          new ImagePullFailed({
            message: `the image has ${manifest.layers.length} layers; at most ${MAX_LAYERS - 4} are supported`
          })
        )
      }
      const total = manifest.layers.reduce((sum, l) => sum + l.size, 0)
      if (total > imageMax) {
        return yield* Effect.fail(
          new ImagePullFailed({
            message: `the image is ${Math.round(total / MIB)} MiB compressed, above the limit (SVC_IMAGE_MAX_MB)`
          })
        )
      }
      log(`manifest ${manifest.digest}: ${manifest.layers.length} layers, ${Math.round(total / MIB)} MiB`)
      const budget = { maxBytes: imageMax, spent: 0 }
      const layers = yield* Effect.forEach(manifest.layers, (layer, index) =>
        Effect.gen(function*() {
          const label = `layer ${index + 1}/${manifest.layers.length} ${layer.digest.slice(0, 19)}`
          const hit = yield* cached(layer.digest)
          if (hit !== undefined) {
            log(`${label} cached: sha256:${hit}`)
            return hit
          }
          const running = inFlight.get(layer.digest)
          const shared = running !== undefined
          const work = running ?? (async () => {
            const objects = await Effect.runPromise(deps.openStore).catch((e) => {
              throw new PullError(`the image store: ${e instanceof Error ? e.message : String(e)}`)
            })
            const upload = beginContentPut(objects, LAYER_STORE_CHUNK_BYTES)
            const importing = await Effect.runPromise(Effect.result(deps.beginImport))
            if (importing._tag === "Failure") {
              await upload.abort()
              throw new PullError(importing.failure.message)
            }
            const extract = importing.success
            // The converted layer goes to the store and into this host's layers at once: no
            // file of it, no second pass over it.
            const write = (chunk: Buffer) => {
              const stored = upload.write(chunk)
              const extracted = extract.write(chunk)
              if (stored !== undefined || extracted !== undefined) {
                return Promise.all([stored, extracted]).then(() => undefined)
              }
            }
            try {
              const pulled = await pullLayer(session, layer, {
                layerMaxBytes: layerMax,
                image: budget,
                layerSetting: "SVC_IMAGE_LAYER_MAX_MB",
                imageSetting: "SVC_IMAGE_MAX_MB"
              }, write)
              // The blob matched its digest: only now is the layer named and put in place.
              const hex = await upload.commit().catch((e) => {
                throw new PullError(`pushing the layer: ${e instanceof Error ? e.message : String(e)}`)
              })
              await extract.commit(hex)
              await deps.layerCache.put(ociLayerCacheKey(layer.digest), new TextEncoder().encode(hex))
              return { hex, bytes: pulled.bytes }
            } catch (e) {
              await Promise.all([upload.abort(), extract.abort()])
              throw e
            }
          })()
          if (!shared) {
            inFlight.set(layer.digest, work)
            work.then(() => inFlight.delete(layer.digest), () => inFlight.delete(layer.digest))
          }
          const done = yield* attempt(() => work)
          log(`${label} pulled: ${Math.round(done.bytes / MIB)} MiB unpacked, sha256:${done.hex}`)
          return done.hex
        }), { concurrency: LAYER_CONCURRENCY })
      const accounts = yield* Effect.promise(async () => ({
        passwd: await topmost(deps.dataDir, layers, "etc/passwd"),
        group: await topmost(deps.dataDir, layers, "etc/group")
      }))
      const run = runConfigOf(config.success, accounts)
      if (Result.isFailure(run)) return yield* Effect.fail(new ImagePullFailed({ message: run.failure }))
      return {
        layers,
        env: run.success.env,
        image: {
          digest: manifest.digest,
          workdir: run.success.workdir,
          user: run.success.user,
          startCmd: run.success.startCmd,
          exposedPorts: run.success.exposedPorts
        },
        entrypoint: config.success.config?.Entrypoint ?? null,
        cmd: config.success.config?.Cmd ?? null
      } satisfies PulledImage
    })

    return { pull }
  })
