/**
 * A server-sent events parser (the WHATWG rules the API's streams need: `id`, `event`, `data`
 * lines, comments, CRLF or LF line ends), pure so the reconnecting readers build on it.
 */

export interface SseMessage {
  /** The last `id` field seen on the stream (it carries over, as in browsers), `""` before any. */
  readonly id: string
  /** The `event` field, `"message"` when the message had none. */
  readonly event: string
  /** The `data` lines joined with `\n`. */
  readonly data: string
}

/** Feeds text chunks in, takes whole messages out; a message ends at a blank line. */
export class SseParser {
  private buffer = ""
  private id = ""
  private event = ""
  private data: Array<string> = []
  private hasData = false

  push(chunk: string): Array<SseMessage> {
    this.buffer += chunk
    const out: Array<SseMessage> = []
    for (;;) {
      const match = /\r\n|\r|\n/.exec(this.buffer)
      // A lone `\r` at the end may be the first half of `\r\n`: wait for more.
      if (match === null || (match[0] === "\r" && match.index === this.buffer.length - 1)) break
      const line = this.buffer.slice(0, match.index)
      this.buffer = this.buffer.slice(match.index + match[0].length)
      const message = this.line(line)
      if (message !== undefined) out.push(message)
    }
    return out
  }

  private line(line: string): SseMessage | undefined {
    if (line === "") {
      if (!this.hasData) {
        this.event = ""
        return undefined
      }
      const message = { id: this.id, event: this.event || "message", data: this.data.join("\n") }
      this.event = ""
      this.data = []
      this.hasData = false
      return message
    }
    if (line.startsWith(":")) return undefined
    const colon = line.indexOf(":")
    const field = colon < 0 ? line : line.slice(0, colon)
    let value = colon < 0 ? "" : line.slice(colon + 1)
    if (value.startsWith(" ")) value = value.slice(1)
    if (field === "data") {
      this.data.push(value)
      this.hasData = true
    } else if (field === "event") {
      this.event = value
    } else if (field === "id" && !value.includes("\u0000")) {
      this.id = value
    }
    return undefined
  }
}

/** The messages of a response body as they arrive. */
export async function* sseMessages(body: AsyncIterable<Uint8Array>): AsyncGenerator<SseMessage> {
  const decoder = new TextDecoder()
  const parser = new SseParser()
  for await (const chunk of body) {
    yield* parser.push(decoder.decode(chunk, { stream: true }))
  }
  yield* parser.push(decoder.decode())
}
