/**
 * Code contexts (docs/contract.md#code-contexts): stateful interpreters in a running sandbox, one
 * interpreter process per context, whose variables and imports persist from one run to the next.
 * The `sandboxes` scope (`read` for GET, `write` otherwise) and the single-sandbox policy, as
 * every sandbox route.
 */
import { Schema } from "effect"
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "effect/http-api"
import { Conflict, InvalidRequest, NotFound, PayloadTooLarge, SandboxOutOfScope, Unavailable } from "../Errors.ts"
import { SandboxId } from "../Ids.ts"
import { EXEC_TIMEOUT_MS_DEFAULT, EXEC_TIMEOUT_MS_MAX, ExecRequest } from "../Sandbox.ts"
import { Bounded, TimestampText } from "../Text.ts"
import { Access } from "./Auth.ts"

/** Contexts one sandbox may hold at once (dead ones count until deleted): past it, 409. */
export const MAX_CONTEXTS_PER_SANDBOX = 16
/** Bytes of code one run may carry (UTF-8): past it, 413. */
export const MAX_CODE_BYTES = 1024 * 1024
/** What a run's answer carries at most, all of it (exec's output cap: the runner keeps far less). */
export const RUN_OUTPUT_MAX = 1024 * 1024
/** The longest run: the exec's ceiling less the margin the runner needs to answer. */
export const CONTEXT_RUN_TIMEOUT_MS_MAX = EXEC_TIMEOUT_MS_MAX - 10_000

export const ContextLanguage = Schema.Literals(["python", "javascript", "bash"])
export type ContextLanguage = typeof ContextLanguage.Type

export class CreateContextBody extends Schema.Class<CreateContextBody>("CreateContextRequest")({
  language: ContextLanguage,
  cwd: ExecRequest.fields.cwd,
  env: ExecRequest.fields.env
}) {}

export const CodeContext = Schema.Struct({
  id: Bounded(64),
  language: ContextLanguage,
  cwd: Bounded(4096),
  state: Schema.Literals(["idle", "running", "dead"]),
  createdAt: TimestampText
}).annotate({ identifier: "CodeContext" })
export type CodeContext = typeof CodeContext.Type

export const ContextList = Schema.Struct({
  contexts: Schema.Array(CodeContext).check(Schema.isMaxLength(MAX_CONTEXTS_PER_SANDBOX))
})

export class RunCodeBody extends Schema.Class<RunCodeBody>("RunCodeRequest")({
  /** At most this many characters here; the handler checks its UTF-8 bytes (413). */
  code: Bounded(MAX_CODE_BYTES),
  timeout_ms: Schema.optionalKey(
    Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: CONTEXT_RUN_TIMEOUT_MS_MAX }))
  )
}) {}

/** What a run shows: the last expression's value, a figure (`image/png`, base64), HTML, JSON. */
export const RunResultItem = Schema.Struct({
  type: Bounded(64),
  data: Bounded(RUN_OUTPUT_MAX)
})

export const RunError = Schema.Struct({
  name: Bounded(256),
  value: Bounded(RUN_OUTPUT_MAX),
  traceback: Schema.Array(Bounded(RUN_OUTPUT_MAX)).check(Schema.isMaxLength(10_000))
})

export const RunResult = Schema.Struct({
  execution_count: Schema.Int,
  results: Schema.Array(RunResultItem).check(Schema.isMaxLength(1_000)),
  stdout: Bounded(RUN_OUTPUT_MAX),
  stderr: Bounded(RUN_OUTPUT_MAX),
  error: Schema.NullOr(RunError),
  duration_ms: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)),
  /** stdout, stderr or the results were longer than a run keeps and were cut. */
  truncated: Schema.Boolean
}).annotate({ identifier: "RunResult" })
export type RunResult = typeof RunResult.Type

/**
 * One server-sent event of a streamed run (`Accept: text/event-stream`): `stdout` and `stderr`
 * (`{text}`) as written, `result` (`{type, data}`), `error` (`{name, value, traceback}`, or
 * `{error, code}` when the context is dead or its host stopped answering), then one `end`
 * (`{execution_count, duration_ms, truncated}`).
 */
export const RunEvent = Schema.Struct({
  event: Schema.Literals(["stdout", "stderr", "result", "error", "end"]),
  data: Bounded(2 * RUN_OUTPUT_MAX)
})
export type RunEvent = typeof RunEvent.Type

export const RunEvents = HttpApiSchema.StreamSse({ events: RunEvent })

const params = { id: SandboxId }
const contextParams = { id: SandboxId, ctx: Bounded(64) }
const errors = [InvalidRequest, NotFound, Conflict, PayloadTooLarge, SandboxOutOfScope, Unavailable] as const

export class ContextsApi extends HttpApiGroup.make("contexts")
  .add(
    HttpApiEndpoint.post("create", "/v1/sandboxes/:id/contexts", {
      params,
      payload: CreateContextBody,
      success: CodeContext.pipe(HttpApiSchema.status(201)),
      error: errors
    }).annotateMerge(OpenApi.annotations({
      description: "Starts an interpreter in the running sandbox (201, `state: idle`). 409 when the sandbox's " +
        "image lacks the interpreter (named), when the sandbox is not running, or when it holds " +
        `${MAX_CONTEXTS_PER_SANDBOX} contexts already (dead ones count until deleted).`
    })),
    HttpApiEndpoint.get("list", "/v1/sandboxes/:id/contexts", { params, success: ContextList, error: errors }),
    HttpApiEndpoint.get("get", "/v1/sandboxes/:id/contexts/:ctx", {
      params: contextParams,
      success: CodeContext,
      error: errors
    }),
    HttpApiEndpoint.post("run", "/v1/sandboxes/:id/contexts/:ctx/run", {
      params: contextParams,
      payload: RunCodeBody,
      // `Accept: text/event-stream`: the run's events as they come.
      success: [RunResult, RunEvents],
      error: errors
    }).annotateMerge(OpenApi.annotations({
      description: "Runs code in the context (runs of one context are taken in order). A run that raises is " +
        `still a 200 with \`error\`. \`timeout_ms\` defaults to ${EXEC_TIMEOUT_MS_DEFAULT}. 409 for a dead context; ` +
        `413 for code over ${MAX_CODE_BYTES} bytes. With \`Accept: text/event-stream\`: events \`stdout\`, ` +
        "`stderr`, `result`, `error`, then `end`."
    })),
    HttpApiEndpoint.post("interrupt", "/v1/sandboxes/:id/contexts/:ctx/interrupt", {
      params: contextParams,
      success: HttpApiSchema.Accepted,
      error: errors
    }).annotateMerge(OpenApi.annotations({
      description: "202: the run in progress ends with a `KeyboardInterrupt` error. 409 for a dead context."
    })),
    HttpApiEndpoint.delete("remove", "/v1/sandboxes/:id/contexts/:ctx", {
      params: contextParams,
      success: HttpApiSchema.NoContent,
      error: errors
    })
  )
  .annotateMerge(Access.resource("sandboxes"))
  .annotateMerge(OpenApi.annotations({ title: "Code contexts" }))
{}
