/**
 * NATS users and their subject permissions, rendered as a nats-server `authorization` block.
 *
 * Every user may use only what its role's code uses (a permission missing here shows as a
 * "Permissions Violation" in the server's log: the topology test fails on one):
 * - api: the `auth.>` subjects of the credential cache; reads the EVENTS stream (realtime, an
 *   ordered consumer per stream of events); the buckets hosts, egress, volumes, builds, layers and
 *   workers and the images object store; declares WEBHOOK_DELIVERY. It publishes no command,
 *   event or job itself: those go through the outbox.
 * - runtime: the outbox relay publishes events (`evt.>`), actor messages (`actor.>`), agent
 *   commands (`agent.>`), delivery jobs (`whd.>`) and KV operations (egress); it declares EVENTS,
 *   AGENT and the actors' streams (`ACTOR_TYPES`) and pulls the actors' mailbox consumers; the
 *   app controllers' operations (`appop.>` on APP_OPS) and their events consumer; the buckets
 *   and object store the sandbox creates of the app controllers need.
 * - dispatcher: declares EVENTS, pulls the fan-out's consumer on it and the webhooks' consumers on
 *   WEBHOOK_DELIVERY (creating and deleting them, reading and deleting a lost job), publishes
 *   delivery jobs (`whd.>`), listens to that stream's max-deliveries advisories.
 * - agents: one user per host, confined to what that host needs. It may write only its own host
 *   record (`$KV.<hosts>.<hostId>`) and read none (the records hold each host's data-plane
 *   token), create and pull only its own command consumer on the AGENT
 *   stream (`agent_<hostId>`, filtered to `agent.<hostId>.>`) and ack only that consumer's
 *   messages, and send reports only on its own host's subjects
 *   (`actor.sandbox.<partition>.<sandboxId>.host.<hostId>`: the sandbox actor believes the
 *   subject's host, not the report's); it may not delete, purge or remove messages from any stream.
 * Every role writes its own worker heartbeat in the workers bucket.
 *
 * Sandbox logs and metrics (SandboxTelemetry.ts): the api reads SANDBOX_LOGS and SANDBOX_METRICS
 * (a consumer per request); the runtime writes lifecycle lines (`sbxlog.*.ctl`) and purges a
 * deleted sandbox's subjects; an agent writes samples and lines only on subjects ending in its
 * own host id (`sbxmet.*.host.<hostId>`, `sbxlog.*.host.<hostId>`) and reads neither stream.
 *
 * Passwords are not in the block: each names an environment variable of the server
 * (`password: $SVC_NATS_PASSWORD_AGENT_H1`), which nats-server reads at start-up, so the
 * configuration file holds no secret.
 */
import { AGENT_STREAM, agentConsumer, hostReportSubjects, HOSTS_BUCKET } from "./Protocol.ts"
import { controlLogSubject, hostTelemetrySubjects, LOGS_STREAM, METRICS_STREAM } from "./SandboxTelemetry.ts"

export interface Permissions {
  readonly publish: { readonly allow: ReadonlyArray<string>; readonly deny?: ReadonlyArray<string> }
  readonly subscribe: { readonly allow: ReadonlyArray<string>; readonly deny?: ReadonlyArray<string> }
}

export interface NatsUserSpec {
  readonly user: string
  /**
   * The server's environment variable holding the password (without `$`), or (throwaway test
   * servers only) the password itself.
   */
  readonly password: { readonly variable: string } | { readonly value: string }
  readonly permissions: Permissions
}

/** The prefix applied as `Nats.subject` and `Nats.name` apply it. */
const naming = (prefix: string) => ({
  subject: (s: string) => (prefix === "" ? s : `${prefix}.${s}`),
  name: (s: string) => (prefix === "" ? s : `${prefix}_${s}`)
})

