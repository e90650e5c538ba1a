/**
 * Typed messages: a Schema per subject family, JSON on the wire. Publishing encodes, consuming
 * decodes, and a message that fails to decode is a typed error the consumer can dead-letter
 * instead of crashing on.
 */
import type { JsMsg } from "@nats-io/jetstream"
import { Effect, Schema } from "effect"
import { Nats } from "./Nats.ts"

export class DecodeError extends Schema.TaggedError<DecodeError>()("DecodeError", {
  subject: Schema.String,
  message: Schema.String
}) {}

const encoder = new TextEncoder()
const decoder = new TextDecoder()

export const encodeJson = <S extends Schema.Top>(schema: S) => {
  const encode = Schema.encodeUnknownEffect(Schema.fromJsonString(schema as any))
  return (value: S["Type"]) => Effect.map(Effect.orDie(encode(value)), (s) => encoder.encode(s as string))
}

export const decodeJson = <S extends Schema.Top>(schema: S) => {
  const decode = Schema.decodeUnknownEffect(Schema.fromJsonString(schema as any))
  return (subject: string, bytes: Uint8Array): Effect.Effect<S["Type"], DecodeError> =>
    Effect.mapError(
      decode(decoder.decode(bytes)) as Effect.Effect<S["Type"], Schema.SchemaError>,
      (e) => new DecodeError({ subject, message: e.message })
    )
}

/**
 * Publishes to JetStream and waits for the stream's acknowledgement. `msgID` makes the publish
 * idempotent within the stream's duplicate window.
 */
export const publish = <S extends Schema.Top>(schema: S) => {
  const encode = encodeJson(schema)
  return Effect.fn("Bus.publish")(function*(subject: string, value: S["Type"], options?: { readonly msgID?: string }) {
    const nats = yield* Nats
    const bytes = yield* encode(value)
    return yield* nats.publishAcked(subject, bytes, options?.msgID ? { msgId: options.msgID } : undefined)
  })
}

export const decodeMessage = <S extends Schema.Top>(schema: S) => {
  const decode = decodeJson(schema)
  return (msg: JsMsg) => decode(msg.subject, msg.data)
}
