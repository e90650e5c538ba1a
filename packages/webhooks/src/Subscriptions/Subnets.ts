/**
 * The grammar of `SVC_WEBHOOK_ALLOWED_SUBNETS` (read in ../Config.ts): comma-separated CIDRs
 * webhooks may target besides public addresses. The grammar itself is shared with the egress
 * proxies' `SVC_EGRESS_ALLOWED_SUBNETS` (@svc/domain/Address).
 */
import { SubnetsFromString } from "@svc/domain/Address"

export { type IpFamily, parseAllowedSubnets, type Subnet, SubnetSchema } from "@svc/domain/Address"

/** `SVC_WEBHOOK_ALLOWED_SUBNETS` text ⇄ subnets; a bad entry is a schema issue naming it. */
export const AllowedSubnetsFromString = SubnetsFromString("SVC_WEBHOOK_ALLOWED_SUBNETS")
