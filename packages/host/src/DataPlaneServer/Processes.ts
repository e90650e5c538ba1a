/**
 * The data plane's processes and terminal endpoints (`AgentProcessesApi` of
 * `@svc/host-protocol/DataPlane`) over the driver: streamed exec and background processes as
 * server-sent events, stdin and signals, and a terminal over an upgraded connection
 * (`PtyFrames`). A stream's command, or a terminal, lives as long as its request: a client that
 * goes away ends it.
 */
import {
  AgentApi,
  AgentConflict,
  type AgentExecRequest,
  AgentFailed,
  AgentInvalid,
  AgentNotFound,
  AgentNotRunning,
  type AgentProcess,
  type AgentProcessEvent,
  AgentTooLarge
} from "@svc/host-protocol/DataPlane"
import * as PtyFrames from "@svc/host-protocol/PtyFrames"
import * as Sse from "@svc/host-protocol/Sse"
import { Effect, Schema, Stream } from "effect"
import { HttpApiBuilder, HttpApiError } from "effect/http-api"
import type * as Socket from "effect/socket/Socket"
import { type DataPlaneSettings, DEFAULT_EXEC_TIMEOUT_MS, viaDriver } from "../DataPlaneServer.ts"
import {
  DriverExecRequest,
  type ProcessEvent,
  type ProcessInfo,
  type PtySession,
  SandboxDriver,
  type SandboxDriverError
} from "../Driver.ts"

const invalid = (error: string) => new AgentInvalid({ error })

/** A driver call of a process endpoint: its refusals as the endpoint's errors (409 for a process state). */
const viaDriverP = <A, E extends SandboxDriverError | ProcessError, R>(effect: Effect.Effect<A, E, R>) =>
  viaDriver(
    Effect.catchTag(
      effect as Effect.Effect<A, SandboxDriverError | ProcessError, R>,
      "ProcessRefused",
      (e) =>
        Effect.fail(
          e.reason === "not_found" ? new AgentNotFound({ error: e.message }) : new AgentConflict({ error: e.message })
        )
    ) as Effect.Effect<A, SandboxDriverError | Exclude<ProcessError, AgentConflict>, R>
  ).pipe(Effect.mapError(narrow))

/** A driver event as the wire's server-sent event (the /v1 API passes it on as it is). */
export const toAgentEvent = (event: ProcessEvent): AgentProcessEvent =>
  event._tag === "Output"
    ? { event: event.stream, data: JSON.stringify({ data: Buffer.from(event.bytes).toString("base64") }) }
    : {
      event: "exit",
      data: JSON.stringify({
        exit_code: event.exitCode,
        duration_ms: Math.max(0, Math.round(event.durationMs)),
        ...(event.reason !== undefined ? { reason: event.reason } : {})
      })
    }

export const toAgentProcess = (p: ProcessInfo): AgentProcess => ({
  pid: p.pid,
  cmd: p.cmd,
  state: p.state,
  exit_code: p.exitCode,
  startedAt: p.startedAt,
  exitedAt: p.exitedAt,
  reason: p.reason
})

const pidOf = (text: string) =>
  /^[1-9]\d{0,9}$/.test(text) ? Effect.succeed(Number(text)) : Effect.fail(invalid(`${text} is not a pid`))

const sizeOf = (text: string, name: string) =>
  /^\d{1,4}$/.test(text) && Number(text) >= 1 && Number(text) <= 1000
    ? Effect.succeed(Number(text))
    : Effect.fail(invalid(`${name}: 1 to 1000`))

/** A driver error while streaming cannot become an answer any more: the stream just ends. */
const endQuietly = <A, E>(stream: Stream.Stream<A, E>) =>
  stream.pipe(
    Stream.catchCause((cause) =>
      Stream.fromEffectDrain(Effect.logWarning("agent: process stream cut", { cause: String(cause) }))
    )
  )

