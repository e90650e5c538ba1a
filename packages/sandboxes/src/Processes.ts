/**
 * Sandbox processes and terminals through the control plane (docs/contract.md#sandbox-processes,
 * #terminal): the org's sandbox is looked up, then the call goes to its host's data plane
 * (`AgentProcessesApi` of `@svc/host-protocol/DataPlane`, the client derived from it).
 *
 * - Streamed exec and followed output are server-sent events passed on as the host sends them;
 *   a host that stops answering midway ends the stream with an `error` event.
 * - A stopped sandbox's processes can still be listed and read (they say `sandbox_stopped`);
 *   starting one, stdin, signals and terminals need it running (409).
 * - A terminal is an upgraded connection to the host (`svc-pty`, `PtyFrames`), opened like a preview
 *   tunnel (`@svc/hosts/Upgrade`): the caller relays it to its WebSocket.
 */
import type * as Rows from "@svc/db/Rows"
import type { ProcessEvent, SandboxProcess } from "@svc/domain/Api/Processes"
import * as Errors from "@svc/domain/Errors"
import type { OrgId } from "@svc/domain/Ids"
import type { ExecRequest } from "@svc/domain/Sandbox"
import {
  AgentApi,
  AgentConflict,
  AgentFailed,
  AgentInvalid,
  AgentNotFound,
  AgentNotRunning,
  AgentUnauthorized,
  PTY_PROTOCOL
} from "@svc/host-protocol/DataPlane"
import type { HostRecord } from "@svc/host-protocol/Protocol"
import { AgentClient, AgentTarget, type DataPlaneError, toApiError, unreachable } from "@svc/hosts/AgentClient"
import { Hosts } from "@svc/hosts/Hosts"
import * as Upgrade from "@svc/hosts/Upgrade"
import { Context, Effect, Layer, Option, Schema, Stream } from "effect"
import { HttpApiClient } from "effect/http-api"
import type * as Net from "node:net"
import { Sandboxes } from "./Sandboxes.ts"

/** The frames a terminal's connection to its host carries, for the API's relay. */
export * as PtyFrames from "@svc/host-protocol/PtyFrames"
/** Event-stream answers (opened at once, kept alive), for the API's routes. */
export * as Sse from "@svc/host-protocol/Sse"

export type ProcessError = Exclude<DataPlaneError, Errors.FileRefused | Errors.InsufficientStorage> | Rows.QueryError

/** How long an exec stream may run beyond its own timeout (the host's share). */
const EXEC_MARGIN_MS = 15_000
/** How long the host gets to start a terminal and answer. */
const PTY_OPEN_TIMEOUT_MS = 10_000

const stoppedAnswering = {
  event: "error" as const,
  data: JSON.stringify({ error: "The sandbox's host stopped answering", code: "unavailable" })
}

