/**
 * The idle bound of a file transfer, the same at both ends of the data plane (the API's files
 * routes and the agent's): a transfer whose connection moves no byte either way for the bound is
 * ended by closing that connection, which interrupts the request's work (its transfer slot is
 * freed, its request to the host or its processes in the sandbox end).
 */
import { Effect } from "effect"
import type * as Net from "node:net"

/** Sockets whose bytes a process outside Node moves (a splice): their counters stand still. */
const outside = new WeakMap<object, number>()

/**
 * Marks `socket` as moving bytes outside Node (a kernel splice that keeps its own idle bound)
 * until the returned function runs: `closeWhenIdle` never finds it idle meanwhile.
 */
export const movingOutside = (socket: object): () => void => {
  outside.set(socket, (outside.get(socket) ?? 0) + 1)
  let done = false
  return () => {
    if (done) return
    done = true
    const left = outside.get(socket)! - 1
    if (left === 0) outside.delete(socket)
    else outside.set(socket, left)
  }
}

/**
 * Closes `socket` once it moved no byte either way for `idleMs` (checked every quarter of it),
 * until the caller's scope closes (its response sent), after `onIdle` (a log line). The socket's
 * counters see what the kernel took or gave, so a client that stalls and a sandbox that takes or
 * gives nothing (its bytes back up to this socket) look the same. While a splice moves its bytes
 * (`movingOutside`), the splice's own idle bound is the one that holds.
 */
export const closeWhenIdle = (
  socket: Pick<Net.Socket, "bytesRead" | "bytesWritten" | "destroy">,
  idleMs: number,
  onIdle: Effect.Effect<void>
) => {
  const step = Math.max(10, Math.floor(idleMs / 4))
  const moved = () => socket.bytesRead + socket.bytesWritten
  return Effect.forkScoped(Effect.gen(function*() {
    let last = moved()
    let quiet = 0
    while (quiet < idleMs) {
      yield* Effect.sleep(step)
      const now = moved()
      quiet = now === last && !outside.has(socket) ? quiet + step : 0
      last = now
    }
    yield* onIdle
    socket.destroy()
  }))
}
