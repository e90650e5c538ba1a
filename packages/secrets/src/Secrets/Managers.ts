/**
 * Which userless service keys may manage org secrets (docs/contract.md#secrets-scopes): the ids of
 * `SVC_SECRET_MANAGER_API_KEY_IDS` and of the file `SVC_SECRET_MANAGER_API_KEY_IDS_FILE` names,
 * read again at every check (an operator rotating a listed key adds the replacement's id, moves
 * to it, then removes the old id, with no restart). The decision itself is
 * `@svc/auth/Authorization.mayManageSecrets`.
 *
 * Fails closed: a file that cannot be read, or holds something that is not a key id, lists no
 * one (a warning says why, without the file's contents); the variable's own ids still count.
 */
import { ConfigProvider, Context, Effect, Layer } from "effect"
import * as Fs from "node:fs/promises"
import { parseKeyIds, SecretManagerKeyIds, SecretManagerKeyIdsFile } from "../Config.ts"

export class SecretManagers extends Context.Service<SecretManagers, {
  /** The listed key ids, as the settings say now. */
  readonly listed: Effect.Effect<ReadonlySet<string>>
}>()("@svc/secrets/Secrets/Managers") {
  static readonly make = Effect.gen(function*() {
    // The provider the process was configured with, asked again at every check.
    const provider = yield* ConfigProvider.ConfigProvider
    const fromFile = (path: string) =>
      Effect.tryPromise(() => Fs.readFile(path, "utf8")).pipe(
        Effect.map((text) => parseKeyIds(text)),
        Effect.flatMap((ids) =>
          typeof ids === "string"
            ? Effect.as(Effect.logWarning("SVC_SECRET_MANAGER_API_KEY_IDS_FILE holds something else than key ids"), [])
            : Effect.succeed(ids)
        ),
        Effect.catchCause(() =>
          Effect.as(
            Effect.logWarning("SVC_SECRET_MANAGER_API_KEY_IDS_FILE cannot be read; it lists no key", { path }),
            []
          )
        )
      )
    const listed = Effect.gen(function*() {
      const ids = yield* SecretManagerKeyIds.parse(provider).pipe(
        Effect.catchCause(() =>
          Effect.as(Effect.logWarning("SVC_SECRET_MANAGER_API_KEY_IDS is not a list of key ids; it lists no key"), [])
        )
      )
      const path = yield* SecretManagerKeyIdsFile.parse(provider).pipe(Effect.orElseSucceed(() => ""))
      const more = path === "" ? [] : yield* fromFile(path)
      return new Set([...ids, ...more]) as ReadonlySet<string>
    })
    // Read once at start as well: a malformed setting is in the log from the first moment.
    yield* listed
    return SecretManagers.of({ listed })
  })

  static readonly layer = Layer.effect(SecretManagers, SecretManagers.make)
}
