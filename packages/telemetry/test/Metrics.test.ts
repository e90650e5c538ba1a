/**
 * The `/metrics` listener: the registry in Prometheus text format, collectors run at each scrape
 * (and only then), a failing collector does not fail the scrape, and the roles of one process
 * (`svc dev`) share one listener on `SVC_METRICS_PORT`.
 */
import { describe, expect, it } from "@effect/vitest"
import { freePort } from "@svc/local-servers/Servers"
import * as Prometheus from "@svc/testing/Prometheus"
import { ConfigProvider, Effect, Layer, Metric } from "effect"
import * as Metrics from "../src/Metrics.ts"
import * as Telemetry from "../src/Telemetry.ts"

const scrape = (port: number) =>
  Effect.promise(async () => {
    const response = await fetch(`http://127.0.0.1:${port}/metrics`)
    return { status: response.status, type: response.headers.get("content-type"), body: await response.text() }
  })

describe("metrics", () => {
  it.live("the roles of one process share one listener; collectors run at each scrape", () =>
    Effect.gen(function*() {
      const port = yield* Effect.promise(freePort)
      let collected = 0
      const gauge = Metric.gauge("svc_test_collected", { description: "scrapes seen by the test's collector" })
      const counter = Metric.counter("svc_test_things_total", { description: "things", incremental: true })
      const collector = Metrics.collector("test", Effect.suspend(() => Metric.update(gauge, ++collected)))
      const broken = Metrics.collector("broken", Effect.fail("no database"))
      // Two roles, as `svc dev` composes them: each with its own telemetry layer.
      const roles = Layer.mergeAll(
        collector.pipe(Layer.provide(Telemetry.layer("svc-api"))),
        broken.pipe(Layer.provide(Telemetry.layer("svc-runtime")))
      )
      const env = ConfigProvider.fromEnv({ env: { SVC_METRICS_PORT: String(port) } })
      yield* Effect.gen(function*() {
        yield* Metric.update(counter, 3)
        expect(collected).toBe(0)
        const first = yield* scrape(port)
        expect(first.status).toBe(200)
        expect(first.type).toBe(Metrics.CONTENT_TYPE)
        const families = Prometheus.parse(first.body)
        expect(Prometheus.valueOf(families, "svc_test_collected")).toBe(1)
        expect(Prometheus.valueOf(families, "svc_test_things_total")).toBe(3)
        expect(families.find((f) => f.name === "svc_test_things_total")?.type).toBe("counter")
        const second = Prometheus.parse((yield* scrape(port)).body)
        expect(Prometheus.valueOf(second, "svc_test_collected")).toBe(2)
        expect((yield* Effect.promise(() => fetch(`http://127.0.0.1:${port}/other`))).status).toBe(404)
      }).pipe(Effect.provide(roles.pipe(Layer.provide(ConfigProvider.layer(env)))), Effect.scoped)
      // Gone with its layer: nothing listens any more.
      const after = yield* Effect.promise(() =>
        fetch(`http://127.0.0.1:${port}/metrics`).then(() => "up", () => "down")
      )
      expect(after).toBe("down")
    }))

  it.live("no listener without SVC_METRICS_PORT", () =>
    Effect.gen(function*() {
      const env = ConfigProvider.fromEnv({ env: {} })
      yield* Layer.build(Telemetry.layer("svc-agent")).pipe(
        Effect.provide(ConfigProvider.layer(env)),
        Effect.scoped
      )
    }))

  it("the strict parser refuses what Prometheus would", () => {
    expect(() => Prometheus.parse("x 1")).toThrow(/newline/)
    expect(() => Prometheus.parse("# TYPE x counter\nx -1\n")).toThrow(/negative/)
    expect(() => Prometheus.parse("x{a=\"1\",a=\"2\"} 1\n")).toThrow(/twice/)
    expect(() => Prometheus.parse("x{a=\"\\q\"} 1\n")).toThrow(/escape/)
    expect(() => Prometheus.parse("x 1\ny 1\nx 2\n")).toThrow(/together/)
    expect(() => Prometheus.parse("# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_count 1\n"))
      .toThrow(/decrease/)
    expect(() => Prometheus.parse("1x 1\n")).toThrow(/metric name/)
    expect(Prometheus.valueOf(Prometheus.parse("x{a=\"q\\\"\\n\"} +Inf 1700000000\n"), "x", { a: "q\"\n" })).toBe(
      Number.POSITIVE_INFINITY
    )
  })
})