// The platform's streams, buckets and object stores by base name (defined beside their code:
// @svc/events/Streams, @svc/webhooks/Delivery/Jobs, @svc/actors, @svc/bus/Workers, Protocol.ts,
// Egress.ts, Volumes.ts, Images.ts; this package may not import the first ones).
const EVENTS_STREAM = "EVENTS"
const DELIVERY_STREAM = "WEBHOOK_DELIVERY"
/** The actor types the runtime hosts: each has the stream `ACTOR_<TYPE>` and subjects `actor.<type>.>`. */
export const ACTOR_TYPES = ["sandbox", "app"] as const
// The app controllers' operations (@svc/apps/Apps/Operations: stream APP_OPS, subjects `appop.>`).
const APP_OPS_STREAM = "APP_OPS"
const APP_OPS_SUBJECTS = "appop.>"
/** The buckets and object store behind sandbox creates (hosts, egress, volumes, templates' builds and layers, images). */
const SANDBOX_BUCKETS = ["hosts", "egress", "volumes", "builds", "layers", "pools"] as const
const WORKERS = "workers"

/** Buckets an agent reads or writes besides hosts, and its object stores. */
const AGENT_KV_BUCKETS = ["hosts", "egress", "volumes", "builds", "layers", "pools", WORKERS] as const
const AGENT_OBJECT_STORES = ["images"] as const

/** What every client does: account info, stream lookups, its inboxes, flow control. */
const BASE_PUBLISH = [
  "$JS.API.INFO",
  "$JS.API.STREAM.INFO.*",
  "$JS.API.STREAM.NAMES",
  "$JS.API.STREAM.LIST",
  "$JS.FC.>",
  "_INBOX.>"
]

/** Declaring a stream (`ensureStream`: create, or update its settings and replicas). */
const declare = (stream: string) => [`$JS.API.STREAM.CREATE.${stream}`, `$JS.API.STREAM.UPDATE.${stream}`]

/** Creating, reading, pulling, acking and deleting consumers of one stream. */
const consume = (stream: string) => [
  `$JS.API.CONSUMER.CREATE.${stream}`,
  `$JS.API.CONSUMER.CREATE.${stream}.>`,
  `$JS.API.CONSUMER.DURABLE.CREATE.${stream}.*`,
  `$JS.API.CONSUMER.INFO.${stream}.*`,
  `$JS.API.CONSUMER.DELETE.${stream}.*`,
  `$JS.API.CONSUMER.MSG.NEXT.${stream}.*`,
  `$JS.ACK.${stream}.>`
]

/** Reading single messages (KV gets, lost jobs). */
const read = (stream: string) => [
  `$JS.API.STREAM.MSG.GET.${stream}`,
  `$JS.API.DIRECT.GET.${stream}`,
  `$JS.API.DIRECT.GET.${stream}.>`
]

/** A KV bucket used whole: declared, read, watched, written. */
const bucket = (name: (s: string) => string, b: string) => [
  ...declare(`KV_${name(b)}`),
  ...consume(`KV_${name(b)}`),
  ...read(`KV_${name(b)}`),
  `$KV.${name(b)}.>`
]

/** An object store used whole (a delete purges the object's chunks). */
const objectStore = (name: (s: string) => string, o: string) => [
  ...declare(`OBJ_${name(o)}`),
  ...consume(`OBJ_${name(o)}`),
  ...read(`OBJ_${name(o)}`),
  `$JS.API.STREAM.PURGE.OBJ_${name(o)}`,
  `$O.${name(o)}.>`
]

/** The streams of sandbox logs and metrics (SandboxTelemetry.ts). */
const telemetryStreams = (name: (s: string) => string) => [name(LOGS_STREAM), name(METRICS_STREAM)]

export type ControlPlaneRole = "api" | "runtime" | "dispatcher"

