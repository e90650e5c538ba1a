/**
 * Templates (docs/contract.md#templates): a root file system built from steps over a base, or
 * captured from a sandbox (a snapshot), that sandboxes start from copy-on-write.
 */
import { Schema } from "effect"
import { Page } from "./Pagination.ts"
import { Bounded, enforcedMax, IdText, MAX_ERROR_TEXT, TimestampText, Truncated } from "./Text.ts"

export const MAX_STEPS = 20
const Text = (max: number) => Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(max))
const NoNul = (max: number) =>
  Schema.String.check(Schema.isMaxLength(max), Schema.isPattern(/^[^\0]*$/, { message: "no NUL" }))
const EnvName = Schema.String.check(
  Schema.isMaxLength(256),
  Schema.isPattern(/^[A-Za-z_][A-Za-z0-9_]*$/, { message: "env name" })
)

export const TemplateName = Schema.String.check(
  enforcedMax(63),
  Schema.isPattern(/^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$/, {
    message: "1 to 63 of [A-Za-z0-9_.-], starting with a letter or digit"
  })
)

export const TemplateStep = Schema.Union([
  Schema.Struct({ run: Text(16_384).check(Schema.isPattern(/^[^\0]*$/, { message: "no NUL" })) }),
  Schema.Struct({
    file: Schema.Struct({
      path: Schema.String.check(
        enforcedMax(4096),
        Schema.isPattern(/^\/[^\0]{0,4095}$/, { message: "an absolute path" })
      ),
      content: NoNul(256 * 1024),
      mode: Schema.optionalKey(Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 0o7777 })))
    })
  }),
  Schema.Struct({
    env: Schema.Record(EnvName, NoNul(32_768)).check(
      Schema.makeFilter((env) => Object.keys(env).length <= 128 || "at most 128 variables")
    )
  })
])
export type TemplateStep = typeof TemplateStep.Type

/** Sandboxes of a template kept booted and handed out on create (docs/contract.md#templates). */
export const MAX_POOL_SIZE = 50
export const PoolSize = Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: MAX_POOL_SIZE }))
/** A Dockerfile's `context`: base64 of a tar.gz of at most 50 MiB. */
export const MAX_CONTEXT_BYTES = 50 * 1024 * 1024
export const MAX_DOCKERFILE_BYTES = 256 * 1024

export const CreateTemplateRequest = Schema.Struct({
  name: TemplateName,
  base: Schema.optionalKey(Text(64)),
  /** An OCI image reference (`registry/repo:tag`, `...@sha256:<hex>`). */
  image: Schema.optionalKey(Text(512)),
  /** An org secret (id or name) whose value is the registry's credential. */
  registry_secret: Schema.optionalKey(Text(64)),
  /** A single-stage Dockerfile's text. */
  dockerfile: Schema.optionalKey(Text(MAX_DOCKERFILE_BYTES).check(Schema.isPattern(/^[^\0]*$/, { message: "no NUL" }))),
  /** base64 of a tar.gz, the Dockerfile's COPY/ADD source. */
  context: Schema.optionalKey(
    Schema.String.check(
      Schema.isMaxLength(Math.ceil(MAX_CONTEXT_BYTES / 3) * 4 + 4),
      Schema.isPattern(/^[A-Za-z0-9+/\s]*={0,2}\s*$/, { message: "base64" })
    )
  ),
  build_args: Schema.optionalKey(
    Schema.Record(EnvName, NoNul(32_768)).check(
      Schema.makeFilter((args) => Object.keys(args).length <= 128 || "at most 128 build args")
    )
  ),
  steps: Schema.optionalKey(
    Schema.Array(TemplateStep).check(
      enforcedMax(MAX_STEPS),
      Schema.makeFilter((steps) => steps.length <= MAX_STEPS || `at most ${MAX_STEPS} steps`)
    )
  ),
  start_cmd: Schema.optionalKey(Schema.NullOr(Text(16_384))),
  ready_cmd: Schema.optionalKey(Schema.NullOr(Text(16_384))),
  pool_size: Schema.optionalKey(PoolSize)
})
export type CreateTemplateRequest = typeof CreateTemplateRequest.Type

export const SnapshotRequest = Schema.Struct({ name: TemplateName })

/** PATCH /v1/templates/{id}. */
export const UpdateTemplateRequest = Schema.Struct({ pool_size: PoolSize })
export type UpdateTemplateRequest = typeof UpdateTemplateRequest.Type

export const TemplateState = Schema.Literals(["building", "ready", "failed"])

export class Template extends Schema.Class<Template>("Template")({
  id: IdText,
  name: Bounded(63),
  state: TemplateState,
  /** `sha256:<hex>` of the built root file system; null until ready. */
  image: Schema.NullOr(Bounded(128)),
  /** What it was built on: `base`, `debian`, or a template's id. */
  base: Bounded(64),
  errorMessage: Schema.NullOr(Truncated(MAX_ERROR_TEXT)),
  start_cmd: Schema.NullOr(Bounded(16_384)),
  ready_cmd: Schema.NullOr(Bounded(16_384)),
  createdAt: TimestampText,
  builtAt: Schema.NullOr(TimestampText),
  /** Sandboxes kept booted for its creates (0: none); `base` and `debian` show 0 (the hosts' own pool serves `base`). */
  pool_size: Schema.Int,
  /** The OCI image reference it was made from (`image`, or a Dockerfile's `FROM`), or null. */
  image_ref: Schema.NullOr(Bounded(512)),
  /** The manifest digest pulled for `image_ref` (`sha256:<hex>`), once pulled. */
  image_digest: Schema.NullOr(Bounded(128))
}) {}

export const TemplatePage = Page("rows", Template)
export type TemplatePage = typeof TemplatePage.Type
