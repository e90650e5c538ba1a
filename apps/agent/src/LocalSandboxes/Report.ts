/** A report of this host's, stamped with the host's clock when it is made. */
import type { AgentReport } from "@svc/host-protocol/Protocol"
import { Clock, Effect } from "effect"

export type MakeReport = (
  sandboxId: string,
  status: AgentReport["status"],
  fields?: Partial<AgentReport>
) => Effect.Effect<AgentReport>

export const reportOf = (hostId: string): MakeReport => (sandboxId, status, fields = {}) =>
  Effect.map(Clock.currentTimeMillis, (at): AgentReport => ({
    _tag: "AgentReport",
    sandboxId,
    hostId,
    status,
    ...fields,
    at
  }))
