import { Schema } from "effect"

/** A stored state that does not decode with the actor's state Schema (or a new one that does not encode). */
export class CorruptState extends Schema.TaggedError<CorruptState>()("CorruptState", {
  type: Schema.String,
  id: Schema.String,
  message: Schema.String
}) {}

export { InvalidActorMessage } from "@svc/bus/Mailbox"
