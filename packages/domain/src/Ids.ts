/**
 * Identifiers (docs/contract.md#conventions): `<prefix>_<body>`, where the body is 26 lowercase
 * Crockford base32 characters, ULID-like: 10 characters of creation time in milliseconds
 * followed by 16 random characters (80 bits). Ids therefore sort by creation time as plain
 * strings; within one process ids made in the same millisecond still sort in creation order
 * (the random part is incremented, as in monotonic ULIDs).
 */
import { Clock, Effect, Schema } from "effect"
import { randomBytes } from "node:crypto"
import { enforcedMax } from "./Text.ts"

/** Crockford base32, lowercase (no i, l, o, u). */
const ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"
const TIME_LEN = 10
const RANDOM_LEN = 16
const MAX_TIME = 2 ** 48 - 1

/** The body: time part starts with 0-7 because 48 bits fit in 10 base32 digits with room to spare. */
const BODY_PATTERN = "[0-7][0-9a-hjkmnp-tv-z]{25}"

export const ID_PREFIXES = {
  org: "org",
  user: "usr",
  apiKey: "key",
  sandbox: "sbx",
  template: "tpl",
  volume: "vol",
  app: "app",
  secret: "sec",
  webhook: "wh",
  delivery: "whd",
  attempt: "wha",
  audit: "aud",
  host: "host",
  /** A volume attached to a sandbox (`attachment_id` of docs/contract.md#volumes). */
  attachment: "vat"
} as const
export type IdKind = keyof typeof ID_PREFIXES
export type IdPrefix = (typeof ID_PREFIXES)[IdKind]

/** The unbranded string schema of one id kind (prefix and body checked). */
export const idString = (prefix: IdPrefix) =>
  Schema.String.check(
    // The pattern enforces it.
    enforcedMax(prefix.length + 1 + TIME_LEN + RANDOM_LEN),
    Schema.isPattern(new RegExp(`^${prefix}_${BODY_PATTERN}$`), {
      expected: `an id of the form ${prefix}_<26 lowercase Crockford base32 characters>`
    })
  )

export const OrgId = idString("org").pipe(Schema.brand("OrgId"))
export type OrgId = typeof OrgId.Type
export const UserId = idString("usr").pipe(Schema.brand("UserId"))
export type UserId = typeof UserId.Type
export const ApiKeyId = idString("key").pipe(Schema.brand("ApiKeyId"))
export type ApiKeyId = typeof ApiKeyId.Type
export const SandboxId = idString("sbx").pipe(Schema.brand("SandboxId"))
export type SandboxId = typeof SandboxId.Type
export const TemplateId = idString("tpl").pipe(Schema.brand("TemplateId"))
export type TemplateId = typeof TemplateId.Type
export const VolumeId = idString("vol").pipe(Schema.brand("VolumeId"))
export type VolumeId = typeof VolumeId.Type
export const AppId = idString("app").pipe(Schema.brand("AppId"))
export type AppId = typeof AppId.Type
export const SecretId = idString("sec").pipe(Schema.brand("SecretId"))
export type SecretId = typeof SecretId.Type
export const WebhookId = idString("wh").pipe(Schema.brand("WebhookId"))
export type WebhookId = typeof WebhookId.Type
export const DeliveryId = idString("whd").pipe(Schema.brand("DeliveryId"))
export type DeliveryId = typeof DeliveryId.Type
export const AttemptId = idString("wha").pipe(Schema.brand("AttemptId"))
export type AttemptId = typeof AttemptId.Type
export const AuditId = idString("aud").pipe(Schema.brand("AuditId"))
export type AuditId = typeof AuditId.Type
export const HostId = idString("host").pipe(Schema.brand("HostId"))
export type HostId = typeof HostId.Type
export const AttachmentId = idString("vat").pipe(Schema.brand("AttachmentId"))
export type AttachmentId = typeof AttachmentId.Type

// Monotonic state of this process: last time used and its random digits.
let lastTime = -1
const lastRandom: Array<number> = new Array(RANDOM_LEN).fill(0)

const encodeTime = (ms: number): string => {
  let out = ""
  let t = ms
  for (let i = 0; i < TIME_LEN; i++) {
    out = ALPHABET[t % 32] + out
    t = Math.floor(t / 32)
  }
  return out
}

