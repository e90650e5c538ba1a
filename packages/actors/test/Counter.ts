/** A counter-like actor for the runtime's tests: it records the tags it applied, in order. */
import * as Actor from "@svc/actors/Actor"
import { Schema } from "effect"

export const CounterState = Schema.Struct({
  count: Schema.Int,
  seen: Schema.Array(Schema.String)
})

export const CounterMessage = Schema.Union([
  Schema.TaggedStruct("Add", { n: Schema.Int, tag: Schema.String }),
  /** Adds `n` here and forwards `n` to another counter (through the outbox). */
  Schema.TaggedStruct("Forward", { n: Schema.Int, tag: Schema.String, to: Schema.String }),
  /** Emits a domain event for the org. */
  Schema.TaggedStruct("Notify", { orgId: Schema.String, tag: Schema.String }),
  /** The transition throws on it. */
  Schema.TaggedStruct("Boom", {})
])

export const make = (partitions: number, store?: Actor.ActorStore<typeof CounterState.Type>) => {
  const counter: Actor.Actor<typeof CounterState, typeof CounterMessage> = Actor.make({
    type: "counter",
    partitions,
    state: CounterState,
    message: CounterMessage,
    ...(store ? { store } : {}),
    transition: (state, message, ctx) => {
      const current = state ?? { count: 0, seen: [] }
      switch (message._tag) {
        case "Add":
          return Actor.next({ count: current.count + message.n, seen: [...current.seen, message.tag] })
        case "Forward":
          return Actor.next(
            { count: current.count + message.n, seen: [...current.seen, message.tag] },
            Actor.send(counter, message.to, { _tag: "Add", n: message.n, tag: `${message.tag}<-${ctx.id}` })
          )
        case "Notify":
          return Actor.next(
            { count: current.count, seen: [...current.seen, message.tag] },
            Actor.emit({
              event: "counter.notified",
              orgId: message.orgId,
              data: { counter_id: ctx.id, count: current.count }
            })
          )
        case "Boom":
          throw new Error("boom")
      }
    }
  })
  return counter
}

export const Counter = make(4)
