/**
 * Sandbox processes (docs/contract.md#sandbox-processes): streamed exec's events, and background
 * processes that outlive their request. The `sandboxes` scope (`read` for GET, `write`
 * otherwise) and the single-sandbox policy, as every sandbox route.
 */
import { Schema } from "effect"
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "effect/http-api"
import { Conflict, InvalidRequest, NotFound, PayloadTooLarge, SandboxOutOfScope, Unavailable } from "../Errors.ts"
import { SandboxId } from "../Ids.ts"
import { ExecRequest } from "../Sandbox.ts"
import { Bounded, TimestampText } from "../Text.ts"
import { Access } from "./Auth.ts"

/** Bytes one POST .../stdin may carry. */
export const MAX_STDIN_BYTES = 1024 * 1024
/** Output kept per stream of a background process. */
export const PROCESS_OUTPUT_KEPT_BYTES = 1024 * 1024

/**
 * One server-sent event of a command: `stdout` and `stderr` (data `{"data": "<base64>"}`), then
 * one `exit` (`{exit_code, duration_ms, reason?}`); `error` (`{error, code}`) when the sandbox's
 * host stopped answering midway (the stream ends there).
 */
export const ProcessEvent = Schema.Struct({
  id: Schema.optional(Bounded(64)),
  event: Schema.Literals(["stdout", "stderr", "exit", "error"]),
  /** A chunk of output, base64: what one read of a pipe gives, far below this. */
  data: Bounded(8 * 1024 * 1024)
})
export type ProcessEvent = typeof ProcessEvent.Type

export const ProcessEvents = HttpApiSchema.StreamSse({ events: ProcessEvent })

export class StartProcessBody extends Schema.Class<StartProcessBody>("StartProcessRequest")({
  cmd: ExecRequest.fields.cmd,
  cwd: ExecRequest.fields.cwd,
  env: ExecRequest.fields.env,
  /** Keep its stdin open for POST .../stdin (default false: it reads end of file). */
  stdin: Schema.optionalKey(Schema.Boolean)
}) {}

/**
 * `reason`, once it has exited: `exited` (on its own), `killed` (a signal; `exit_code` is 128 +
 * the signal), `sandbox_stopped` (its sandbox stopped or was deleted under it).
 */
export const SandboxProcess = Schema.Struct({
  pid: Schema.Int,
  cmd: ExecRequest.fields.cmd,
  state: Schema.Literals(["running", "exited"]),
  exit_code: Schema.NullOr(Schema.Int),
  startedAt: TimestampText,
  exitedAt: Schema.NullOr(TimestampText),
  reason: Schema.NullOr(Schema.Literals(["exited", "killed", "sandbox_stopped"]))
}).annotate({ identifier: "SandboxProcess" })
export type SandboxProcess = typeof SandboxProcess.Type

/** A sandbox's processes as its agent keeps them: far fewer than this. */
export const MAX_PROCESS_LIST = 10_000

export const ProcessList = Schema.Struct({
  processes: Schema.Array(SandboxProcess).check(Schema.isMaxLength(MAX_PROCESS_LIST))
})

export class SignalBody extends Schema.Class<SignalBody>("SignalRequest")({
  signal: Schema.Literals(["INT", "TERM", "KILL", "HUP"])
}) {}

const Flag = Schema.Literals(["true", "false"])

const params = { id: SandboxId }
const processParams = { id: SandboxId, pid: Bounded(64) }
const errors = [InvalidRequest, NotFound, Conflict, PayloadTooLarge, SandboxOutOfScope, Unavailable] as const

export class ProcessesApi extends HttpApiGroup.make("processes")
  .add(
    HttpApiEndpoint.post("start", "/v1/sandboxes/:id/processes", {
      params,
      payload: StartProcessBody,
      success: SandboxProcess.pipe(HttpApiSchema.status(201)),
      error: errors
    }).annotateMerge(OpenApi.annotations({
      description: "Starts a background process (201, `state: running`): it outlives the request, its output is " +
        "kept (the last 1 MiB of each stream), it ends with its sandbox (`reason: sandbox_stopped`). 409 unless " +
        "the sandbox is running, or when it runs 64 background processes already. `stdin: true` keeps its stdin " +
        "open for POST .../stdin."
    })),
    HttpApiEndpoint.get("list", "/v1/sandboxes/:id/processes", {
      params,
      success: ProcessList,
      error: errors
    }).annotateMerge(OpenApi.annotations({
      description: "Newest first: the running ones and those that exited in the last 15 minutes (at most 100)."
    })),
    HttpApiEndpoint.get("get", "/v1/sandboxes/:id/processes/:pid", {
      params: processParams,
      success: SandboxProcess,
      error: errors
    }),
    HttpApiEndpoint.get("output", "/v1/sandboxes/:id/processes/:pid/output", {
      params: processParams,
      query: Schema.Struct({ follow: Schema.optionalKey(Flag) }),
      success: ProcessEvents,
      error: errors
    }).annotateMerge(OpenApi.annotations({
      description: "Server-sent events: its output kept so far (`stdout`, `stderr`, in the order written), then " +
        "`exit` if it has exited. With `follow=true` the stream stays open with what comes next until it exits."
    })),
    HttpApiEndpoint.post("stdin", "/v1/sandboxes/:id/processes/:pid/stdin", {
      params: processParams,
      query: Schema.Struct({ close: Schema.optionalKey(Flag) }),
      success: HttpApiSchema.NoContent,
      error: errors
    }).annotateMerge(OpenApi.annotations({
      description: "The raw body (any content type, up to 1 MiB) is written to its stdin; `close=true` then ends " +
        "it (end of file). 204. 409 for a process started without `stdin: true`, whose stdin was closed, or that " +
        "has exited."
    })),
    HttpApiEndpoint.post("signal", "/v1/sandboxes/:id/processes/:pid/signal", {
      params: processParams,
      payload: SignalBody,
      success: HttpApiSchema.Accepted,
      error: errors
    }).annotateMerge(OpenApi.annotations({
      description: "202. INT, TERM and HUP go to the process; KILL ends it and every process it started. 409 once " +
        "it has exited."
    }))
  )
  .annotateMerge(Access.resource("sandboxes"))
  .annotateMerge(OpenApi.annotations({ title: "Processes" }))
{}
