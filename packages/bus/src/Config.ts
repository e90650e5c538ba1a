/**
 * The bus's settings, read by every role: where NATS is, the namespace of this platform on it,
 * and the version each process reports in its worker heartbeat (and an agent in its host record).
 */
import * as Env from "@svc/config/Env"
import { Config } from "effect"

export const DEFAULT_NATS_URL = "nats://127.0.0.1:4222"

const natsUrl = Config.String("NATS_URL")

/** `NATS_URL` when it is set (`svc dev` starts a NATS of its own otherwise). */
export const NatsUrlIfSet = Config.option(natsUrl)

/** `NATS_URL`: a comma-separated list names the nodes of a cluster. */
export const NatsUrl = Env.describe(natsUrl.pipe(Config.withDefault(DEFAULT_NATS_URL)), {
  name: "NATS_URL",
  default: "`nats://127.0.0.1:4222` (svc dev: a NATS of its own)",
  format: "URLs"
})

/** Namespaces every stream, subject and bucket (several platforms on one NATS; tests). */
export const NatsPrefix = Env.text("SVC_NATS_PREFIX", "")

export const DEFAULT_VERSION = "0.1.0"

/** The version a process reports in its worker heartbeat and an agent in its host record. */
export const PlatformVersion = Env.text("SVC_VERSION", DEFAULT_VERSION)

export const settings: ReadonlyArray<Env.AnySetting> = [NatsUrl, NatsPrefix, PlatformVersion]
