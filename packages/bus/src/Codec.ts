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

/**
 * A Schema that decodes and encodes without services: what every message, actor state and event
 * is, so its codec runs anywhere.
 */
export type JsonSchema = Schema.Top & { readonly DecodingServices: never; readonly EncodingServices: never }

/**
 * The one typed JSON codec: `encode`/`decode` go between a value and JSON text, `encodeValue`
 * gives the encoded (JSON-ready) value for an envelope that is serialized later.
 */
export interface JsonCodec<T, E> {
  readonly encode: (value: T) => Effect.Effect<string, Schema.SchemaError>
  readonly decode: (input: unknown) => Effect.Effect<T, Schema.SchemaError>
  readonly encodeValue: (value: T) => Effect.Effect<E, Schema.SchemaError>
}

// One codec per schema: a mailbox send asks for it per message.
const codecs = new WeakMap<JsonSchema, JsonCodec<unknown, unknown>>()

export const jsonCodec = <S extends JsonSchema>(schema: S): JsonCodec<S["Type"], S["Encoded"]> => {
  let codec = codecs.get(schema)
  if (codec === undefined) {
    const json = Schema.fromJsonString(schema)
    codec = {
      encode: Schema.encodeEffect(json),
      decode: Schema.decodeUnknownEffect(json),
      encodeValue: Schema.encodeEffect(schema)
    }
    codecs.set(schema, codec)
  }
  return codec
}

export const encodeJson = <S extends JsonSchema>(schema: S) => {
  const { encode } = jsonCodec(schema)
  return (value: S["Type"]) => Effect.map(Effect.orDie(encode(value)), (s) => encoder.encode(s))
}

export const decodeJson = <S extends JsonSchema>(schema: S) => {
  const { decode } = jsonCodec(schema)
  return (subject: string, bytes: Uint8Array): Effect.Effect<S["Type"], DecodeError> =>
    Effect.mapError(decode(decoder.decode(bytes)), (e) => new DecodeError({ subject, message: e.message }))
}

/**
 * Publishes to JetStream and waits for the stream's acknowledgement. `msgID` makes the publish
 * idempotent within the stream's duplicate window.
 */
export const publish = <S extends JsonSchema>(schema: S) => {
  const encode = encodeJson(schema)
  return Effect.fn("Bus.publish")(function*(subject: string, value: S["Type"], options?: { readonly msgID?: string }) {
    const nats = yield* Nats
    const bytes = yield* encode(value)
    return yield* nats.publishAcked(subject, bytes, options?.msgID ? { msgId: options.msgID } : undefined)
  })
}

export const decodeMessage = <S extends JsonSchema>(schema: S) => {
  const decode = decodeJson(schema)
  return (msg: JsMsg) => decode(msg.subject, msg.data)
}
