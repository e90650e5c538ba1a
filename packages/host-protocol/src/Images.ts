/**
 * Images between the control plane and the hosts (docs/contract.md#templates).
 *
 * - An **image** is a root (`base` or `debian`, made on each host) and a stack of **layers**
 *   (tars of a sandbox's writable layer, named by their sha256). Its digest, the template's
 *   `image`, is the sha256 of `{root, layers}`: the same digest, the same file system.
 * - **Layers** live in the JetStream object store `images` (object `<hex>`), which every host
 *   reaches: a host pulls a layer the first time it needs one and verifies its digest before
 *   using it. A layer no template refers to any more is removed from it (`Templates.collect`), and each
 *   host removes its copy when the store's watch reports it gone.
 * - **Builds** are `build` commands on the AGENT stream (`agent.<hostId>.build`, through the
 *   outbox, in the transaction that inserts the template). The agent writes the build's progress
 *   and end to the `builds` KV bucket (key: the template id); the control plane applies the end to
 *   the template's row once (and fails a build whose host went down or that ran past its time).
 * - The **layer cache** (`layers` KV): key = digest of (root, layers below, env, step), value =
 *   the layer that step made. A step already built on the same base is not run again. An OCI
 *   image's layer is cached the same way under `oci.<version>.<blob hex>`: the layer its blob
 *   became, so an image sharing a base with one pulled before takes the base from the store.
 * - A build from an **OCI image** (`image` in the command) pulls it on the host first
 *   (`@svc/host/Oci`): its layers become the bottom of the stack (over the `base` root, which
 *   gives the mount points, the resolver and the CA bundle), and how to run it (`BuildImage`)
 *   comes back in the build's status.
 */
import type { BucketSpec } from "@svc/bus/Topology"
import { Schema } from "effect"

export const IMAGES_OBJECT_STORE = "images"
export const BUILDS_BUCKET = "builds"
export const BUILDS_BUCKET_SPEC: BucketSpec = { name: BUILDS_BUCKET, history: 1 }
export const LAYER_CACHE_BUCKET = "layers"
export const LAYER_CACHE_BUCKET_SPEC: BucketSpec = { name: LAYER_CACHE_BUCKET, history: 1 }

export const LayerHex = Schema.String.check(Schema.isPattern(/^[0-9a-f]{64}$/, { message: "layer: 64 hex digits" }))
export const ImageRootName = Schema.Literals(["base", "debian", "code"])
export type ImageRootName = typeof ImageRootName.Type

export const BuildStep = Schema.Union([
  Schema.Struct({
    run: Schema.String,
    /** The command as argv (a Dockerfile's RUN through its SHELL); absent: `/bin/sh -c run`. */
    argv: Schema.optionalKey(Schema.Array(Schema.String)),
    /** Env for this command only (a Dockerfile's build args). */
    args: Schema.optionalKey(Schema.Record(Schema.String, Schema.String))
  }),
  Schema.Struct({
    file: Schema.Struct({ path: Schema.String, content: Schema.String, mode: Schema.optionalKey(Schema.Int) })
  }),
  Schema.Struct({ env: Schema.Record(Schema.String, Schema.String) }),
  // A Dockerfile's: files of the build's context (`contextObject` in the image store).
  Schema.Struct({
    copy: Schema.Struct({
      sources: Schema.Array(Schema.String),
      dest: Schema.String,
      chown: Schema.optionalKey(Schema.String)
    })
  }),
  // A Dockerfile's settings for the steps after them and for the image's sandboxes: no layer.
  Schema.Struct({ workdir: Schema.String }),
  Schema.Struct({ user: Schema.String }),
  Schema.Struct({ cmd: Schema.Array(Schema.String) }),
  Schema.Struct({ entrypoint: Schema.Array(Schema.String) }),
  Schema.Struct({ expose: Schema.Array(Schema.Int) }),
  Schema.Struct({ shell: Schema.Array(Schema.String) })
])
export type BuildStep = typeof BuildStep.Type