/** What a control-plane role may do (see the module's comment). */
export const controlPlanePermissions = (
  options: { readonly prefix: string; readonly role: ControlPlaneRole }
): Permissions => {
  const { name, subject } = naming(options.prefix)
  const events = name(EVENTS_STREAM)
  const delivery = name(DELIVERY_STREAM)
  switch (options.role) {
    case "api":
      return {
        publish: {
          allow: [
            ...BASE_PUBLISH,
            subject("auth.>"),
            ...consume(events),
            ...declare(delivery),
            ...[...SANDBOX_BUCKETS, WORKERS].flatMap((b) => bucket(name, b)),
            ...objectStore(name, "images"),
            ...telemetryStreams(name).flatMap((s) => [...declare(s), ...consume(s)])
          ]
        },
        subscribe: { allow: ["_INBOX.>", subject("auth.>")] }
      }
    case "runtime": {
      const actorStreams = ACTOR_TYPES.map((t) => name(`ACTOR_${t.toUpperCase()}`))
      return {
        publish: {
          allow: [
            ...BASE_PUBLISH,
            ...declare(events),
            // The app controller watches events with a consumer of its own.
            ...consume(events),
            ...declare(name(AGENT_STREAM)),
            ...actorStreams.flatMap((s) => [...declare(s), ...consume(s)]),
            ...declare(name(APP_OPS_STREAM)),
            ...consume(name(APP_OPS_STREAM)),
            // The app controller creates sandboxes as the API does.
            ...[...SANDBOX_BUCKETS, WORKERS].flatMap((b) => bucket(name, b)),
            ...objectStore(name, "images"),
            ...["evt.>", "actor.>", "agent.>", "whd.>", APP_OPS_SUBJECTS].map(subject),
            // Lifecycle lines, and a deleted sandbox's logs and metrics purged.
            ...telemetryStreams(name).flatMap((s) => [...declare(s), `$JS.API.STREAM.PURGE.${s}`]),
            subject(controlLogSubject("*"))
          ]
        },
        subscribe: { allow: ["_INBOX.>"] }
      }
    }
    case "dispatcher":
      return {
        publish: {
          allow: [
            ...BASE_PUBLISH,
            ...declare(events),
            ...consume(events),
            ...declare(delivery),
            ...consume(delivery),
            `$JS.API.CONSUMER.LIST.${delivery}`,
            `$JS.API.CONSUMER.NAMES.${delivery}`,
            `$JS.API.STREAM.MSG.GET.${delivery}`,
            `$JS.API.STREAM.MSG.DELETE.${delivery}`,
            ...bucket(name, WORKERS),
            subject("whd.>")
          ]
        },
        subscribe: { allow: ["_INBOX.>", `$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.${delivery}.*`] }
      }
  }
}

