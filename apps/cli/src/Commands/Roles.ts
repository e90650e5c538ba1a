/**
 * One role of the platform per process, for operators who scale a role by starting more of it.
 * Each reads DATABASE_URL and NATS_URL (and its own settings) from the environment.
 */
import { Layer } from "effect"
import { Command } from "effect/cli"
import { ApiRole, Infrastructure } from "../Platform.ts"

const role = (name: string, description: string, layer: Layer.Layer<never, unknown, never>) =>
  Command.make(name, {}, () => Layer.launch(layer)).pipe(Command.withDescription(description))

export const api = role(
  "api",
  "Serve the HTTP API (SVC_HOST:SVC_PORT) against DATABASE_URL and NATS_URL",
  ApiRole.pipe(Layer.provide(Infrastructure)) as Layer.Layer<never, unknown, never>
)

export const roles = [api]
