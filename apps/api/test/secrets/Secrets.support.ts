/**
 * The stack of the secrets tests: a real Postgres and NATS, the API over HTTP with the outbox
 * relay running (so the `egress` KV entries really land in the bucket), two orgs each with a
 * user, keys of any scopes minted for that user or as userless service keys, a service key listed
 * in `SVC_SECRET_MANAGER_API_KEY_IDS`, a managers file (`SVC_SECRET_MANAGER_API_KEY_IDS_FILE`)
 * the tests rewrite while the API runs, and every log line of the API captured.
 */
import * as Actors from "@svc/actors/Actors"
import { ApiKeys } from "@svc/auth/ApiKeys"
import { operatorContext } from "@svc/auth/Audit"
import * as AuthLayer from "@svc/auth/AuthLayer"
import { Users } from "@svc/auth/Users"
import { Nats } from "@svc/bus/Nats"
import { SecretBox } from "@svc/crypto/SecretBox"
import type { OrgId, UserId } from "@svc/domain/Ids"
import { OutboxRelay } from "@svc/events/Relay"
import * as Events from "@svc/events/Streams"
import { EGRESS_BUCKET } from "@svc/host-protocol/Egress"
import { SandboxActor } from "@svc/sandboxes/SandboxActor"
import { eventually } from "@svc/testing/Eventually"
import * as TestDatabase from "@svc/testing/TestDatabase"
import { type Answer, call, serve } from "@svc/testing/TestHttp"
import * as TestNats from "@svc/testing/TestNats"
import { ConfigProvider, Context, Duration, Effect, Layer, Logger, References } from "effect"
import { HttpRouter } from "effect/http"
import * as Fs from "node:fs/promises"
import * as Os from "node:os"
import * as NodePath from "node:path"
import * as Server from "../../src/Server.ts"

export type { Answer }

export interface Org {
  readonly id: OrgId
  readonly userId: UserId
}

export class Stack extends Context.Service<Stack, {
  readonly base: string
  readonly a: Org
  readonly b: Org
  /** A key of `org` with `scopes`: the user's (default) or a userless service key. */
  key(org: Org, scopes: ReadonlyArray<string>, owner?: "user" | "service"): Effect.Effect<{ id: string; token: string }>
  /** The `*` service key of org A listed in SVC_SECRET_MANAGER_API_KEY_IDS. */
  readonly listedByEnv: { readonly id: string; readonly token: string }
  /** Replaces the managers file's contents. */
  writeManagersFile(ids: ReadonlyArray<string>): Effect.Effect<void>
  /** The `egress` entry under `key` (`secret.<id>`, `sandbox.<id>`) as raw text, or null when none. */
  egress(key: string): Effect.Effect<string | null>
  /** Every log line so far. */
  readonly logs: ReadonlyArray<string>
  readonly box: SecretBox["Service"]
}>()("test/Secrets/Stack") {}

export const request = (
  base: string,
  token: string,
  method: string,
  path: string,
  body?: unknown,
  headers?: Record<string, string>
) =>
  call(base, method, path, {
    token,
    ...(body !== undefined ? { body } : {}),
    ...(headers !== undefined ? { headers } : {})
  })

export const StackLayer = Layer.unwrap(Effect.gen(function*() {
  const logs: Array<string> = []
  // Every log line of the API at every level, request logs included.
  const captureLogs = Layer.mergeAll(
    Logger.layer([Logger.map(Logger.formatLogFmt, (line) => void logs.push(String(line)))], {
      mergeWithExisting: false
    }),
    Layer.succeed(References.MinimumLogLevel, "Trace")
  )
  return Layer.effect(
    Stack,
    Effect.gen(function*() {
      const users = yield* Users
      const keys = yield* ApiKeys
      const nats = yield* Nats
      const box = yield* SecretBox
      const signUp = (email: string, orgName: string) =>
        Effect.map(
          Effect.orDie(users.signUp({ email, password: "correct horse battery", orgName }, {
            ip: null,
            userAgent: null
          })),
          ({ org, user }): Org => ({ id: org.id, userId: user.id })
        )
      const a = yield* signUp("secrets-a@example.com", "A")
      const b = yield* signUp("secrets-b@example.com", "B")
      const key = (org: Org, scopes: ReadonlyArray<string>, owner: "user" | "service" = "user") =>
        Effect.map(
          Effect.orDie(keys.mint({
            orgId: org.id,
            userId: owner === "user" ? org.userId : null,
            name: scopes.join(" "),
            scopes
          }, operatorContext)),
          (k) => ({ id: k.id, token: k.token })
        )
      const listedByEnv = yield* key(a, ["*"], "service")

      const dir = yield* Effect.promise(() => Fs.mkdtemp(NodePath.join(Os.tmpdir(), "svc-secrets-test-")))
      yield* Effect.addFinalizer(() => Effect.promise(() => Fs.rm(dir, { recursive: true, force: true })))
      const managersFile = NodePath.join(dir, "managers")
      const writeManagersFile = (ids: ReadonlyArray<string>) =>
        Effect.promise(() => Fs.writeFile(managersFile, ids.join("\n") + "\n"))
      yield* writeManagersFile([])

      const settings = ConfigProvider.layerAdd(
        ConfigProvider.fromUnknown({
          SVC_RATE_LIMIT_PER_SECOND: "100000",
          SVC_RATE_LIMIT_BURST: "100000",
          SVC_SECRET_MANAGER_API_KEY_IDS: listedByEnv.id,
          SVC_SECRET_MANAGER_API_KEY_IDS_FILE: managersFile
        }),
        { asPrimary: true }
      )
      const base = yield* serve(
        HttpRouter.serve(Server.Routes, { disableListenLog: true }).pipe(Layer.provide(settings))
      )
      // No runtime runs here (sandboxes stay pending), but the relay publishes the actor's messages
      // and the sandboxes' events before the KV rows that follow them: their streams must exist.
      yield* Actors.ensure(SandboxActor)
      yield* Events.ensure()
      yield* Layer.build(OutboxRelay.layerWith({ pollInterval: Duration.millis(100) }))

      const kv = yield* Effect.promise(() => nats.kvm.open(nats.name(EGRESS_BUCKET)))
      const egress = (k: string) =>
        Effect.promise(async () => {
          const entry = await kv.get(k)
          return entry === null || entry.operation !== "PUT" ? null : entry.string()
        })
      return Stack.of({ base, a, b, key, listedByEnv, writeManagersFile, egress, logs, box })
    })
  ).pipe(
    Layer.provideMerge(AuthLayer.operatorLayer),
    Layer.provideMerge(Layer.mergeAll(TestDatabase.layerWithUrl, TestNats.layer, SecretBox.layer)),
    Layer.provide(captureLogs)
  )
}))

/** Polls until the entry under `key` satisfies `check` (the relay publishes after commit). */
export const egressUntil = (key: string, check: (text: string | null) => boolean) =>
  Effect.flatMap(Effect.service(Stack), (stack) => eventually(stack.egress(key), check, Duration.seconds(20)))