const freshRandom = (): void => {
  const bytes = randomBytes(RANDOM_LEN)
  for (let i = 0; i < RANDOM_LEN; i++) lastRandom[i] = bytes[i]! & 31
}

/** Adds one to the random digits; false on overflow (2^80 ids in one millisecond). */
const incrementRandom = (): boolean => {
  for (let i = RANDOM_LEN - 1; i >= 0; i--) {
    if (lastRandom[i]! < 31) {
      lastRandom[i] = lastRandom[i]! + 1
      return true
    }
    lastRandom[i] = 0
  }
  return false
}

/** A new id body for the given creation time (milliseconds since the epoch). */
export const makeBody = (nowMs: number): string => {
  const now = Math.min(Math.max(0, Math.floor(nowMs)), MAX_TIME)
  if (now > lastTime) {
    lastTime = now
    freshRandom()
  } else if (!incrementRandom()) {
    // Clock went back or 2^80 ids this millisecond: keep order by borrowing the next millisecond.
    lastTime = Math.min(lastTime + 1, MAX_TIME)
    freshRandom()
  }
  let random = ""
  for (let i = 0; i < RANDOM_LEN; i++) random += ALPHABET[lastRandom[i]!]
  return encodeTime(lastTime) + random
}

/** A new id string of the given kind (unbranded); prefer the typed `make*Id` functions. */
export const makeId = (kind: IdKind, nowMs: number = Date.now()): string => `${ID_PREFIXES[kind]}_${makeBody(nowMs)}`

export const makeOrgId = (): OrgId => makeId("org") as OrgId
export const makeUserId = (): UserId => makeId("user") as UserId
export const makeApiKeyId = (): ApiKeyId => makeId("apiKey") as ApiKeyId
export const makeSandboxId = (): SandboxId => makeId("sandbox") as SandboxId
export const makeTemplateId = (): TemplateId => makeId("template") as TemplateId
export const makeVolumeId = (): VolumeId => makeId("volume") as VolumeId
export const makeAppId = (): AppId => makeId("app") as AppId
export const makeSecretId = (): SecretId => makeId("secret") as SecretId
export const makeWebhookId = (): WebhookId => makeId("webhook") as WebhookId
export const makeDeliveryId = (): DeliveryId => makeId("delivery") as DeliveryId
export const makeAttemptId = (): AttemptId => makeId("attempt") as AttemptId
export const makeAuditId = (): AuditId => makeId("audit") as AuditId
export const makeHostId = (): HostId => makeId("host") as HostId
export const makeAttachmentId = (): AttachmentId => makeId("attachment") as AttachmentId

interface IdTypes {
  readonly org: OrgId
  readonly user: UserId
  readonly apiKey: ApiKeyId
  readonly sandbox: SandboxId
  readonly template: TemplateId
  readonly volume: VolumeId
  readonly app: AppId
  readonly secret: SecretId
  readonly webhook: WebhookId
  readonly delivery: DeliveryId
  readonly attempt: AttemptId
  readonly audit: AuditId
  readonly host: HostId
  readonly attachment: AttachmentId
}
export type IdOf<K extends IdKind> = IdTypes[K]

/** Effectful variant: the time comes from the Effect `Clock` (so TestClock controls it). */
export const make = <K extends IdKind>(kind: K): Effect.Effect<IdOf<K>> =>
  Effect.map(Clock.currentTimeMillis, (now) => makeId(kind, now) as IdOf<K>)

/** The fixed id of the built-in `base` template (time part 0: sorts before every built template). */
export const BASE_TEMPLATE_ID = "tpl_00000000000000000000000000" as TemplateId

/** The platform-built `debian` root as a template (a sandbox's `templateId` when created from it). */
export const DEBIAN_TEMPLATE_ID = "tpl_0000000000000000000000debn" as TemplateId

/** The platform-built `code` root (debian with python's data stack and node) as a template. */
export const CODE_TEMPLATE_ID = "tpl_00000000000000000000000cde" as TemplateId

const ANY_ID = new RegExp(`^([a-z]+)_(${BODY_PATTERN})$`)

/** The creation time (ms) encoded in an id of any kind, or null when it is not a well-formed id. */
export const timestampOf = (id: string): number | null => {
  const m = ANY_ID.exec(id)
  if (m === null) return null
  let t = 0
  for (const c of m[2]!.slice(0, TIME_LEN)) t = t * 32 + ALPHABET.indexOf(c)
  return t
}
