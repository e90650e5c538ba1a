/**
 * Settings of image pulls (read by the agent, which pulls):
 *
 * | variable | default | meaning |
 * |---|---|---|
 * | `SVC_REGISTRY_ALLOWED_SUBNETS` | empty | non-public CIDRs registries may be on (the grammar of `SVC_WEBHOOK_ALLOWED_SUBNETS`) |
 * | `SVC_REGISTRY_CA_FILE` | empty | PEM CAs trusted for registries besides the system's |
 * | `SVC_REGISTRY_HOSTS_FILE` | empty | a hosts-format file whose names pulls resolve from first (a split horizon; the tests' registry) |
 * | `SVC_IMAGE_MAX_MB` | `8192` | the uncompressed size an image may have |
 * | `SVC_IMAGE_LAYER_MAX_MB` | `4096` | the size one layer may have, compressed or not |
 * | `SVC_IMAGE_PULL_STALL_TIMEOUT` | `1m` | a registry request that moves no byte this long fails the pull |
 */
import * as Env from "@svc/config/Env"
import { type Subnet, SubnetsFromString } from "@svc/domain/Address"
import { Config, Duration } from "effect"

export const RegistryAllowedSubnets: Env.Setting<ReadonlyArray<Subnet>> = Env.describe(
  Config.schema(SubnetsFromString("SVC_REGISTRY_ALLOWED_SUBNETS"), "SVC_REGISTRY_ALLOWED_SUBNETS").pipe(
    Config.withDefault<ReadonlyArray<Subnet>>([])
  ),
  { name: "SVC_REGISTRY_ALLOWED_SUBNETS", default: "empty", format: "CIDRs" }
)
export const RegistryCaFile = Env.text("SVC_REGISTRY_CA_FILE", "", "path")
export const RegistryHostsFile = Env.text("SVC_REGISTRY_HOSTS_FILE", "", "path")
export const ImageMaxMb = Env.integer("SVC_IMAGE_MAX_MB", 8192, { min: 1, max: 1024 * 1024 })
export const ImageLayerMaxMb = Env.integer("SVC_IMAGE_LAYER_MAX_MB", 4096, { min: 1, max: 1024 * 1024 })
export const ImagePullStallTimeout = Env.duration("SVC_IMAGE_PULL_STALL_TIMEOUT", Duration.seconds(60), {
  min: Duration.millis(100),
  max: Duration.hours(1)
})

export const settings: ReadonlyArray<Env.AnySetting> = [
  RegistryAllowedSubnets,
  RegistryCaFile,
  RegistryHostsFile,
  ImageMaxMb,
  ImageLayerMaxMb,
  ImagePullStallTimeout
]
