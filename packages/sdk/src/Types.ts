/**
 * The JSON of the API's records and request bodies, as plain types: the encoded side of the
 * server's own schemas (`@svc/domain`), so they follow the server when it changes. Timestamps
 * are ISO 8601 strings; ids are strings.
 */
import type { AuditEntry as AuditEntrySchema } from "@svc/domain/Api/Audit"
import type {
  ApiKeyRow,
  CreateApiKeyRequest,
  CreatedApiKey as CreatedApiKeySchema,
  OrgRecord,
  WhoAmI as WhoAmISchema
} from "@svc/domain/Api/Auth"
import type { CodeContext as CodeContextSchema, RunResult as RunResultSchema } from "@svc/domain/Api/Contexts"
import type { ForkRequest } from "@svc/domain/Api/Forks"
import type { PreviewToken as PreviewTokenSchema } from "@svc/domain/Api/Previews"
import type { SandboxProcess as SandboxProcessSchema } from "@svc/domain/Api/Processes"
import type {
  FileEntry as FileEntrySchema,
  FileInfo as FileInfoSchema,
  FileListing as FileListingSchema
} from "@svc/domain/Api/Sandboxes"
import type { Worker as WorkerSchema } from "@svc/domain/Api/Workers"
import type { App as AppSchema, CreateAppRequest, UpdateAppRequest } from "@svc/domain/App"
import type { LimitsRequest, Usage as UsageSchema } from "@svc/domain/Billing"
import type {
  CreateSandboxRequest,
  Sandbox as SandboxSchema,
  SandboxStats as SandboxStatsSchema
} from "@svc/domain/Sandbox"
import type { MetricSample as MetricSampleSchema } from "@svc/domain/SandboxTelemetry"
import type { CreateSecretRequest, PatchSecretRequest, Secret as SecretSchema } from "@svc/domain/Secret"
import type { CreateTemplateRequest, Template as TemplateSchema, UpdateTemplateRequest } from "@svc/domain/Template"
import type { CreateVolumeRequest, Volume as VolumeSchema } from "@svc/domain/Volume"
import type {
  CreatedWebhook as CreatedWebhookSchema,
  CreateWebhookRequest,
  DeliveryAttempt as DeliveryAttemptSchema,
  PatchWebhookRequest,
  Webhook as WebhookSchema
} from "@svc/domain/Webhook"

export type SandboxRecord = typeof SandboxSchema.Encoded
export type CreateSandboxParams = typeof CreateSandboxRequest.Encoded
export type SandboxStats = typeof SandboxStatsSchema.Encoded
/** One sample of `sandbox.metrics()`. */
export type MetricSample = typeof MetricSampleSchema.Encoded
export type FileEntry = typeof FileEntrySchema.Encoded
export type FileListing = typeof FileListingSchema.Encoded
export type FileInfo = typeof FileInfoSchema.Encoded

/** One change of `sandbox.files.watch` (`from`: a move's old path). */
export interface FileWatchEvent {
  readonly type: "create" | "modify" | "delete" | "move" | "overflow"
  readonly path: string
  readonly is_dir: boolean
  readonly from?: string
}
export type PreviewToken = typeof PreviewTokenSchema.Encoded
/** A background process of a sandbox (`pid`, `cmd`, `state`, `exit_code`, `reason`...). */
export type SandboxProcess = typeof SandboxProcessSchema.Encoded
/** A code context (`id`, `language`, `cwd`, `state`: idle, running, dead). */
export type CodeContextRecord = typeof CodeContextSchema.Encoded
/** What a context's run gives: `results`, `stdout`, `stderr`, `error`, `execution_count`... */
export type RunResult = typeof RunResultSchema.Encoded

export type Template = typeof TemplateSchema.Encoded
export type CreateTemplateParams = typeof CreateTemplateRequest.Encoded
export type UpdateTemplateParams = typeof UpdateTemplateRequest.Encoded
export type ForkParams = typeof ForkRequest.Encoded

export type Volume = typeof VolumeSchema.Encoded
export type CreateVolumeParams = typeof CreateVolumeRequest.Encoded

export type App = typeof AppSchema.Encoded
export type CreateAppParams = typeof CreateAppRequest.Encoded
export type UpdateAppParams = typeof UpdateAppRequest.Encoded

export type Secret = typeof SecretSchema.Encoded
export type CreateSecretParams = typeof CreateSecretRequest.Encoded
export type UpdateSecretParams = typeof PatchSecretRequest.Encoded

export type Webhook = typeof WebhookSchema.Encoded
export type CreatedWebhook = typeof CreatedWebhookSchema.Encoded
export type CreateWebhookParams = typeof CreateWebhookRequest.Encoded
export type UpdateWebhookParams = typeof PatchWebhookRequest.Encoded
export type DeliveryAttempt = typeof DeliveryAttemptSchema.Encoded

export type ApiKey = typeof ApiKeyRow.Encoded
export type CreatedApiKey = typeof CreatedApiKeySchema.Encoded
export type CreateKeyParams = typeof CreateApiKeyRequest.Encoded

export type Org = typeof OrgRecord.Encoded
export type WhoAmI = typeof WhoAmISchema.Encoded
export type AuditEntry = typeof AuditEntrySchema.Encoded

export type Usage = typeof UsageSchema.Encoded
export type UsageLimitsParams = typeof LimitsRequest.Encoded
export type Worker = typeof WorkerSchema.Encoded
