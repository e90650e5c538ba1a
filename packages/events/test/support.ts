/** Helpers for tests that read what reached a stream. */
import { Nats } from "@svc/bus/Nats"
import { Effect } from "effect"

export interface StreamMessage {
  readonly seq: number
  readonly subject: string
  readonly msgId: string | undefined
  readonly text: string
}

/** Every message currently stored in a stream (by full name), in stream order. */
export const readStream = (stream: string) =>
  Effect.gen(function*() {
    const nats = yield* Nats
    const info = yield* Effect.promise(() => nats.jsm.streams.info(stream))
    const out: Array<StreamMessage> = []
    for (let seq = info.state.first_seq; seq <= info.state.last_seq && info.state.messages > 0; seq++) {
      const m = yield* Effect.promise(() => nats.jsm.streams.getMessage(stream, { seq }).catch(() => null))
      if (m === null) continue
      out.push({
        seq: m.seq,
        subject: m.subject,
        msgId: m.header?.get("Nats-Msg-Id") || undefined,
        text: new TextDecoder().decode(m.data)
      })
    }
    return out
  })
