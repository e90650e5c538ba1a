/**
 * NATS users and their subject permissions, rendered as a nats-server `authorization` block.
 *
 * Two kinds of user:
 * - control plane (api, runtime, dispatcher): one user per role; they own the platform's
 *   streams and buckets and may publish and subscribe anywhere under it;
 * - agents: one user per host, confined to what that host needs. It may write only its own host
 *   record (`$KV.<hosts>.<hostId>`), create and pull only its own command consumer on the AGENT
 *   stream (`agent_<hostId>`, filtered to `agent.<hostId>.>`) and ack only that consumer's
 *   messages; it may not delete, purge or remove messages from any stream. An agent's reports go
 *   to sandbox actors' mailboxes (`actor.sandbox.<partition>.<sandboxId>`), whose subjects name
 *   no host: the sandbox actor ignores a report from a host other than the sandbox's own.
 *
 * Passwords are not in the block: each names an environment variable of the server
 * (`password: $SVC_NATS_PASSWORD_AGENT_H1`), which nats-server reads at start-up, so the
 * configuration file holds no secret.
 */
import { AGENT_STREAM, agentConsumer, HOSTS_BUCKET } from "./Protocol.ts"

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

/** Streams an agent reads or writes besides AGENT: the KV buckets and object store of its packages. */
const AGENT_KV_BUCKETS = ["hosts", "egress", "volumes", "builds", "layers", "workers"] as const
const AGENT_OBJECT_STORES = ["images"] as const

/** The control plane: everything under the platform (one user per role, so that each can be revoked alone). */
export const controlPlanePermissions = (): Permissions => ({
  publish: { allow: [">"] },
  subscribe: { allow: [">"] }
})

/** What the agent of `hostId` may do (see the module's comment). */
export const agentPermissions = (options: { readonly prefix: string; readonly hostId: string }): Permissions => {
  const { name, subject } = naming(options.prefix)
  const agentStream = name(AGENT_STREAM)
  const ownConsumer = name(agentConsumer(options.hostId))
  const kvStreams = AGENT_KV_BUCKETS.map((b) => `KV_${name(b)}`)
  const objectStreams = AGENT_OBJECT_STORES.map((b) => `OBJ_${name(b)}`)
  const otherStreams = [...kvStreams, ...objectStreams]
  const perStream = (stream: string) => [
    `$JS.API.STREAM.CREATE.${stream}`,
    `$JS.API.STREAM.UPDATE.${stream}`,
    `$JS.API.STREAM.MSG.GET.${stream}`,
    `$JS.API.DIRECT.GET.${stream}`,
    `$JS.API.DIRECT.GET.${stream}.>`,
    `$JS.API.CONSUMER.CREATE.${stream}`,
    `$JS.API.CONSUMER.CREATE.${stream}.>`,
    `$JS.API.CONSUMER.DURABLE.CREATE.${stream}.*`,
    `$JS.API.CONSUMER.INFO.${stream}.*`,
    `$JS.API.CONSUMER.DELETE.${stream}.*`,
    `$JS.API.CONSUMER.MSG.NEXT.${stream}.*`,
    `$JS.ACK.${stream}.>`
  ]
  return {
    publish: {
      allow: [
        "$JS.API.INFO",
        "$JS.API.STREAM.INFO.*",
        "$JS.API.STREAM.NAMES",
        "$JS.API.STREAM.LIST",
        "$JS.FC.>",
        "_INBOX.>",
        ...otherStreams.flatMap(perStream),
        // Its own command consumer only: created filtered to its own subjects, pulled, acked.
        `$JS.API.STREAM.CREATE.${agentStream}`,
        `$JS.API.STREAM.UPDATE.${agentStream}`,
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
        // Reports to the sandbox actors' mailboxes.
        subject("actor.sandbox.>")
      ]
    },
    subscribe: { allow: ["_INBOX.>", "$KV.>", "$O.>", subject("agent.>")] }
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
    ...["api", "runtime", "dispatcher"].map((role) => ({
      user: role,
      password: password(role),
      permissions: controlPlanePermissions()
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
