/**
 * The operator's commands in the repository's `svc`: `svc dev`, one per role, `svc org create`,
 * `svc key create`. Defined here light (their names, flags and help), each loads what it runs
 * only when it runs: the dev stack (`Dev.ts`), a role (`../Platform.ts`), the identity services
 * on DATABASE_URL (`../Operator.ts`). So `svc --help` and the user's commands never load the
 * server.
 *
 * A role runs as its `main.ts` does (`node apps/<role>/src/main.ts`), for operators who scale a
 * role by starting more of it; each reads DATABASE_URL and NATS_URL (and its own settings).
 */
import { OrgId } from "@svc/domain/Ids"
import { Name } from "@svc/domain/Text"
import { Timestamp } from "@svc/domain/Time"
import { Effect, Layer } from "effect"
import { Argument, Command, Flag } from "effect/cli"
import { VERSION } from "../Cli.ts"
import type * as Platform from "../Platform.ts"

const dev = Command.make(
  "dev",
  {},
  // Dev.ts's own command, run as it is once loaded.
  () =>
    Effect.flatMap(
      Effect.promise(() => import("./Dev.ts")),
      ({ dev }) => Command.runWith(dev, { version: VERSION })([])
    )
).pipe(Command.withDescription("Run NATS, Postgres and every role of the platform on this machine"))

const role = <A, E>(name: string, description: string, layerOf: (platform: typeof Platform) => Layer.Layer<A, E>) =>
  Command.make(
    name,
    {},
    () => Effect.flatMap(Effect.promise(() => import("../Platform.ts")), (platform) => Layer.launch(layerOf(platform)))
  ).pipe(Command.withDescription(description))

const roles = [
  role("api", "Serve the HTTP API on SVC_HOST:SVC_PORT", (p) => p.ApiRole),
  role("runtime", "Run sandbox actors, the outbox relay and the supervisor", (p) => p.RuntimeRole),
  role("dispatcher", "Fan events out to webhooks and deliver them", (p) => p.DispatcherRole),
  role("agent", "Run this machine's host agent (SVC_HOST_ID, SVC_REGION, ...)", (p) => p.AgentRoleLayer)
]

const operator = () => Effect.promise(() => import("../Operator.ts"))

const orgCreate = Command.make(
  "create",
  {
    name: Argument.String("name").pipe(
      Argument.withDescription("The org's name (1 to 120 characters)"),
      Argument.withSchema(Name(120))
    ),
    json: Flag.Boolean("json").pipe(
      Flag.withDescription("Print {org_id, key_id, api_key} as JSON"),
      Flag.withDefault(false)
    )
  },
  (o) => Effect.flatMap(operator(), ({ createOrg }) => createOrg(o))
).pipe(
  Command.withDescription("Operator: create an org against DATABASE_URL; prints its bootstrap full-access key")
)

const keyCreate = Command.make(
  "create",
  {
    org: Flag.String("org").pipe(Flag.withDescription("The org id (org_...)"), Flag.withSchema(OrgId)),
    name: Flag.String("name").pipe(
      Flag.withDescription("The key's name (1 to 120 characters)"),
      Flag.withSchema(Name(120))
    ),
    scopes: Flag.String("scope").pipe(
      Flag.withDescription("A scope token (repeatable): *, sandboxes:read, secrets:use, sandbox:<id>, ... (default *)"),
      Flag.atLeast(0)
    ),
    expiresAt: Flag.String("expires-at").pipe(
      Flag.withDescription("ISO 8601 expiry, in the future (default: never)"),
      Flag.withSchema(Timestamp),
      Flag.optional
    ),
    json: Flag.Boolean("json").pipe(Flag.withDescription("Print {key_id, api_key} as JSON"), Flag.withDefault(false))
  },
  (o) => Effect.flatMap(operator(), ({ createKey }) => createKey(o))
).pipe(
  Command.withDescription("Operator: mint a userless service key for an org against DATABASE_URL; prints its token")
)

export const operatorCommands = { top: [dev, ...roles], org: [orgCreate], key: [keyCreate] } as const
