/**
 * The org's events, live: one `EventSource` on `GET /v1/events` (the session cookie goes with
 * it, same origin) for the whole app, shared by every page that listens. The browser reconnects
 * on its own and sends `Last-Event-ID`, so the API resumes without a gap; pages also refetch on
 * a reconnect, in case they missed what happened before the stream opened.
 */
import { useEffect, useRef, useState } from "preact/hooks"

/** The envelope of docs/contract.md#envelope, as `data` of each server-sent event. */
export interface Envelope {
  readonly event: string
  readonly org_id: string
  readonly ts: string
  readonly data: Record<string, any>
}

export type Connection = "connecting" | "live" | "offline"

const NAMES = [
  "sandbox.created",
  "sandbox.state_updated",
  "sandbox.deleted",
  "template.state_updated",
  "org.usage_alert",
  "org.usage_limit_reached"
] as const

type Listener = (envelope: Envelope) => void

const listeners = new Set<Listener>()
const connectionListeners = new Set<(connection: Connection) => void>()
let source: EventSource | undefined
let connection: Connection = "offline"

const setConnection = (next: Connection) => {
  connection = next
  for (const listener of connectionListeners) listener(next)
}

/** Opens the stream (once signed in). */
export const connect = () => {
  if (source !== undefined) return
  setConnection("connecting")
  const es = new EventSource("/v1/events")
  source = es
  es.onopen = () => setConnection("live")
  es.onerror = () => setConnection(es.readyState === EventSource.CLOSED ? "offline" : "connecting")
  for (const name of NAMES) {
    es.addEventListener(name, (message) => {
      let envelope: Envelope
      try {
        envelope = JSON.parse((message as MessageEvent<string>).data) as Envelope
      } catch {
        return
      }
      for (const listener of listeners) listener(envelope)
    })
  }
}

/** Closes it (signed out). */
export const disconnect = () => {
  source?.close()
  source = undefined
  setConnection("offline")
}

/** Calls `onEvent` for each event whose name starts with `prefix` (`"sandbox."`), while mounted. */
export const useEvents = (prefix: string, onEvent: Listener) => {
  const latest = useRef(onEvent)
  latest.current = onEvent
  useEffect(() => {
    const listener: Listener = (envelope) => {
      if (envelope.event.startsWith(prefix)) latest.current(envelope)
    }
    listeners.add(listener)
    return () => void listeners.delete(listener)
  }, [prefix])
}

/** The stream's state; `onLive` runs each time it (re)connects. */
export const useConnection = (onLive?: () => void): Connection => {
  const [state, setState] = useState(connection)
  const latest = useRef(onLive)
  latest.current = onLive
  useEffect(() => {
    const listener = (next: Connection) => {
      setState(next)
      if (next === "live") latest.current?.()
    }
    connectionListeners.add(listener)
    return () => void connectionListeners.delete(listener)
  }, [])
  return state
}
