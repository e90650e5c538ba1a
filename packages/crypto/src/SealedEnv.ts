/**
 * A sandbox's env may hold credentials (an injected `sandbox:<id>` key,
 * docs/contract.md#single-sandbox-scope), so it is never stored or sent in the clear: the API seals
 * it (SecretBox, `SVC_ENCRYPTION_KEYS`) before it enters the outbox, the `Create` message and the
 * agent's `create` command carry it sealed (the runtime passes it on without opening it), the agent
 * opens it in memory, and the driver keeps it sealed again in `sandbox.json`, opening it when an
 * exec needs it.
 *
 * The sealed text is bound (SecretBox `aad`) to the sandbox id and to where it lives, `transit`
 * (the message and the command) or `host` (`sandbox.json`): a sealed env copied to another
 * sandbox, or from a command into a record, does not open.
 */
import { Effect, Schema } from "effect"
import type { SecretBox } from "./SecretBox.ts"

export type EnvPlace = "transit" | "host"

/** An env that does not open here; the message names the reason, never a value. */
export class SealedEnvError extends Schema.TaggedError<SealedEnvError>()("SealedEnvError", {
  message: Schema.String
}) {}

const EnvJson = Schema.fromJsonString(Schema.Record(Schema.String, Schema.String))
const decodeEnv = Schema.decodeUnknownEffect(EnvJson)

const aad = (place: EnvPlace, sandboxId: string) => `sandbox.env.${place}:${sandboxId}`

export const sealEnv = (
  box: SecretBox["Service"],
  place: EnvPlace,
  sandboxId: string,
  env: Readonly<Record<string, string>>
): Effect.Effect<string> => box.seal(JSON.stringify(env), aad(place, sandboxId))

export const openEnv = (
  box: SecretBox["Service"],
  place: EnvPlace,
  sandboxId: string,
  sealed: string
): Effect.Effect<Record<string, string>, SealedEnvError> =>
  box.open(sealed, aad(place, sandboxId)).pipe(
    Effect.mapError((e) => new SealedEnvError({ message: `the env does not open (${e.reason}: ${e.message})` })),
    Effect.flatMap((text) =>
      // Only a bug could get here: the issue would quote the text, so it is not passed on.
      decodeEnv(text).pipe(
        Effect.mapError(() => new SealedEnvError({ message: "the opened env is not a map of strings" }))
      )
    )
  )