/** What the agent of `hostId` may do (see the module's comment). */
export const agentPermissions = (options: { readonly prefix: string; readonly hostId: string }): Permissions => {
  const { name, subject } = naming(options.prefix)
  const agentStream = name(AGENT_STREAM)
  const ownConsumer = name(agentConsumer(options.hostId))
  // Every bucket but hosts is read whole; of hosts, which holds each host's data-plane token, the
  // agent only declares the bucket and writes its own record: it reads no other host's.
  const readable = AGENT_KV_BUCKETS.filter((b) => b !== HOSTS_BUCKET)
  const kvStreams = readable.map((b) => `KV_${name(b)}`)
  const objectStreams = AGENT_OBJECT_STORES.map((b) => `OBJ_${name(b)}`)
  const otherStreams = [...kvStreams, ...objectStreams]
  const perStream = (stream: string) => [...declare(stream), ...read(stream), ...consume(stream)]
  return {
    publish: {
      allow: [
        ...BASE_PUBLISH,
        ...otherStreams.flatMap(perStream),
        ...declare(`KV_${name(HOSTS_BUCKET)}`),
        // Its own command consumer only: created filtered to its own subjects, pulled, acked.
        ...declare(agentStream),
        `$JS.API.CONSUMER.CREATE.${agentStream}.${ownConsumer}.${subject(`agent.${options.hostId}.>`)}`,
        `$JS.API.CONSUMER.CREATE.${agentStream}.${ownConsumer}`,
        `$JS.API.CONSUMER.DURABLE.CREATE.${agentStream}.${ownConsumer}`,
        `$JS.API.CONSUMER.INFO.${agentStream}.${ownConsumer}`,
        `$JS.API.CONSUMER.MSG.NEXT.${agentStream}.${ownConsumer}`,
        `$JS.ACK.${agentStream}.${ownConsumer}.>`,
        // Its own host record; the other buckets' keys name sandboxes, builds and layers, not hosts.
        `$KV.${name(HOSTS_BUCKET)}.${options.hostId}`,
        ...AGENT_KV_BUCKETS.filter((b) => b !== HOSTS_BUCKET).map((b) => `$KV.${name(b)}.>`),
        ...AGENT_OBJECT_STORES.map((b) => `$O.${name(b)}.>`),
        // Reports, on its own host's subjects of the sandbox actors' mailboxes only.
        subject(hostReportSubjects(options.hostId)),
        // Its sandboxes' samples and lines, on its own host's subjects only.
        ...telemetryStreams(name).flatMap(declare),
        ...hostTelemetrySubjects(options.hostId).map(subject)
      ]
    },
    subscribe: {
      allow: [
        "_INBOX.>",
        ...readable.map((b) => `$KV.${name(b)}.>`),
        ...AGENT_OBJECT_STORES.map((b) => `$O.${name(b)}.>`),
        subject(`agent.${options.hostId}.>`)
      ]
    }
  }
}

const list = (subjects: ReadonlyArray<string>) => `[${subjects.map((s) => JSON.stringify(s)).join(", ")}]`

const renderPermissions = (p: Permissions) =>
  [
    `publish: { allow: ${list(p.publish.allow)}${p.publish.deny ? `, deny: ${list(p.publish.deny)}` : ""} }`,
    `subscribe: { allow: ${list(p.subscribe.allow)}${p.subscribe.deny ? `, deny: ${list(p.subscribe.deny)}` : ""} }`
  ].join("\n      ")

/** The `authorization { users: [...] }` block of nats-server's configuration for these users. */
export const authorizationBlock = (users: ReadonlyArray<NatsUserSpec>): string =>
  [
    "authorization {",
    "  users: [",
    ...users.map((u) =>
      `    { user: ${JSON.stringify(u.user)}, password: ${
        "variable" in u.password ? `$${u.password.variable}` : JSON.stringify(u.password.value)
      }\n      permissions: {\n      ${renderPermissions(u.permissions)}\n      } }`
    ),
    "  ]",
    "}"
  ].join("\n")

/** A password variable's name for a user: `SVC_NATS_PASSWORD_<USER>` in capitals, non-alphanumerics as `_`. */
export const passwordVariable = (user: string) => `SVC_NATS_PASSWORD_${user.toUpperCase().replace(/[^A-Z0-9]/g, "_")}`

/**
 * The users of a platform: api, runtime, dispatcher, and one `agent-<hostId>` per host; each
 * password from `password(user)` (default: the server's variable `passwordVariable(user)`).
 */
export const platformUsers = (options: {
  readonly prefix: string
  readonly hostIds: ReadonlyArray<string>
  readonly password?: (user: string) => NatsUserSpec["password"]
}): ReadonlyArray<NatsUserSpec> => {
  const password = options.password ?? ((user: string) => ({ variable: passwordVariable(user) }))
  return [
    ...(["api", "runtime", "dispatcher"] as const).map((role) => ({
      user: role,
      password: password(role),
      permissions: controlPlanePermissions({ prefix: options.prefix, role })
    })),
    ...options.hostIds.map((hostId) => ({
      user: agentUser(hostId),
      password: password(agentUser(hostId)),
      permissions: agentPermissions({ prefix: options.prefix, hostId })
    }))
  ]
}

/** The NATS user of the agent of `hostId`. */
export const agentUser = (hostId: string) => `agent-${hostId}`
