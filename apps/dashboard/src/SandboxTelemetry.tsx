/**
 * A sandbox's metrics and log on its page (a chunk of its own, loaded with the page's panel):
 * small inline SVG charts of the samples of the last 15 minutes (`GET /v1/sandboxes/{id}/metrics`,
 * polled every 5 s): CPU, memory (with its limit), disk, processes and the network's bytes per
 * second each way; and the log followed (`GET .../logs?follow=true`, server-sent events on the
 * session cookie), its last 1,000 lines kept.
 */
import { useEffect, useId, useRef, useState } from "preact/hooks"
import { get } from "./api.ts"
import { ErrorMessage } from "./ui.tsx"
import type { MetricSample } from "./wire.ts"

const POLL_MS = 5_000
const WINDOW = "15m"
const MAX_LINES = 1_000

const WIDTH = 240
const HEIGHT = 64

interface Series {
  readonly label: string
  readonly values: ReadonlyArray<number>
  readonly className: string
}

const bytes = (n: number) =>
  n >= 1024 ** 3
    ? `${(n / 1024 ** 3).toFixed(1)} GiB`
    : n >= 1024 ** 2
    ? `${(n / 1024 ** 2).toFixed(1)} MiB`
    : n >= 1024
    ? `${(n / 1024).toFixed(1)} KiB`
    : `${Math.round(n)} B`