export class Processes extends Context.Service<Processes, {
  /** Runs a command in the running sandbox: its output as events, as it comes. */
  readonly execStream: (
    orgId: OrgId,
    id: string,
    request: ExecRequest
  ) => Effect.Effect<Stream.Stream<ProcessEvent>, ProcessError>
  readonly start: (
    orgId: OrgId,
    id: string,
    request: {
      readonly cmd: ReadonlyArray<string>
      readonly cwd?: string | undefined
      readonly env?: Readonly<Record<string, string>> | undefined
      readonly stdin?: boolean | undefined
      /** False: it does not keep the sandbox from being idle (a code context's interpreter). */
      readonly keepsAwake?: boolean | undefined
    }
  ) => Effect.Effect<SandboxProcess, ProcessError>
  readonly list: (orgId: OrgId, id: string) => Effect.Effect<ReadonlyArray<SandboxProcess>, ProcessError>
  readonly get: (orgId: OrgId, id: string, pid: string) => Effect.Effect<SandboxProcess, ProcessError>
  readonly output: (
    orgId: OrgId,
    id: string,
    pid: string,
    follow: boolean
  ) => Effect.Effect<Stream.Stream<ProcessEvent>, ProcessError>
  readonly stdin: <E>(
    orgId: OrgId,
    id: string,
    pid: string,
    body: Stream.Stream<Uint8Array, E>,
    close: boolean,
    maxBytes: number
  ) => Effect.Effect<void, ProcessError>
  readonly signal: (
    orgId: OrgId,
    id: string,
    pid: string,
    signal: "INT" | "TERM" | "KILL" | "HUP"
  ) => Effect.Effect<void, ProcessError>
  /** The host's end of a new terminal in the running sandbox (`PtyFrames`); the caller ends it. */
  readonly pty: (orgId: OrgId, id: string, cols: number, rows: number) => Effect.Effect<Net.Socket, ProcessError>
}>()("@svc/sandboxes/Processes") {
  static readonly make = Effect.gen(function*() {
    const sandboxes = yield* Sandboxes
    const hosts = yield* Hosts
    const agent = yield* AgentClient
    const client = agent.api
    const urls = HttpApiClient.urlBuilder(AgentApi)

    const hostOf = (hostId: string) =>
      Effect.flatMap(hosts.get(hostId), (host) =>
        Option.isSome(host)
          ? Effect.succeed(host.value)
          : Effect.fail(new Errors.Unavailable({ error: "The sandbox's host is not known right now; retry" })))

    /** The running sandbox's host (a stopped one with `auto_resume` started first; 409 otherwise). */
    const running = (orgId: OrgId, id: string) =>
      Effect.gen(function*() {
        const s = yield* sandboxes.ready(orgId, id)
        if (s.hostId === null) {
          return yield* new Errors.Conflict({ error: `This sandbox is ${s.state}; it must be running` })
        }
        return yield* hostOf(s.hostId)
      })

    /** The host that has (or had) the sandbox's processes; none before it was ever placed. */
    const placed = (orgId: OrgId, id: string) =>
      Effect.gen(function*() {
        const s = yield* sandboxes.get(orgId, id)
        if (s.hostId === null || s.state === "deleted") return undefined
        return yield* hostOf(s.hostId)
      })

    const call = agent.call
    /** Events from the host as they come; a cut connection ends them with an `error` event. */
    const passOn = (host: HostRecord, events: Stream.Stream<ProcessEvent, unknown>) =>
      events.pipe(
        Stream.catchCause((cause) =>
          Stream.fromEffect(
            Effect.as(
              Effect.logWarning("data plane: a process stream was cut", { hostId: host.hostId, cause: String(cause) }),
              stoppedAnswering
            )
          )
        )
      )

    const execStream = Effect.fn("Processes.execStream")(function*(orgId: OrgId, id: string, request: ExecRequest) {
      const host = yield* running(orgId, id)
      const events = yield* call(
        host,
        client.processes.execStream({
          params: { id },
          payload: {
            cmd: request.cmd,
            ...(request.cwd !== undefined ? { cwd: request.cwd } : {}),
            ...(request.env !== undefined ? { env: request.env } : {}),
            ...(request.stdin !== undefined ? { stdin: request.stdin } : {}),
            timeout_ms: request.timeout_ms
          }
        })
      )
      return passOn(
        host,
        events.pipe(
          Stream.provideService(AgentTarget, host),
          Stream.interruptWhen(
            Effect.andThen(
              Effect.sleep(request.timeout_ms + EXEC_MARGIN_MS),
              Effect.fail(new Errors.Unavailable({ error: "exec stream timed out" }))
            )
          )
        )
      )
    })

    const start = Effect.fn("Processes.start")(function*(
      orgId: OrgId,
      id: string,
      request: {
        readonly cmd: ReadonlyArray<string>
        readonly cwd?: string | undefined
        readonly env?: Readonly<Record<string, string>> | undefined
        readonly stdin?: boolean | undefined
        readonly keepsAwake?: boolean | undefined
      }
    ) {
      const host = yield* running(orgId, id)
      return yield* call(
        host,
        client.processes.start({
          params: { id },
          payload: {
            cmd: request.cmd,
            ...(request.cwd !== undefined ? { cwd: request.cwd } : {}),
            ...(request.env !== undefined ? { env: request.env } : {}),
            ...(request.stdin !== undefined ? { stdin: request.stdin } : {}),
            ...(request.keepsAwake !== undefined ? { keeps_awake: request.keepsAwake } : {})
          }
        })
      )
    })

    const list = Effect.fn("Processes.list")(function*(orgId: OrgId, id: string) {
      const host = yield* placed(orgId, id)
      if (host === undefined) return []
      return (yield* call(host, client.processes.list({ params: { id } }))).processes
    })

    const noSuchProcess = (pid: string) => new Errors.NotFound({ error: `No process ${pid} in this sandbox` })

    const get = Effect.fn("Processes.get")(function*(orgId: OrgId, id: string, pid: string) {
      const host = yield* placed(orgId, id)
      if (host === undefined) return yield* noSuchProcess(pid)
      return yield* call(host, client.processes.get({ params: { id, pid } }))
    })

    const output = Effect.fn("Processes.output")(function*(orgId: OrgId, id: string, pid: string, follow: boolean) {
      const host = yield* placed(orgId, id)
      if (host === undefined) return yield* noSuchProcess(pid)
      const events = yield* call(
        host,
        client.processes.output({ params: { id, pid }, query: { follow: follow ? "true" : "false" } })
      )
      return passOn(host, events.pipe(Stream.provideService(AgentTarget, host)))
    })

    const stdin = <E>(
      orgId: OrgId,
      id: string,
      pid: string,
      body: Stream.Stream<Uint8Array, E>,
      close: boolean,
      maxBytes: number
    ) =>
      Effect.gen(function*() {
        const host = yield* running(orgId, id)
        const tooLarge = new Errors.PayloadTooLarge({ error: `stdin writes are limited to ${maxBytes} bytes` })
        let total = 0
        // Past the cap the body is cut short: the host then sees a cut body and writes nothing more.
        const payload = body.pipe(
          Stream.mapError(() => new Errors.InvalidRequest({ error: "The request body could not be read" })),
          Stream.mapArrayEffect((chunks) => {
            for (const chunk of chunks) total += chunk.length
            return total > maxBytes ? Effect.fail(tooLarge) : Effect.succeed(chunks)
          })
        )
        // The whole body is read first: what reaches the process is all of it or nothing.
        const bytes = yield* Stream.runCollect(payload)
        yield* call(
          host,
          client.processes.stdin({
            params: { id, pid },
            query: { close: close ? "true" : "false" },
            payload: Stream.fromIterable(bytes)
          })
        )
      }).pipe(Effect.withSpan("Processes.stdin"))

    const signal = Effect.fn("Processes.signal")(
      function*(orgId: OrgId, id: string, pid: string, signal: "INT" | "TERM" | "KILL" | "HUP") {
        const host = yield* running(orgId, id)
        yield* call(host, client.processes.signal({ params: { id, pid }, payload: { signal } }))
      }
    )

    const pty = Effect.fn("Processes.pty")(function*(orgId: OrgId, id: string, cols: number, rows: number) {
      const host = yield* running(orgId, id)
      return yield* openPty(
        host,
        urls.processes.pty({ params: { id }, query: { cols: String(cols), rows: String(rows) } })
      )
    })

    return Processes.of({ execStream, start, list, get, output, stdin, signal, pty })
  })

  /** Needs `Sandboxes` and `Hosts`. */
  static readonly layer = Layer.effect(Processes, Processes.make).pipe(Layer.provide(AgentClient.layer))
}

const decodeAgentError = Schema.decodeUnknownOption(
  Schema.fromJsonString(
    Schema.Union([AgentInvalid, AgentUnauthorized, AgentNotFound, AgentNotRunning, AgentConflict, AgentFailed])
  )
)

/** The host's refusal of a terminal as the API's error. */
const ptyRefusal = (host: HostRecord, body: string): Effect.Effect<never, ProcessError> => {
  const error = decodeAgentError(body)
  return Option.isSome(error)
    ? toApiError(host, error.value).pipe(
      Effect.catchTag("FileRefused", () => unreachable(host, "a pty refusal as a file refusal")),
      Effect.catchTag("InsufficientStorage", () => unreachable(host, "a pty refusal as a full disk"))
    )
    : unreachable(host, "an undecodable pty refusal")
}

/** The upgraded connection of a new terminal on `host`, or the host's refusal. */
const openPty = (host: HostRecord, path: string) =>
  Upgrade.open(host, {
    path,
    protocol: PTY_PROTOCOL,
    timeoutMs: PTY_OPEN_TIMEOUT_MS,
    noDelay: true,
    refused: (_status, body) => ptyRefusal(host, body)
  })
