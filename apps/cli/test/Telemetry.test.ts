/**
 * Telemetry across the processes, as an operator runs them: api, runtime, dispatcher and agent
 * each `node apps/<role>/src/main.ts`, with `OTEL_EXPORTER_OTLP_ENDPOINT` on an OTLP/HTTP (JSON)
 * receiver of the test's, `SVC_LOG_FORMAT=json` and a `SVC_METRICS_PORT` each.
 *
 * One `POST /v1/sandboxes` (sent with a `traceparent` of the test's) is one trace: the webhook
 * delivery span of the dispatcher has, up its parent links, the fan-out of its event, the
 * runtime's handling of the agent's report, the agent's `create` command, the runtime's handling
 * of the create, and the API's request span, whose parent is the test's span; each under its
 * role's service name. Every role's `/metrics` is parsed by a strict Prometheus text parser and
 * holds the platform's metrics with the values this flow gives them. Every log line is JSON,
 * with the request id and the trace of its request, and no process ever wrote the API key, the
 * webhook's signing secret, a sandbox's secret env value or a refused token.
 */
import { expect, layer } from "@effect/vitest"
import { eventually } from "@svc/testing/Eventually"
import * as Prometheus from "@svc/testing/Prometheus"
import * as TestDatabase from "@svc/testing/TestDatabase"
import { call } from "@svc/testing/TestHttp"
import * as TestNats from "@svc/testing/TestNats"
import { appMain, freePort, readyEvent, type RoleProcess, spawnRole } from "@svc/testing/TestProcess"
import { receiver } from "@svc/testing/WebhookReceiver"
import { Duration, Effect, Layer } from "effect"
import { randomBytes } from "node:crypto"
import * as Http from "node:http"
import type * as Net from "node:net"
import { devOrgApi, rolesSetup } from "./support/Roles.ts"

interface ExportedSpan {
  readonly service: string
  readonly traceId: string
  readonly spanId: string
  readonly parentSpanId: string | undefined
  readonly name: string
  readonly kind: number
  readonly attributes: Readonly<Record<string, unknown>>
}

const valueOf = (value: Record<string, unknown> | undefined): unknown =>
  value === undefined
    ? undefined
    : value["stringValue"] ?? value["intValue"] ?? value["boolValue"] ?? value["doubleValue"]

const attributesOf = (list: ReadonlyArray<{ key: string; value: Record<string, unknown> }> | undefined) =>
  Object.fromEntries((list ?? []).map((a) => [a.key, valueOf(a.value)]))

/** An OTLP/HTTP receiver (JSON encoding): every span posted to `/v1/traces`, with its service. */
const otlpReceiver = Effect.acquireRelease(
  Effect.promise(() =>
    new Promise<{ readonly url: string; readonly spans: Array<ExportedSpan>; readonly server: Http.Server }>(
      (resolve) => {
        const spans: Array<ExportedSpan> = []
        const server = Http.createServer((request, response) => {
          const chunks: Array<Buffer> = []
          request.on("data", (chunk: Buffer) => chunks.push(chunk))
          request.on("end", () => {
            if (request.url === "/v1/traces" && request.method === "POST") {
              expect(request.headers["content-type"]).toContain("application/json")
              const body = JSON.parse(Buffer.concat(chunks).toString("utf8"))
              for (const resourceSpan of body.resourceSpans ?? []) {
                const service = String(attributesOf(resourceSpan.resource?.attributes)["service.name"])
                for (const scope of resourceSpan.scopeSpans ?? []) {
                  for (const span of scope.spans ?? []) {
                    spans.push({
                      service,
                      traceId: span.traceId,
                      spanId: span.spanId,
                      parentSpanId: span.parentSpanId === "" ? undefined : span.parentSpanId,
                      name: span.name,
                      kind: span.kind,
                      attributes: attributesOf(span.attributes)
                    })
                  }
                }
              }
            }
            response.writeHead(200, { "content-type": "application/json" }).end("{}")
          })
        })
        server.listen(
          0,
          "127.0.0.1",
          () => resolve({ url: `http://127.0.0.1:${(server.address() as Net.AddressInfo).port}`, spans, server })
        )
      }
    )
  ),
  ({ server }) => Effect.promise(() => new Promise<void>((resolve) => server.close(() => resolve())))
)

