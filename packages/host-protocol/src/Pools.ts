/**
 * Warm pools of templates between the control plane and the hosts (docs/architecture.md#warm-pools).
 *
 * The `pools` KV bucket, `template.<templateId>` → `PoolEntry`: put through the outbox when a
 * ready template's `pool_size` or its pool's host changes (and when its build ends ready with a
 * pool asked for), deleted when the pool is emptied or the template deleted. The agent of
 * `hostId` keeps `size` sandboxes of the image booted (its `start_cmd` started, its `ready_cmd`
 * passed) and hands them out to creates of the template; every other agent ignores the entry.
 * The template's env travels sealed (`SealedEnv`, `transit`, bound to the template id), as a
 * sandbox's does in its create command.
 */
import type { BucketSpec } from "@svc/bus/Topology"
import { Schema } from "effect"
import { ImageRootName, LayerHex } from "./Images.ts"

export const POOLS_BUCKET = "pools"
export const POOLS_BUCKET_SPEC: BucketSpec = { name: POOLS_BUCKET, history: 1 }

export const POOL_KEY_PREFIX = "template."
export const poolKey = (templateId: string) => `${POOL_KEY_PREFIX}${templateId}`

/** Most sandboxes one template's pool keeps (the contract's bound on `pool_size`). */
export const MAX_POOL_SIZE = 50

/** `template.<templateId>`. */
export const PoolEntry = Schema.Struct({
  templateId: Schema.String,
  hostId: Schema.String,
  size: Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: MAX_POOL_SIZE })),
  root: ImageRootName,
  layers: Schema.Array(LayerHex),
  /** The template's env, sealed for `transit` with the template id as the binding. */
  sealedEnv: Schema.String,
  startCmd: Schema.NullOr(Schema.String),
  readyCmd: Schema.NullOr(Schema.String)
})
export type PoolEntry = typeof PoolEntry.Type
