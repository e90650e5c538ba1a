/**
 * The actor's state as the API's record (the exact names of docs/contract.md#sandbox-record; times
 * as `DateTime.Utc`).
 */
import type { HostId, OrgId, SandboxId, SecretId, TemplateId } from "@svc/domain/Ids"
import type { Sandbox } from "@svc/domain/Sandbox"
import { DateTime } from "effect"
import * as Lifecycle from "./Lifecycle.ts"
import type { SandboxActorState } from "./Model.ts"

const utc = (ms: number | null) => (ms === null ? null : DateTime.makeUnsafe(ms))

export const toRecord = (s: SandboxActorState): Sandbox => ({
  id: s.id as SandboxId,
  name: s.name,
  orgId: s.orgId as OrgId,
  templateId: s.templateId as TemplateId,
  hostId: s.hostId as HostId | null,
  parentId: s.parentId as SandboxId | null,
  state: s.state,
  type: s.type,
  region: s.region,
  datacenter: s.datacenter,
  agent_ready: s.agentReady,
  runtime_ready: s.runtimeReady,
  runtime_reason: s.runtimeReason,
  cpu: s.cpu,
  ramMb: s.ramMb,
  diskGb: s.diskGb,
  vsockCid: s.vsockCid,
  internalIp: s.internalIp,
  exposedPorts: s.exposedPorts,
  volume_attachments: s.volumeAttachments,
  metadata: s.metadata,
  errorMessage: s.errorMessage,
  network: s.network,
  secrets: s.secretIds as ReadonlyArray<SecretId>,
  createdAt: DateTime.makeUnsafe(s.createdAt),
  startedAt: utc(s.startedAt),
  stoppedAt: utc(s.stoppedAt),
  deletedAt: utc(s.deletedAt),
  timeout_s: s.timeoutS,
  idle_timeout_s: s.idleTimeoutS,
  on_timeout: s.onTimeout,
  auto_delete_s: s.autoDeleteS,
  auto_resume: s.autoResume,
  expiresAt: utc(Lifecycle.expiresAt(s)),
  lastActivityAt: utc(s.lastActivityAt),
  stop_reason: s.stopReason
})
