/**
 * Settings of volumes, read by the api (docs/contract.md#volumes, #limits):
 *
 * | variable | default | meaning |
 * |---|---|---|
 * | `SVC_VOLUME_MAX_GIB` | 1024 | the largest `size_gb` a volume may have (`max_gib` of `volume_capacity_above_max`) |
 * | `SVC_ORG_MAX_VOLUMES` | 100 | volumes an org may have (not deleted); 429 `quota_exceeded` past it |
 */
import * as Env from "@svc/config/Env"
import { DEFAULT_VOLUME_MAX_GIB } from "@svc/domain/Volume"
import { Config } from "effect"

export const VolumeMaxGib = Env.integer("SVC_VOLUME_MAX_GIB", DEFAULT_VOLUME_MAX_GIB, { min: 1 })

export const OrgMaxVolumes = Env.integer("SVC_ORG_MAX_VOLUMES", 100, { min: 0 })

export interface VolumeSettings {
  readonly maxGib: number
  readonly maxPerOrg: number
}

export const VolumesConfig: Config.Config<VolumeSettings> = Config.all({
  maxGib: VolumeMaxGib,
  maxPerOrg: OrgMaxVolumes
})

export const settings: ReadonlyArray<Env.AnySetting> = [VolumeMaxGib, OrgMaxVolumes]