/** One chart: a polyline per series over the samples, scaled to the largest value (or `max`). */
const Chart = (props: {
  readonly title: string
  readonly series: ReadonlyArray<Series>
  readonly format: (n: number) => string
  readonly max?: number
}) => {
  const id = useId()
  const count = props.series[0]?.values.length ?? 0
  // A tenth of headroom: a flat series is drawn below the frame's top, not on it.
  const peak = Math.max(props.max ?? 0, ...props.series.flatMap((s) => s.values).map((v) => v * 1.1), 1e-9)
  const x = (i: number) => (count <= 1 ? WIDTH : (i / (count - 1)) * WIDTH)
  const y = (v: number) => HEIGHT - 2 - (v / peak) * (HEIGHT - 4)
  const latest = props.series.map((s) => `${s.label} ${props.format(s.values.at(-1) ?? 0)}`).join(", ")
  return (
    <figure class="chart" data-testid="metric-chart" data-points={count}>
      <figcaption id={`${id}-caption`}>
        <strong>{props.title}</strong> <span class="muted">{count === 0 ? "no samples yet" : latest}</span>
      </figcaption>
      <svg
        viewBox={`0 0 ${WIDTH} ${HEIGHT}`}
        width={WIDTH}
        height={HEIGHT}
        role="img"
        aria-labelledby={`${id}-caption`}
        preserveAspectRatio="none"
      >
        <rect x="0" y="0" width={WIDTH} height={HEIGHT} class="chart-frame" />
        {props.series.map((s) => (
          <polyline
            key={s.label}
            class={`chart-line ${s.className}`}
            data-series={s.label}
            points={s.values.map((v, i) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`).join(" ")}
          />
        ))}
      </svg>
    </figure>
  )
}

/** Bytes per second between consecutive samples of a counter (a new run's reset counts as 0). */
const rates = (samples: ReadonlyArray<MetricSample>, pick: (s: MetricSample) => number) =>
  samples.map((s, i) => {
    const previous = samples[i - 1]
    if (previous === undefined) return 0
    const seconds = (Date.parse(s.ts) - Date.parse(previous.ts)) / 1000
    const delta = pick(s) - pick(previous)
    return seconds > 0 && delta > 0 ? delta / seconds : 0
  })

const Metrics = (props: { readonly sandboxId: string }) => {
  const [samples, setSamples] = useState<ReadonlyArray<MetricSample>>([])
  const [error, setError] = useState<unknown>(undefined)
  useEffect(() => {
    let stopped = false
    let timer: ReturnType<typeof setTimeout> | undefined
    const load = async () => {
      try {
        const page = await get<{ samples: ReadonlyArray<MetricSample> }>(
          `/v1/sandboxes/${props.sandboxId}/metrics?since=${WINDOW}`
        )
        if (!stopped) {
          setSamples(page.samples)
          setError(undefined)
        }
      } catch (e) {
        if (!stopped) setError(e)
      }
      if (!stopped) timer = setTimeout(load, POLL_MS)
    }
    void load()
    return () => {
      stopped = true
      if (timer !== undefined) clearTimeout(timer)
    }
  }, [props.sandboxId])
  const last = samples.at(-1)
  return (
    <>
      <ErrorMessage error={error} />
      <div class="charts">
        <Chart
          title="CPU"
          series={[{ label: "cpu", values: samples.map((s) => s.cpu_pct), className: "a" }]}
          format={(n) => `${n.toFixed(1)} %`}
          max={100}
        />
        <Chart
          title="Memory"
          series={[{ label: "used", values: samples.map((s) => s.mem_bytes), className: "a" }]}
          format={(n) => `${bytes(n)}${last === undefined ? "" : ` of ${bytes(last.mem_limit_bytes)}`}`}
        />
        <Chart
          title="Disk"
          series={[{ label: "used", values: samples.map((s) => s.disk_bytes), className: "a" }]}
          format={(n) => `${bytes(n)}${last === undefined ? "" : ` of ${bytes(last.disk_limit_bytes)}`}`}
        />
        <Chart
          title="Processes"
          series={[{ label: "pids", values: samples.map((s) => s.pids), className: "a" }]}
          format={(n) => String(n)}
        />
        <Chart
          title="Network"
          series={[
            { label: "in", values: rates(samples, (s) => s.net_rx_bytes), className: "a" },
            { label: "out", values: rates(samples, (s) => s.net_tx_bytes), className: "b" }
          ]}
          format={(n) => `${bytes(n)}/s`}
        />
      </div>
    </>
  )
}

const Log = (props: { readonly sandboxId: string }) => {
  const [lines, setLines] = useState<ReadonlyArray<string>>([])
  const [connected, setConnected] = useState(false)
  const pre = useRef<HTMLPreElement>(null)
  useEffect(() => {
    setLines([])
    const source = new EventSource(`/v1/sandboxes/${props.sandboxId}/logs?follow=true`)
    let first = true
    source.onopen = () => {
      setConnected(true)
      // A reconnection sends the stored lines again: they replace what is shown.
      if (!first) setLines([])
      first = false
    }
    source.onerror = () => setConnected(false)
    source.addEventListener("log", (event) => {
      const line = (event as MessageEvent<string>).data
      setLines((all) => (all.length >= MAX_LINES ? [...all.slice(all.length - MAX_LINES + 1), line] : [...all, line]))
    })
    return () => source.close()
  }, [props.sandboxId])
  useEffect(() => {
    const el = pre.current
    if (el !== null) el.scrollTop = el.scrollHeight
  }, [lines])
  return (
    <>
      <p class="muted" role="status">{connected ? "Following the log." : "Connecting to the log…"}</p>
      <pre ref={pre} class="log" data-testid="sandbox-log" role="log" aria-label="Sandbox log" tabIndex={0}>
        {lines.join("\n")}
      </pre>
    </>
  )
}

/** The panel: metrics charts and the followed log. */
const SandboxTelemetry = (props: { readonly sandboxId: string }) => {
  const id = useId()
  return (
    <section aria-labelledby={`${id}-title`} class="panel telemetry">
      <h2 id={`${id}-title`}>Metrics and log</h2>
      <p class="muted">A sample every 5 s while it runs; the last {WINDOW.replace("m", " minutes")} shown.</p>
      <Metrics sandboxId={props.sandboxId} />
      <h3>Log</h3>
      <Log sandboxId={props.sandboxId} />
    </section>
  )
}

export default SandboxTelemetry
