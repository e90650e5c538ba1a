/**
 * A sandbox's entry in the `egress` KV bucket (packages/host-protocol/src/Egress.ts): what the
 * hosts' egress proxies enforce for it. Written through the outbox in the transaction of the
 * change: at create, on a policy change or a binding, and deleted once the sandbox is deleted.
 * Every writer holds the sandbox's row lock, so the entries of one sandbox reach the bucket in
 * the order their changes committed.
 */
import * as Actor from "@svc/actors/Actor"
import * as Outbox from "@svc/events/Outbox"
import { EGRESS_BUCKET, type SandboxEgress, sandboxEgressKey } from "@svc/host-protocol/Egress"
import type { SandboxActorState } from "./Model.ts"

type EgressFields = Pick<SandboxActorState, "id" | "orgId" | "network" | "secretIds">

export const egressEntry = (s: EgressFields): SandboxEgress => ({
  sandboxId: s.id,
  orgId: s.orgId,
  policy: s.network,
  secretIds: s.secretIds
})

/** The entry's put, as an actor effect (transitions). */
export const putEgress = (s: EgressFields): Actor.ActorEffect =>
  Actor.kvPut(EGRESS_BUCKET, sandboxEgressKey(s.id), egressEntry(s))

/** The entry's removal, as an actor effect (the sandbox is deleted). */
export const deleteEgress = (s: Pick<SandboxActorState, "id">): Actor.ActorEffect =>
  Actor.kvDelete(EGRESS_BUCKET, sandboxEgressKey(s.id))

/** The entry's put, as an outbox message (writers outside a transition: create). */
export const egressMessage = (s: EgressFields): Outbox.OutboxMessage =>
  Outbox.kvPut(EGRESS_BUCKET, sandboxEgressKey(s.id), egressEntry(s))