/** The key of an OCI layer blob (`sha256:<hex>`) in the layer cache. */
export const ociLayerCacheKey = (digest: string) => `oci.v1.${digest.replace(/^sha256:/, "")}`

/** An OCI image to pull as a build's base; the credential sealed as its secret's value is. */
export const BuildImageSource = Schema.Struct({
  ref: Schema.String,
  secret: Schema.optionalKey(Schema.Struct({
    id: Schema.String,
    /** `SecretBox.seal(value, secretValueAad(id))`, as the secret row holds it. */
    sealedValue: Schema.String,
    allowedHosts: Schema.Array(Schema.String)
  }))
})
export type BuildImageSource = typeof BuildImageSource.Type

/** How a sandbox of a pulled image runs (the image's config), and what was pulled. */
export const BuildImage = Schema.Struct({
  /** The manifest digest pulled; null when nothing was (a Dockerfile FROM a template). */
  digest: Schema.NullOr(Schema.String),
  workdir: Schema.NullOr(Schema.String),
  /** Numeric `uid:gid`, null for root. */
  user: Schema.NullOr(Schema.String),
  startCmd: Schema.NullOr(Schema.String),
  exposedPorts: Schema.Array(Schema.Int)
})
export type BuildImage = typeof BuildImage.Type

/** A build on one host; `sandboxId` is the template id (the agent's queue key). */
export const BuildCommand = Schema.TaggedStruct("build", {
  sandboxId: Schema.String,
  orgId: Schema.String,
  root: ImageRootName,
  /** The base image's layers, bottom first. */
  layers: Schema.Array(LayerHex),
  /** The base image's env, under the steps' own. */
  env: Schema.Record(Schema.String, Schema.String),
  steps: Schema.Array(BuildStep),
  timeoutMs: Schema.Int,
  /** A snapshot: this running sandbox's writable layer over `layers` instead of steps. */
  snapshotOf: Schema.optionalKey(Schema.String),
  /** An OCI image pulled first: its layers go over `layers` (then the steps run). */
  image: Schema.optionalKey(BuildImageSource),
  /** A Dockerfile's context: the sha256 (hex) of its tar.gz, an object of the image store. */
  contextObject: Schema.optionalKey(LayerHex),
  /** How the base runs (a template's cwd and user), for a Dockerfile's steps to start from. */
  runAs: Schema.optionalKey(
    Schema.Struct({ workdir: Schema.NullOr(Schema.String), user: Schema.NullOr(Schema.String) })
  )
})
export type BuildCommand = typeof BuildCommand.Type

/** The `builds` KV entry of one template build. */
export const BuildStatus = Schema.Struct({
  templateId: Schema.String,
  hostId: Schema.String,
  state: Schema.Literals(["building", "ready", "failed"]),
  layers: Schema.Array(LayerHex),
  env: Schema.Record(Schema.String, Schema.String),
  errorMessage: Schema.NullOr(Schema.String),
  /** The build's log so far (its last 256 KiB). */
  log: Schema.String,
  /** Steps run, and taken from the layer cache. */
  stepsRun: Schema.Int,
  stepsCached: Schema.Int,
  updatedAt: Schema.Number,
  /** The pulled image, when the build had one. */
  image: Schema.optionalKey(BuildImage)
})
export type BuildStatus = typeof BuildStatus.Type

/** The image digest of a root and its layers (the template's `image`). */
export const imageDigestInput = (root: ImageRootName, layers: ReadonlyArray<string>) => JSON.stringify({ root, layers })

/** What a sandbox of an image needs beyond a `base` one (in the create command). */
export const SandboxImage = Schema.Struct({
  layers: Schema.Array(LayerHex),
  startCmd: Schema.NullOr(Schema.String),
  readyCmd: Schema.NullOr(Schema.String),
  /** The default cwd of execs (an image's `WorkingDir`). */
  workdir: Schema.optionalKey(Schema.NullOr(Schema.String)),
  /** The user execs run as by default, numeric `uid:gid` (an image's `User`). */
  user: Schema.optionalKey(Schema.NullOr(Schema.String))
})
export type SandboxImage = typeof SandboxImage.Type
