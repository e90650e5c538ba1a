/**
 * Settings of webhooks: the allow-list of private targets (the URL guard, in the api and the
 * dispatcher) and the delivery settings of fan-out and dispatchers. Durations are in the
 * platform's format (`300ms`, `30s`, `2m`, `1h`, `7d`; see @svc/config).
 *
 * | variable | default | meaning |
 * |---|---|---|
 * | `SVC_WEBHOOK_ALLOWED_SUBNETS` | empty | CIDRs webhooks may target besides public addresses (Subscriptions/Subnets.ts) |
 * | `SVC_WEBHOOK_RETRY_SCHEDULE` | `30s,2m,10m,1h,6h` | waits before attempts 2 to 6 (Delivery/RetrySchedule.ts) |
 * | `SVC_WEBHOOK_ATTEMPT_TIMEOUT` | `5s` | one attempt's deadline (docs/contract.md#retries: 2xx within 5 s) |
 * | `SVC_WEBHOOK_ACK_WAIT` | `30s` | how long a job held by a dispatcher that stopped answering stays invisible |
 * | `SVC_WEBHOOK_CONCURRENCY` | `16` | attempts in flight per webhook per dispatcher process |
 * | `SVC_WEBHOOK_MAX_ACK_PENDING` | `1000` | per webhook: jobs in flight or waiting for their retry |
 * | `SVC_WEBHOOK_DISCOVERY_INTERVAL` | `5s` | safety-net rescan of webhooks (changes also wake it at once) |
 * | `SVC_WEBHOOK_RETENTION` | `30d` | finished deliveries (and their attempts) are deleted this long after they finished |
 */
import * as Env from "@svc/config/Env"
import { Config, Duration } from "effect"
import {
  DEFAULT_RETRY_SCHEDULE,
  formatRetrySchedule,
  type RetrySchedule,
  RetryScheduleFromString
} from "./Delivery/RetrySchedule.ts"
import { AllowedSubnetsFromString, type Subnet } from "./Subscriptions/Subnets.ts"

/** The operator's allow-list; empty (nothing private allowed) when the variable is unset. */
export const AllowedSubnets: Env.Setting<ReadonlyArray<Subnet>> = Env.describe(
  Config.schema(AllowedSubnetsFromString, "SVC_WEBHOOK_ALLOWED_SUBNETS").pipe(
    Config.withDefault<ReadonlyArray<Subnet>>([])
  ),
  { name: "SVC_WEBHOOK_ALLOWED_SUBNETS", default: "empty", format: "CIDRs" }
)

export const RetryScheduleSetting: Env.Setting<RetrySchedule> = Env.describe(
  Config.schema(RetryScheduleFromString, "SVC_WEBHOOK_RETRY_SCHEDULE").pipe(
    Config.withDefault<RetrySchedule>(DEFAULT_RETRY_SCHEDULE)
  ),
  {
    name: "SVC_WEBHOOK_RETRY_SCHEDULE",
    default: "`" + formatRetrySchedule(DEFAULT_RETRY_SCHEDULE) + "`",
    format: "5 durations"
  }
)

export interface DispatchSettings {
  readonly schedule: RetrySchedule
  readonly attemptTimeoutMs: number
  readonly ackWaitMs: number
  readonly concurrency: number
  readonly maxAckPending: number
  readonly discoveryIntervalMs: number
  /** Finished deliveries older than this are deleted. */
  readonly retentionMs: number
}

export const DEFAULT_DISPATCH_SETTINGS: Omit<DispatchSettings, "schedule"> = {
  attemptTimeoutMs: 5_000,
  ackWaitMs: 30_000,
  concurrency: 16,
  maxAckPending: 1_000,
  discoveryIntervalMs: 5_000,
  retentionMs: 30 * 86_400_000
}

/** Above zero and at most a day (longer is surely a typo, and past ~24.8 days Node timers overflow). */
const UP_TO_A_DAY = { max: Duration.days(1) }

const durationMs = (name: string, defaultMs: number, options: Env.DurationOptions) =>
  Env.duration(name, Duration.millis(defaultMs), options)

export const AttemptTimeout = durationMs(
  "SVC_WEBHOOK_ATTEMPT_TIMEOUT",
  DEFAULT_DISPATCH_SETTINGS.attemptTimeoutMs,
  UP_TO_A_DAY
)
export const AckWait = durationMs("SVC_WEBHOOK_ACK_WAIT", DEFAULT_DISPATCH_SETTINGS.ackWaitMs, UP_TO_A_DAY)
export const Concurrency = Env.integer("SVC_WEBHOOK_CONCURRENCY", DEFAULT_DISPATCH_SETTINGS.concurrency, {
  min: 1,
  max: 1_000
})
export const MaxAckPending = Env.integer("SVC_WEBHOOK_MAX_ACK_PENDING", DEFAULT_DISPATCH_SETTINGS.maxAckPending, {
  min: 1,
  max: 1_000_000
})
export const DiscoveryInterval = durationMs(
  "SVC_WEBHOOK_DISCOVERY_INTERVAL",
  DEFAULT_DISPATCH_SETTINGS.discoveryIntervalMs,
  UP_TO_A_DAY
)
export const Retention = durationMs("SVC_WEBHOOK_RETENTION", DEFAULT_DISPATCH_SETTINGS.retentionMs, {
  min: Duration.hours(1),
  max: Duration.days(3_650),
  formerly: "SVC_WEBHOOK_RETENTION_DAYS"
})

const ms = Config.map(Duration.toMillis)

/** Every delivery setting from the environment; a bad value is a ConfigError naming the variable. */
export const DispatchConfig: Config.Config<DispatchSettings> = Config.all({
  schedule: RetryScheduleSetting,
  attemptTimeoutMs: ms(AttemptTimeout),
  ackWaitMs: ms(AckWait),
  concurrency: Concurrency,
  maxAckPending: MaxAckPending,
  discoveryIntervalMs: ms(DiscoveryInterval),
  retentionMs: ms(Retention)
})

/** What the dispatcher role reads (the api reads `AllowedSubnets` alone). */
export const settings: ReadonlyArray<Env.AnySetting> = [
  AllowedSubnets,
  RetryScheduleSetting,
  AttemptTimeout,
  AckWait,
  Concurrency,
  MaxAckPending,
  DiscoveryInterval,
  Retention
]
