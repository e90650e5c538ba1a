/**
 * A command run in a sandbox with its output as it comes: `POST /v1/sandboxes/{id}/exec` with
 * `Accept: text/event-stream` (docs/contract.md "Processes"): `stdout` and `stderr` events with
 * base64 data, then one `exit`. The parser is pure and fed chunk by chunk.
 */
import { ApiError } from "./api.ts"

export interface ExecEvent {
  readonly event: string
  readonly data: string
}

/** Splits a server-sent-events text into events; keeps an unfinished one for the next chunk. */
export class SseParser {
  private buffer = ""
  push(chunk: string): Array<ExecEvent> {
    this.buffer += chunk.replace(/\r\n?/g, "\n")
    const events: Array<ExecEvent> = []
    let end: number
    while ((end = this.buffer.indexOf("\n\n")) !== -1) {
      const block = this.buffer.slice(0, end)
      this.buffer = this.buffer.slice(end + 2)
      let event = "message"
      const data: Array<string> = []
      for (const line of block.split("\n")) {
        if (line.startsWith(":")) continue
        const colon = line.indexOf(":")
        const field = colon === -1 ? line : line.slice(0, colon)
        const value = colon === -1 ? "" : line.slice(colon + 1).replace(/^ /, "")
        if (field === "event") event = value
        else if (field === "data") data.push(value)
      }
      if (data.length > 0) events.push({ event, data: data.join("\n") })
    }
    return events
  }
}

/**
 * `POST url` with `body` as JSON, asking for server-sent events: each event as it arrives, its
 * data parsed. A refusal before the stream (not 2xx, or no body) throws `ApiError`.
 */
export async function* postForEvents(
  url: string,
  body: unknown,
  signal?: AbortSignal
): AsyncGenerator<{ readonly event: string; readonly data: any }> {
  const response = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", accept: "text/event-stream" },
    body: JSON.stringify(body),
    credentials: "same-origin",
    signal: signal ?? null
  })
  if (!response.ok || response.body === null) {
    const text = await response.text()
    let refusal: any
    try {
      refusal = JSON.parse(text)
    } catch {
      refusal = undefined
    }
    throw new ApiError(response.status, refusal)
  }
  const parser = new SseParser()
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader()
  while (true) {
    const { done, value } = await reader.read()
    if (done) return
    for (const event of parser.push(value)) yield { event: event.event, data: JSON.parse(event.data) }
  }
}

const fromBase64 = (text: string) => Uint8Array.from(atob(text), (c) => c.charCodeAt(0))

export interface ExecOutput {
  readonly onStdout: (text: string) => void
  readonly onStderr: (text: string) => void
}

export interface ExecResult {
  readonly exit_code: number
  readonly duration_ms: number
}

export const execStreaming = async (
  sandboxId: string,
  request: { readonly cmd: ReadonlyArray<string>; readonly cwd?: string },
  output: ExecOutput,
  signal?: AbortSignal
): Promise<ExecResult> => {
  // One decoder per stream: a UTF-8 character may be split across two events.
  const stdout = new TextDecoder()
  const stderr = new TextDecoder()
  for await (const { data, event } of postForEvents(`/v1/sandboxes/${sandboxId}/exec`, request, signal)) {
    if (event === "stdout") output.onStdout(stdout.decode(fromBase64(data.data), { stream: true }))
    else if (event === "stderr") output.onStderr(stderr.decode(fromBase64(data.data), { stream: true }))
    else if (event === "exit") return data as ExecResult
    else if (event === "error") throw new ApiError(500, data)
  }
  throw new ApiError(0, { error: "The command's output ended before its exit code", code: "stream_ended" })
}
