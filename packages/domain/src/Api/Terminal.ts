/**
 * The terminal (docs/contract.md#terminal): `GET /terminal?token=&sandbox_id=&cols=&rows=`
 * upgrades to a WebSocket carrying a terminal in the sandbox. The only route that takes its key
 * in `?token=` (browsers cannot set headers on a WebSocket); the key is checked as a header key
 * is, and needs `sandboxes:write` on the sandbox. Refusals come before the upgrade, as JSON.
 *
 * Once open, binary frames are the terminal's bytes both ways and text frames are the JSON
 * control messages below: the API, the SDK and the dashboard read and write them through these
 * schemas (the API ↔ agent side is the binary `@svc/host-protocol/PtyFrames`).
 */
import { Schema } from "effect"
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "effect/http-api"
import { Conflict, CsrfRejected, InvalidRequest, NotFound, SandboxOutOfScope, Unavailable } from "../Errors.ts"
import { SandboxId } from "../Ids.ts"
import { Bounded, enforcedMax } from "../Text.ts"
import { Access } from "./Auth.ts"

const Size = Schema.String.check(
  enforcedMax(4),
  Schema.isPattern(/^[1-9]\d{0,3}$/, { message: "an integer from 1 to 1000" }),
  Schema.makeFilter((s: string) => Number(s) <= 1000 || "an integer from 1 to 1000")
)

/** A terminal dimension: an integer from 1 to 1000. */
const Dimension = Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 1000 }))

/** Client → server: the terminal's new size. Any other text frame is ignored. */
export const TerminalResize = Schema.Struct({ type: Schema.Literal("resize"), cols: Dimension, rows: Dimension })
export type TerminalResize = typeof TerminalResize.Type

/** Server → client: the shell's exit code, the last message before the close. */
export const TerminalExit = Schema.Struct({ type: Schema.Literal("exit"), code: Schema.Int })
export type TerminalExit = typeof TerminalExit.Type

/** A text frame as JSON, each way. */
export const TerminalResizeJson = Schema.fromJsonString(TerminalResize)
export const TerminalExitJson = Schema.fromJsonString(TerminalExit)

export const TerminalQuery = Schema.Struct({
  sandbox_id: SandboxId,
  cols: Schema.optionalKey(Size),
  rows: Schema.optionalKey(Size),
  /** The key; the Authorization middleware reads it (here only). */
  token: Schema.optionalKey(Bounded(256))
})

export class TerminalApi extends HttpApiGroup.make("terminal")
  .add(
    HttpApiEndpoint.get("open", "/terminal", {
      query: TerminalQuery,
      success: HttpApiSchema.Empty(101),
      error: [InvalidRequest, NotFound, Conflict, SandboxOutOfScope, CsrfRejected, Unavailable]
    }).annotateMerge(OpenApi.annotations({
      description: "A WebSocket (`Upgrade: websocket`) carrying a terminal (a login shell, `TERM=xterm-256color`) in " +
        "the running sandbox, `cols`×`rows` (default 80×24, at most 1000). Binary frames both ways are the " +
        "terminal's bytes; text frames are JSON: `{type: \"resize\", cols, rows}` from the client, `{type: \"exit\", " +
        "code}` from the server as the last message. The key (`?token=` or `Authorization`) needs " +
        "`sandboxes:write` on the sandbox (a `sandbox:<id>` key works); a revoked or expired key closes an open " +
        "terminal (close code 4401). The sandbox stopping ends it. Refused before the upgrade: 401, 403 " +
        "(`insufficient_scope`, `sandbox_out_of_scope`), 404, 409 (not running), 400 (not a WebSocket upgrade, " +
        "bad `cols`/`rows`)."
    }))
  )
  .annotateMerge(Access.resource("sandboxes", { action: "write" }))
  .annotateMerge(OpenApi.annotations({ title: "Terminal" }))
{}
