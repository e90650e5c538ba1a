/**
 * A Node socket's descriptor handed to a process that moves its bytes with the kernel's
 * `splice`, at both ends of the data plane: the agent's splice of a connection and a sandbox's
 * pipe (@svc/host/Driver/Splice), the API's splice between a client's connection and a host's
 * (@svc/hosts/Splice). Node's socket objects stay the owners of the descriptors (they close
 * them); for the splice's length they must neither read nor write them: what Node read ahead is
 * taken first (`stopReading`), what it writes first is through before (`written`).
 */
import type * as Net from "node:net"
import type { Readable, Writable } from "node:stream"

/** libuv's stream handle under a Node socket (a connection or a pipe). */
interface StreamHandle {
  readonly fd?: number
  reading?: boolean
  readStop?: () => number
}

const handleOf = (stream: Readable | Writable | Net.Socket): StreamHandle | undefined =>
  (stream as unknown as { readonly _handle?: StreamHandle | null })._handle ?? undefined

/** The descriptor under a Node socket, or undefined (no handle: closed, or not a socket). */
export const descriptorOf = (stream: Readable | Writable | Net.Socket): number | undefined => {
  const fd = handleOf(stream)?.fd
  return typeof fd === "number" && fd >= 0 ? fd : undefined
}

/**
 * Stops Node reading `socket` (its descriptor leaves libuv's polling; `pause` alone does not,
 * Node would still read up to its buffer's size) and returns the bytes it had read and not yet
 * handed on, in order. Nothing reads the socket again unless someone calls `read`/`resume`.
 */
export const stopReading = (socket: Readable): ReadonlyArray<Buffer> => {
  socket.pause()
  const ahead: Array<Buffer> = []
  let chunk: Buffer | null
  while ((chunk = socket.read() as Buffer | null) !== null) ahead.push(chunk)
  // After the reads above: `read` starts the handle reading again. Nothing more is read before
  // the event loop polls, so what was taken above is all Node holds.
  const handle = handleOf(socket)
  if (handle?.reading === true && typeof handle.readStop === "function") {
    handle.reading = false
    handle.readStop()
  }
  return ahead
}

/**
 * Writes `chunks` and resolves once Node handed the kernel everything queued on `writable` up to
 * them (writes complete in order: the last one's callback comes last; with no chunks, an empty
 * write's), so that a splice of the same descriptor starts after them; rejects with a write's
 * error.
 */
export const written = (writable: Writable, chunks: ReadonlyArray<Uint8Array> = []): Promise<void> =>
  new Promise<void>((resolve, reject) => {
    const last = chunks.length > 0 ? chunks[chunks.length - 1]! : Buffer.alloc(0)
    for (const chunk of chunks.slice(0, -1)) writable.write(chunk)
    writable.write(last, (error) => (error == null ? resolve() : reject(error)))
  })
