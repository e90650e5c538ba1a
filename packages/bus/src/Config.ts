/**
 * The bus's settings, read by every role: where NATS is, the namespace of this platform on it,
 * and the version each process reports in its worker heartbeat (and an agent in its host record).
 */
import * as Env from "@svc/config/Env"
import { Config, Option, type Redacted } from "effect"

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

/**
 * `SVC_NATS_REPLICAS`: how many copies of every stream, KV bucket and object store JetStream
 * keeps. 1 on one node; 3 on a 3-node cluster, so that the loss of one node loses nothing and
 * stops nothing (a 1-replica stream on the lost node answers "jetstream is not enabled" until it
 * comes back). Applied at start-up: raising it on an existing platform re-replicates.
 */
export const NatsReplicas = Env.integer("SVC_NATS_REPLICAS", 1, { min: 1, max: 5 })

/** `NATS_USER` / `NATS_PASSWORD`: this process's NATS user (one per role, or per host for agents). */
export const NatsUser = Env.text("NATS_USER", "")

const natsPassword = Config.option(Config.Redacted("NATS_PASSWORD"))
export const NatsPassword = Env.describe(natsPassword, { name: "NATS_PASSWORD", default: "unset", format: "secret" })

/** TLS to NATS: a CA file to trust (the server's certificate is then verified) and a client certificate and key. */
export const NatsTlsCa = Env.text("NATS_TLS_CA", "", "path")
export const NatsTlsCert = Env.text("NATS_TLS_CERT", "", "path")
export const NatsTlsKey = Env.text("NATS_TLS_KEY", "", "path")

/** How a process authenticates to NATS and whether over TLS (from the environment). */
export interface NatsSecurity {
  readonly user?: string
  readonly password?: Redacted.Redacted<string>
  readonly tls?: { readonly caFile?: string; readonly certFile?: string; readonly keyFile?: string }
}

export const NatsSecurityConfig: Config.Config<NatsSecurity> = Config.all({
  user: NatsUser,
  password: NatsPassword,
  ca: NatsTlsCa,
  cert: NatsTlsCert,
  key: NatsTlsKey
}).pipe(Config.map(({ ca, cert, key, password, user }) => {
  const tls = {
    ...(ca !== "" ? { caFile: ca } : {}),
    ...(cert !== "" ? { certFile: cert } : {}),
    ...(key !== "" ? { keyFile: key } : {})
  }
  return {
    ...(user !== "" ? { user } : {}),
    ...(Option.isSome(password) ? { password: password.value } : {}),
    ...(Object.keys(tls).length > 0 ? { tls } : {})
  }
}))

export const settings: ReadonlyArray<Env.AnySetting> = [
  NatsUrl,
  NatsPrefix,
  PlatformVersion,
  NatsReplicas,
  NatsUser,
  NatsPassword,
  NatsTlsCa,
  NatsTlsCert,
  NatsTlsKey
]