export const ProcessHandlers = (settings: DataPlaneSettings) =>
  HttpApiBuilder.group(
    AgentApi,
    "processes",
    Effect.fn(function*(handlers) {
      const driver = yield* SandboxDriver
      const defaultTimeout = settings.defaultExecTimeoutMs ?? DEFAULT_EXEC_TIMEOUT_MS
      const decodeDriverExec = Schema.decodeUnknownEffect(DriverExecRequest)

      const driverExec = (payload: AgentExecRequest) =>
        decodeDriverExec({
          cmd: payload.cmd,
          ...(payload.cwd !== undefined ? { cwd: payload.cwd } : {}),
          ...(payload.env !== undefined ? { env: payload.env } : {}),
          ...(payload.stdin !== undefined ? { stdin: payload.stdin } : {}),
          timeoutMs: payload.timeout_ms ?? defaultTimeout
        }).pipe(Effect.mapError((e) => invalid(e.message)))

      return handlers
        .handle("execStream", ({ params, payload }) =>
          Effect.gen(function*() {
            const request = yield* driverExec(payload)
            const events = yield* viaDriverP(driver.execStream(params.id, request))
            return Sse.response(endQuietly(events).pipe(Stream.map(toAgentEvent)))
          }))
        .handle("start", ({ params, payload }) =>
          Effect.gen(function*() {
            const info = yield* viaDriverP(driver.startProcess(params.id, {
              cmd: payload.cmd,
              ...(payload.cwd !== undefined ? { cwd: payload.cwd } : {}),
              ...(payload.env !== undefined ? { env: payload.env } : {}),
              stdin: payload.stdin ?? false
            }))
            if (payload.keeps_awake === false) settings.activity?.quiet(params.id, info.pid)
            return toAgentProcess(info)
          }))
        .handle("list", ({ params }) =>
          Effect.map(
            viaDriverP(driver.processes(params.id)),
            (rows) => ({ processes: rows.map(toAgentProcess) })
          ))
        .handle("get", ({ params }) =>
          Effect.gen(function*() {
            const pid = yield* pidOf(params.pid)
            return toAgentProcess(yield* viaDriverP(driver.process(params.id, pid)))
          }))
        .handle("output", ({ params, query }) =>
          Effect.gen(function*() {
            const pid = yield* pidOf(params.pid)
            const events = yield* viaDriverP(driver.processOutput(params.id, pid, query.follow === "true"))
            return Sse.response(events.pipe(Stream.map(toAgentEvent)))
          }))
        .handle("stdin", ({ params, payload, query }) =>
          Effect.gen(function*() {
            const pid = yield* pidOf(params.pid)
            const body = payload.pipe(
              Stream.mapError((e) =>
                HttpApiError.HttpApiPayloadTooLarge.is(e)
                  ? new AgentTooLarge({ error: `stdin writes are limited to ${1024 * 1024} bytes` })
                  : invalid("the request body could not be read")
              )
            )
            yield* viaDriverP(driver.processStdin(params.id, pid, body, query.close === "true"))
          }))
        .handle("signal", ({ params, payload }) =>
          Effect.gen(function*() {
            const pid = yield* pidOf(params.pid)
            yield* viaDriverP(driver.signalProcess(params.id, pid, payload.signal))
          }))
        .handle("pty", ({ params, query, upgrade }) =>
          Effect.gen(function*() {
            const cols = yield* sizeOf(query.cols, "cols")
            const rows = yield* sizeOf(query.rows, "rows")
            const session = yield* viaDriverP(driver.pty(params.id, { cols, rows }))
            const socket = yield* upgrade()
            yield* relayPty(socket, session)
          }).pipe(Effect.scoped))
    })
  )

/** The terminal over the upgraded connection, until either side ends; errors just end it. */
const relayPty = (socket: Socket.Socket, session: PtySession) =>
  Effect.gen(function*() {
    const writer = yield* socket.writer
    const reader = yield* socket.reader
    // The terminal's bytes out, then its exit code: the last frame.
    const out = Effect.gen(function*() {
      yield* session.output.pipe(
        Stream.runForEach((bytes) => writer.write(PtyFrames.encode({ type: PtyFrames.DATA, bytes })))
      )
      const code = yield* session.exit
      yield* writer.write(PtyFrames.encode({ type: PtyFrames.EXIT, code }))
    })
    // Keys and resizes in; the connection ending ends the terminal (the scope hangs it up).
    const decoder = new PtyFrames.Decoder()
    const input = Effect.gen(function*() {
      while (true) {
        for (const chunk of yield* reader.pull) {
          const frames = yield* Effect.try({
            try: () => decoder.push(typeof chunk === "string" ? Buffer.from(chunk) : chunk),
            catch: () => invalid("bad terminal frame")
          })
          for (const frame of frames) {
            if (frame.type === PtyFrames.DATA) yield* session.write(frame.bytes)
            else if (frame.type === PtyFrames.RESIZE) yield* Effect.ignore(session.resize(frame.cols, frame.rows))
          }
        }
      }
    })
    yield* Effect.raceFirst(out, Effect.andThen(Effect.ignore(input), Effect.never))
  }).pipe(Effect.ignore)

type ProcessError = AgentInvalid | AgentNotFound | AgentNotRunning | AgentConflict | AgentTooLarge | AgentFailed

/** Errors of process endpoints: anything but the declared ones (a file refusal, busy) is the host failing. */
const narrow = (e: { readonly error: string }): ProcessError =>
  e instanceof AgentInvalid || e instanceof AgentNotFound || e instanceof AgentNotRunning ||
    e instanceof AgentConflict || e instanceof AgentTooLarge || e instanceof AgentFailed
    ? e
    : new AgentFailed({ error: e.error })