/** A span and its ancestors as `service name`, nearest first, while the parents are known. */
const ancestry = (spans: ReadonlyArray<ExportedSpan>, from: ExportedSpan) => {
  const byId = new Map(spans.filter((s) => s.traceId === from.traceId).map((s) => [s.spanId, s]))
  const path: Array<ExportedSpan> = [from]
  let current = from
  while (current.parentSpanId !== undefined) {
    const parent = byId.get(current.parentSpanId)
    if (parent === undefined || path.includes(parent)) break
    path.push(parent)
    current = parent
  }
  return path
}

/** Whether `steps` appear in `path` in this order (others may come between). */
const inOrder = (path: ReadonlyArray<string>, steps: ReadonlyArray<string>) => {
  let i = 0
  for (const entry of path) if (entry === steps[i]) i++
  return i === steps.length
}

const metricsOf = (port: number) =>
  Effect.promise(async () => {
    const response = await fetch(`http://127.0.0.1:${port}/metrics`)
    expect(response.status).toBe(200)
    expect(response.headers.get("content-type")).toContain("text/plain; version=0.0.4")
    return Prometheus.parse(await response.text())
  })

const testLayer = Layer.mergeAll(TestDatabase.layerWithUrl, TestNats.layer)

layer(testLayer, { excludeTestServices: true })("telemetry across the role processes", (it) => {
  it.effect(
    "one sandbox create is one trace api → runtime → agent → runtime → dispatcher; /metrics of every role; JSON logs without secrets",
    () =>
      Effect.gen(function*() {
        const setup = yield* rolesSetup("svc-telemetry-test-")
        const { base, host, port } = setup
        const otlp = yield* otlpReceiver
        const metricsPorts = {
          api: yield* freePort,
          runtime: yield* freePort,
          dispatcher: yield* freePort,
          agent: yield* freePort
        }
        const telemetry = {
          OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url,
          OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
          SVC_LOG_FORMAT: "json"
        }
        const common = { ...setup.common, ...telemetry }
        const timeout = Duration.seconds(120)
        const api = yield* spawnRole({
          main: appMain("api"),
          env: { ...common, SVC_HOST: "127.0.0.1", SVC_PORT: String(port), SVC_METRICS_PORT: String(metricsPorts.api) },
          ready: readyEvent("api_ready"),
          timeout
        })
        const [runtime, dispatcher, agent] = yield* Effect.all([
          spawnRole({
            main: appMain("runtime"),
            env: { ...common, SVC_METRICS_PORT: String(metricsPorts.runtime) },
            ready: (s) => (s.includes("runtime ready") ? true : undefined),
            timeout
          }),
          spawnRole({
            main: appMain("dispatcher"),
            env: { ...common, SVC_METRICS_PORT: String(metricsPorts.dispatcher) },
            ready: readyEvent("dispatcher_ready"),
            timeout
          }),
          spawnRole({
            main: appMain("agent"),
            env: {
              ...setup.agent,
              SVC_AGENT_POOL_SIZE: "0",
              SVC_METRICS_PORT: String(metricsPorts.agent),
              ...telemetry
            },
            ready: readyEvent("agent_ready"),
            timeout
          })
        ], { concurrency: "unbounded" })
        const roles: Record<string, RoleProcess<unknown>> = { api, runtime, dispatcher, agent }

        const { api: api_, token } = yield* devOrgApi(base)

        // A refused credential, a webhook (its signing secret is shown once), then a sandbox with a
        // secret in its env, created under a trace of the test's.
        const wrongToken = `svc_live_${randomBytes(20).toString("hex")}`
        const refused = yield* call(base, "GET", "/v1/sandboxes", { token: wrongToken })
        expect(refused.status).toBe(401)
        const rx = yield* receiver()
        const hook = yield* api_("POST", "/v1/webhooks", { url: rx.url, events: ["sandbox.created"] })
        expect(hook.status, hook.text).toBe(201)
        const signingSecret = hook.json.secret_returned_once as string
        const envSecret = `env-secret-${randomBytes(12).toString("hex")}`
        const traceId = randomBytes(16).toString("hex")
        const parentSpanId = randomBytes(8).toString("hex")
        const created = yield* api_("POST", "/v1/sandboxes", { name: "traced", env: { API_TOKEN: envSecret } }, {
          traceparent: `00-${traceId}-${parentSpanId}-01`
        })
        expect(created.status, created.text).toBe(201)
        const sandboxId = created.json.id as string
        yield* eventually(
          api_("GET", `/v1/sandboxes/${sandboxId}`),
          (r) => r.json?.state === "running",
          Duration.seconds(90),
          Duration.millis(200)
        )
        yield* eventually(
          Effect.sync(() => rx.received.length),
          (n) => n >= 1,
          Duration.seconds(60),
          Duration.millis(100)
        )

        // -- one trace ----------------------------------------------------------------------
        const chain = [
          "svc-dispatcher WebhookDispatcher.deliver",
          "svc-dispatcher WebhookFanOut.deliver",
          "svc-runtime ActorRuntime.handle sandbox",
          "svc-agent Agent.command",
          "svc-runtime ActorRuntime.handle sandbox",
          "svc-api POST /v1/sandboxes"
        ]
        const path = yield* eventually(
          Effect.sync(() => {
            const delivery = otlp.spans.find((s) =>
              s.traceId === traceId && s.service === "svc-dispatcher" && s.name === "WebhookDispatcher.deliver"
            )
            return delivery === undefined ? [] : ancestry(otlp.spans, delivery)
          }),
          (p) => p.length > 0 && p[p.length - 1]!.parentSpanId === parentSpanId,
          Duration.seconds(90),
          Duration.millis(250)
        )
        const names = path.map((s) => `${s.service} ${s.name}`)
        expect(inOrder(names, chain), names.join("\n")).toBe(true)
        // The root is the API's server span, child of the test's own span.
        const root = path[path.length - 1]!
        expect(root.service).toBe("svc-api")
        expect(root.name).toBe("POST /v1/sandboxes")
        expect(root.kind).toBe(2)
        expect(root.attributes["http.response.status_code"]).toBe(201)
        expect(String(root.attributes["svc.request_id"])).toMatch(/^req_/)
        const command = path.find((s) => s.service === "svc-agent" && s.name === "Agent.command")!
        expect(command.attributes["command"]).toBe("create")
        expect(command.attributes["sandboxId"]).toBe(sandboxId)
        expect(command.kind).toBe(5)
        for (const span of path) expect(span.traceId).toBe(traceId)
        // Each process exported under its own service name.
        expect(new Set(path.map((s) => s.service))).toEqual(
          new Set(["svc-api", "svc-runtime", "svc-agent", "svc-dispatcher"])
        )

        // -- metrics ------------------------------------------------------------------------
        const runtimeMetrics = yield* eventually(
          metricsOf(metricsPorts.runtime),
          (m) => Prometheus.valueOf(m, "svc_sandboxes", { state: "running" }) === 1,
          Duration.seconds(30),
          Duration.millis(250)
        )
        expect(Prometheus.valueOf(runtimeMetrics, "svc_sandboxes", { state: "error" })).toBe(0)
        expect(runtimeMetrics.find((f) => f.name === "svc_sandboxes")?.type).toBe("gauge")
        expect(Prometheus.valueOf(runtimeMetrics, "svc_actor_messages_total", { type: "sandbox", outcome: "applied" }))
          .toBeGreaterThanOrEqual(2)
        expect(runtimeMetrics.find((f) => f.name === "svc_actor_messages_total")?.type).toBe("counter")
        expect(Prometheus.samplesOf(runtimeMetrics, "svc_queue_pending_messages", { stream: "ACTOR_SANDBOX" }).length)
          .toBe(16)
        expect(
          Prometheus.samplesOf(runtimeMetrics, "svc_queue_pending_messages", {
            stream: "AGENT",
            consumer: `agent_${host.hostId}`
          }).length
        ).toBe(1)
        expect(Prometheus.samplesOf(runtimeMetrics, "svc_outbox_pending").length).toBe(1)

        const apiBefore = yield* metricsOf(metricsPorts.api)
        const labels = { method: "GET", route: "/v1/sandboxes/:id", status: "200" }
        const before = Prometheus.valueOf(apiBefore, "svc_http_requests_total", labels)
        expect(before).toBeGreaterThanOrEqual(1)
        expect(Prometheus.valueOf(apiBefore, "svc_http_requests_total", { route: "/v1/sandboxes", status: "201" }))
          .toBe(1)
        expect(Prometheus.valueOf(apiBefore, "svc_http_requests_total", { route: "/v1/sandboxes", status: "401" }))
          .toBe(1)
        expect(
          Prometheus.valueOf(apiBefore, "svc_http_request_duration_seconds_count", {
            method: "POST",
            route: "/v1/sandboxes"
          })
        ).toBe(1)
        expect(apiBefore.find((f) => f.name === "svc_http_request_duration_seconds")?.type).toBe("histogram")
        for (let i = 0; i < 3; i++) expect((yield* api_("GET", `/v1/sandboxes/${sandboxId}`)).status).toBe(200)
        const apiAfter = yield* metricsOf(metricsPorts.api)
        expect(Prometheus.valueOf(apiAfter, "svc_http_requests_total", labels)).toBe(before + 3)
        // Ids never become labels.
        expect(apiAfter.flatMap((f) => f.samples).some((s) => JSON.stringify(s.labels).includes(sandboxId))).toBe(
          false
        )

        const dispatcherMetrics = yield* eventually(
          metricsOf(metricsPorts.dispatcher),
          (m) => Prometheus.valueOf(m, "svc_webhook_deliveries_total", { status: "succeeded" }) >= 1,
          Duration.seconds(30),
          Duration.millis(250)
        )
        expect(Prometheus.valueOf(dispatcherMetrics, "svc_webhook_deliveries_total", { status: "succeeded" })).toBe(
          rx.received.length
        )
        expect(
          Prometheus.samplesOf(dispatcherMetrics, "svc_queue_pending_messages", {
            stream: "EVENTS",
            consumer: "webhook_fanout"
          }).length
        ).toBe(1)
        expect(
          Prometheus.samplesOf(dispatcherMetrics, "svc_queue_unacked_messages", {
            stream: "WEBHOOK_DELIVERY",
            consumer: `whd_${hook.json.id}`
          }).length
        ).toBe(1)

        const agentMetrics = yield* metricsOf(metricsPorts.agent)
        expect(Prometheus.valueOf(agentMetrics, "svc_agent_commands_total", { command: "create", outcome: "acked" }))
          .toBe(1)
        expect(
          Prometheus.valueOf(agentMetrics, "svc_queue_pending_messages", {
            stream: "AGENT",
            consumer: `agent_${host.hostId}`
          })
        ).toBe(0)

        // -- logs ---------------------------------------------------------------------------
        const secrets = [token, signingSecret, envSecret, wrongToken]
        for (const [role, child] of Object.entries(roles)) {
          const output = child.output()
          for (const secret of secrets) expect(output.includes(secret), `${role} wrote a secret`).toBe(false)
          const lines = output.split("\n").filter((l) => l.trim() !== "" && l !== "runtime ready")
          expect(lines.length).toBeGreaterThan(0)
          for (const line of lines) {
            let parsed: Record<string, unknown> | undefined
            try {
              parsed = JSON.parse(line)
            } catch {
              parsed = undefined
            }
            expect(parsed, `${role}: not a JSON line: ${line}`).toBeDefined()
            if (parsed!["event"] !== undefined) continue // the ready line
            expect(parsed!["service"], line).toBe(`svc-${role}`)
            expect(typeof parsed!["ts"], line).toBe("string")
            expect(typeof parsed!["level"], line).toBe("string")
          }
        }
        const requestLines = api.output().split("\n").filter((l) => l.includes("\"message\":\"request\"")).map((l) =>
          JSON.parse(l) as Record<string, unknown>
        )
        expect(requestLines.length).toBeGreaterThanOrEqual(6)
        for (const line of requestLines) {
          expect(String(line["requestId"])).toMatch(/^req_/)
          expect(String(line["trace_id"])).toMatch(/^[0-9a-f]{32}$/)
          expect(String(line["span_id"])).toMatch(/^[0-9a-f]{16}$/)
        }
        const createLine = requestLines.find((l) => l["route"] === "/v1/sandboxes" && l["method"] === "POST")!
        expect(createLine["trace_id"]).toBe(traceId)
        expect(createLine["status"]).toBe(201)
        expect(createLine["requestId"]).toBe(created.headers.get("x-request-id"))
      }).pipe(Effect.scoped),
    300_000
  )
})
