/**
 * Code contexts (docs/contract.md "Code contexts"): create one, run code in it with the output as
 * it comes (`Accept: text/event-stream`: `stdout`, `stderr`, `result`, `error`, then one `end`),
 * interrupt a run, look a context up, delete it.
 */
import { ApiError, del, get, post } from "./api.ts"
import { postForEvents } from "./exec.ts"
import type { CodeContext } from "./wire.ts"

export type Language = CodeContext["language"]
export const LANGUAGES: ReadonlyArray<Language> = ["python", "javascript", "bash"]

/** What a cell shows, in the order it came. */
export type Output =
  | { readonly kind: "stdout" | "stderr"; readonly text: string }
  | { readonly kind: "result"; readonly type: string; readonly data: string }
  | { readonly kind: "error"; readonly name: string; readonly value: string; readonly traceback: ReadonlyArray<string> }

export interface RunEnd {
  readonly execution_count: number
  readonly duration_ms: number
  readonly truncated?: boolean
}

const base = (sandboxId: string) => `/v1/sandboxes/${encodeURIComponent(sandboxId)}/contexts`

export const createContext = (sandboxId: string, language: Language) => post<CodeContext>(base(sandboxId), { language })

export const getContext = (sandboxId: string, ctx: string) =>
  get<CodeContext>(`${base(sandboxId)}/${encodeURIComponent(ctx)}`)

export const deleteContext = (sandboxId: string, ctx: string) =>
  del<void>(`${base(sandboxId)}/${encodeURIComponent(ctx)}`)

export const interrupt = (sandboxId: string, ctx: string) =>
  post<void>(`${base(sandboxId)}/${encodeURIComponent(ctx)}/interrupt`)

/**
 * Pure: appends one event of a run to a cell's outputs (consecutive text of one stream joined).
 * An `error` event is either the run's exception (`{name, value, traceback}`) or the API's
 * words when the context died or its host stopped answering (`{error, code}`).
 */
export const appendEvent = (outputs: ReadonlyArray<Output>, event: string, data: any): ReadonlyArray<Output> => {
  if (event === "stdout" || event === "stderr") {
    const last = outputs.at(-1)
    return last !== undefined && last.kind === event
      ? [...outputs.slice(0, -1), { kind: event, text: last.text + String(data.text) }]
      : [...outputs, { kind: event, text: String(data.text) }]
  }
  if (event === "result") return [...outputs, { kind: "result", type: String(data.type), data: String(data.data) }]
  if (event === "error") {
    return typeof data.name === "string"
      ? [...outputs, {
        kind: "error",
        name: data.name,
        value: String(data.value ?? ""),
        traceback: Array.isArray(data.traceback) ? data.traceback.map(String) : []
      }]
      : [...outputs, {
        kind: "error",
        name: String(data.code ?? "error"),
        value: String(data.error ?? ""),
        traceback: []
      }]
  }
  return outputs
}

/**
 * Runs `code` in the context, calling `onOutputs` with the cell's outputs so far as each event
 * arrives; resolves to the `end` event, or null when the stream ended without one after the API's
 * own error (the context died, its host stopped answering). A refusal before the run (409 for a
 * dead context, 413) throws `ApiError`.
 */
export const runStreaming = async (
  sandboxId: string,
  ctx: string,
  code: string,
  onOutputs: (outputs: ReadonlyArray<Output>) => void,
  signal?: AbortSignal
): Promise<RunEnd | null> => {
  let outputs: ReadonlyArray<Output> = []
  for await (
    const { data, event } of postForEvents(`${base(sandboxId)}/${encodeURIComponent(ctx)}/run`, { code }, signal)
  ) {
    if (event === "end") return data as RunEnd
    outputs = appendEvent(outputs, event, data)
    onOutputs(outputs)
  }
  if (outputs.at(-1)?.kind === "error") return null
  throw new ApiError(0, { error: "The run's output ended before its end", code: "stream_ended" })
}
