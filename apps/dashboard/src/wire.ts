/**
 * The API's records as they arrive over the wire (JSON: timestamps are strings), derived from
 * the server's own schemas in @svc/domain. Types only: nothing of the domain (or effect) is
 * bundled.
 */
import type { AuditPage as AuditPageSchema } from "@svc/domain/Api/Audit"
import type {
  ApiKeyPage as ApiKeyPageSchema,
  ApiKeyRow as ApiKeyRowSchema,
  CreatedApiKey as CreatedApiKeySchema,
  OrgRecord as OrgRecordSchema,
  WhoAmI as WhoAmISchema
} from "@svc/domain/Api/Auth"
import type { CodeContext as CodeContextSchema, RunResult as RunResultSchema } from "@svc/domain/Api/Contexts"
import type {
  FileEntry as FileEntrySchema,
  FileInfo as FileInfoSchema,
  FileListing as FileListingSchema
} from "@svc/domain/Api/Sandboxes"
import type { App as AppSchema, AppList as AppListSchema } from "@svc/domain/App"
import type { Usage as UsageSchema } from "@svc/domain/Billing"
import type { Sandbox as SandboxSchema, SandboxPage as SandboxPageSchema } from "@svc/domain/Sandbox"
import type { MetricSample as MetricSampleSchema } from "@svc/domain/SandboxTelemetry"
import type { Secret as SecretSchema, SecretList as SecretListSchema } from "@svc/domain/Secret"
import type { Template as TemplateSchema, TemplatePage as TemplatePageSchema } from "@svc/domain/Template"
import type { Volume as VolumeSchema, VolumeList as VolumeListSchema } from "@svc/domain/Volume"
import type {
  CreatedWebhook as CreatedWebhookSchema,
  DeliveryList as DeliveryListSchema,
  Webhook as WebhookSchema,
  WebhookList as WebhookListSchema
} from "@svc/domain/Webhook"

export type { AuditAction } from "@svc/domain/Api/Audit"
export type { EventName } from "@svc/domain/Events"

export type App = typeof AppSchema.Encoded
export type AppList = typeof AppListSchema.Encoded
export type WhoAmI = typeof WhoAmISchema.Encoded
export type OrgRecord = typeof OrgRecordSchema.Encoded
export type ApiKeyRow = typeof ApiKeyRowSchema.Encoded
export type ApiKeyPage = typeof ApiKeyPageSchema.Encoded
export type CreatedApiKey = typeof CreatedApiKeySchema.Encoded
export type AuditPage = typeof AuditPageSchema.Encoded
export type Usage = typeof UsageSchema.Encoded
export type Sandbox = typeof SandboxSchema.Encoded
export type SandboxPage = typeof SandboxPageSchema.Encoded
export type MetricSample = typeof MetricSampleSchema.Encoded
export type Secret = typeof SecretSchema.Encoded
export type SecretList = typeof SecretListSchema.Encoded
export type Template = typeof TemplateSchema.Encoded
export type TemplatePage = typeof TemplatePageSchema.Encoded
export type Volume = typeof VolumeSchema.Encoded
export type VolumeList = typeof VolumeListSchema.Encoded
export type Webhook = typeof WebhookSchema.Encoded
export type WebhookList = typeof WebhookListSchema.Encoded
export type CreatedWebhook = typeof CreatedWebhookSchema.Encoded
export type DeliveryList = typeof DeliveryListSchema.Encoded

// The sandbox as a workspace: its files and code contexts.

export type FileEntry = typeof FileEntrySchema.Encoded
export type FileListing = typeof FileListingSchema.Encoded
export type FileInfo = typeof FileInfoSchema.Encoded
export type CodeContext = typeof CodeContextSchema.Encoded
export type RunResult = typeof RunResultSchema.Encoded
