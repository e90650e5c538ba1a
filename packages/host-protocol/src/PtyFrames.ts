/**
 * The frames of a terminal between an API process and an agent (`GET .../pty`, upgraded to
 * `svc-pty`): `[type: u8][length: u32 BE][payload]`, both ways.
 *
 * - `DATA` (0): terminal bytes, either way;
 * - `RESIZE` (1): to the agent, `cols: u16 BE, rows: u16 BE`;
 * - `EXIT` (2): from the agent, the shell's exit code (`i32 BE`), the last frame.
 */
export const DATA = 0
export const RESIZE = 1
export const EXIT = 2

/** A frame's payload above this is a broken peer. */
export const MAX_PAYLOAD = 1024 * 1024

export type Frame =
  | { readonly type: typeof DATA; readonly bytes: Uint8Array }
  | { readonly type: typeof RESIZE; readonly cols: number; readonly rows: number }
  | { readonly type: typeof EXIT; readonly code: number }

const header = (type: number, length: number) => {
  const head = new Uint8Array(5)
  head[0] = type
  new DataView(head.buffer).setUint32(1, length)
  return head
}

export const encode = (frame: Frame): Uint8Array => {
  let payload: Uint8Array
  switch (frame.type) {
    case DATA:
      payload = frame.bytes
      break
    case RESIZE:
      payload = new Uint8Array(4)
      new DataView(payload.buffer).setUint16(0, frame.cols)
      new DataView(payload.buffer).setUint16(2, frame.rows)
      break
    case EXIT:
      payload = new Uint8Array(4)
      new DataView(payload.buffer).setInt32(0, frame.code)
      break
  }
  const out = new Uint8Array(5 + payload.length)
  out.set(header(frame.type, payload.length), 0)
  out.set(payload, 5)
  return out
}

/** Frames out of a byte stream cut anywhere; `push` throws on a frame no peer of ours sends. */
export class Decoder {
  private buffer = new Uint8Array(0)

  push(chunk: Uint8Array): Array<Frame> {
    const joined = new Uint8Array(this.buffer.length + chunk.length)
    joined.set(this.buffer, 0)
    joined.set(chunk, this.buffer.length)
    const frames: Array<Frame> = []
    let at = 0
    while (joined.length - at >= 5) {
      const view = new DataView(joined.buffer, joined.byteOffset + at)
      const type = joined[at]!
      const length = view.getUint32(1)
      if (length > MAX_PAYLOAD) throw new Error(`terminal frame of ${length} bytes`)
      if (joined.length - at - 5 < length) break
      const payload = joined.subarray(at + 5, at + 5 + length)
      const p = new DataView(payload.buffer, payload.byteOffset, payload.byteLength)
      if (type === DATA) frames.push({ type: DATA, bytes: payload.slice() })
      else if (type === RESIZE && length === 4) {
        frames.push({ type: RESIZE, cols: p.getUint16(0), rows: p.getUint16(2) })
      } else if (type === EXIT && length === 4) frames.push({ type: EXIT, code: p.getInt32(0) })
      else throw new Error(`unknown terminal frame ${type}`)
      at += 5 + length
    }
    this.buffer = joined.slice(at)
    return frames
  }
}
