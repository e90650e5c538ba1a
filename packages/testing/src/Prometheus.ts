/**
 * A strict parser of the Prometheus text exposition format (version 0.0.4), for tests that read
 * `/metrics`: it throws on anything a Prometheus server would refuse or misread, so a test that
 * parses a body also checks that the body is well formed.
 *
 * Checked: `# HELP name text` and `# TYPE name counter|gauge|histogram|summary|untyped` (at most
 * once per family, TYPE before its samples); sample lines `name{label="value",...} value
 * [timestamp]` with valid metric and label names, escapes (`\\`, `\"`, `\n`) only, no label twice,
 * values as Go floats (`+Inf`, `-Inf`, `NaN`); a family's samples together, not interleaved with
 * another's; counters never negative; a histogram's `_bucket` series carry `le`, their counts do
 * not decrease as `le` grows, each ends with `le="+Inf"`, which equals its `_count`; every
 * line ends with a newline.
 */

export type MetricType = "counter" | "gauge" | "histogram" | "summary" | "untyped"

export interface Sample {
  readonly name: string
  readonly labels: Readonly<Record<string, string>>
  readonly value: number
}

export interface Family {
  readonly name: string
  readonly type: MetricType
  readonly help: string | undefined
  readonly samples: ReadonlyArray<Sample>
}

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/
const TYPES = new Set(["counter", "gauge", "histogram", "summary", "untyped"])
const FLOAT = /^[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|Inf|inf)$/

const fail = (line: number, message: string, text: string): never => {
  throw new Error(`metrics line ${line}: ${message}: ${JSON.stringify(text)}`)
}

const parseValue = (text: string, line: number, whole: string): number => {
  if (text === "NaN") return Number.NaN
  if (text === "+Inf" || text === "Inf") return Number.POSITIVE_INFINITY
  if (text === "-Inf") return Number.NEGATIVE_INFINITY
  if (!FLOAT.test(text)) fail(line, `not a value (${text})`, whole)
  return Number(text)
}

/** The family a sample belongs to: a histogram's `_bucket`/`_sum`/`_count`, a summary's `_sum`/`_count`. */
const familyOf = (name: string, types: ReadonlyMap<string, MetricType>): string => {
  for (const suffix of ["_bucket", "_sum", "_count"]) {
    if (name.endsWith(suffix)) {
      const base = name.slice(0, -suffix.length)
      const type = types.get(base)
      if (type === "histogram" || (type === "summary" && suffix !== "_bucket")) return base
    }
  }
  return name
}

/** Parses `{a="x",b="y"}` starting at `start` (the `{`); returns the labels and the index after `}`. */
const parseLabels = (text: string, start: number, line: number) => {
  const labels: Record<string, string> = {}
  let i = start + 1
  for (;;) {
    if (text[i] === "}") return { labels, end: i + 1 }
    const eq = text.indexOf("=", i)
    if (eq === -1) fail(line, "label without =", text)
    const name = text.slice(i, eq).trim()
    if (!LABEL_NAME.test(name)) fail(line, `invalid label name ${name}`, text)
    if (name in labels) fail(line, `label ${name} twice`, text)
    if (text[eq + 1] !== "\"") fail(line, "label value not quoted", text)
    let value = ""
    let j = eq + 2
    for (;; j++) {
      const c = text[j]
      if (c === undefined) fail(line, "unterminated label value", text)
      if (c === "\"") break
      if (c === "\\") {
        const next = text[++j]
        if (next === "\\") value += "\\"
        else if (next === "\"") value += "\""
        else if (next === "n") value += "\n"
        else fail(line, `invalid escape \\${next}`, text)
      } else value += c
    }
    labels[name] = value
    i = j + 1
    if (text[i] === ",") i++
    else if (text[i] !== "}") fail(line, "expected , or } after a label", text)
  }
}

export const parse = (body: string): ReadonlyArray<Family> => {
  if (body.length > 0 && !body.endsWith("\n")) throw new Error("metrics: the body does not end with a newline")
  const types = new Map<string, MetricType>()
  const helps = new Map<string, string>()
  const samples = new Map<string, Array<Sample>>()
  const order: Array<string> = []
  const closed = new Set<string>()
  let current: string | undefined
  const lines = body.split("\n")
  lines.pop()
  lines.forEach((text, index) => {
    const line = index + 1
    if (text.trim() === "") return
    if (text.startsWith("#")) {
      const match = /^#\s+(HELP|TYPE)\s+(\S+)(?:\s(.*))?$/.exec(text)
      if (match === null) return // a comment
      const [, keyword, name, rest] = match
      if (!METRIC_NAME.test(name!)) fail(line, `invalid metric name ${name}`, text)
      if (keyword === "TYPE") {
        const type = (rest ?? "").trim()
        if (!TYPES.has(type)) fail(line, `unknown type ${type}`, text)
        if (types.has(name!)) fail(line, `second TYPE for ${name}`, text)
        if (samples.has(name!)) fail(line, `TYPE of ${name} after its samples`, text)
        types.set(name!, type as MetricType)
      } else {
        if (helps.has(name!)) fail(line, `second HELP for ${name}`, text)
        helps.set(name!, rest ?? "")
      }
      return
    }
    const brace = text.indexOf("{")
    const space = text.indexOf(" ")
    const nameEnd = brace !== -1 && (space === -1 || brace < space) ? brace : space
    if (nameEnd <= 0) fail(line, "not a sample", text)
    const name = text.slice(0, nameEnd)
    if (!METRIC_NAME.test(name)) fail(line, `invalid metric name ${name}`, text)
    let labels: Record<string, string> = {}
    let restStart = nameEnd
    if (text[nameEnd] === "{") {
      const parsed = parseLabels(text, nameEnd, line)
      labels = parsed.labels
      restStart = parsed.end
    }
    const rest = text.slice(restStart).trim().split(/\s+/)
    if (rest.length < 1 || rest.length > 2 || rest[0] === "") {
      fail(line, "expected a value and an optional timestamp", text)
    }
    if (rest.length === 2 && !/^-?\d+$/.test(rest[1]!)) fail(line, "invalid timestamp", text)
    const value = parseValue(rest[0]!, line, text)
    const family = familyOf(name, types)
    if (current !== family) {
      if (closed.has(family)) fail(line, `samples of ${family} are not together`, text)
      if (current !== undefined) closed.add(current)
      current = family
    }
    if (!samples.has(family)) {
      samples.set(family, [])
      order.push(family)
    }
    const type = types.get(family) ?? "untyped"
    if (type === "counter" && !(value >= 0)) fail(line, "a counter is negative", text)
    if (type === "histogram" && name === `${family}_bucket` && labels["le"] === undefined) {
      fail(line, "a bucket without le", text)
    }
    samples.get(family)!.push({ name, labels, value })
  })
  const families = order.map((name): Family => ({
    name,
    type: types.get(name) ?? "untyped",
    help: helps.get(name),
    samples: samples.get(name)!
  }))
  for (const family of families) if (family.type === "histogram") checkHistogram(family)
  return families
}

const seriesKey = (labels: Readonly<Record<string, string>>, without: string) =>
  JSON.stringify(Object.entries(labels).filter(([k]) => k !== without).sort(([a], [b]) => a.localeCompare(b)))

const checkHistogram = (family: Family) => {
  const buckets = new Map<string, Array<{ readonly le: number; readonly count: number }>>()
  const counts = new Map<string, number>()
  for (const s of family.samples) {
    if (s.name === `${family.name}_bucket`) {
      const key = seriesKey(s.labels, "le")
      const list = buckets.get(key) ?? []
      list.push({ le: parseValue(s.labels["le"]!, 0, s.labels["le"]!), count: s.value })
      buckets.set(key, list)
    } else if (s.name === `${family.name}_count`) counts.set(seriesKey(s.labels, "le"), s.value)
  }
  for (const [key, list] of buckets) {
    const sorted = [...list].sort((a, b) => a.le - b.le)
    for (let i = 1; i < sorted.length; i++) {
      if (sorted[i]!.count < sorted[i - 1]!.count) throw new Error(`metrics: ${family.name} buckets decrease ${key}`)
    }
    const last = sorted[sorted.length - 1]!
    if (last.le !== Number.POSITIVE_INFINITY) throw new Error(`metrics: ${family.name} has no +Inf bucket ${key}`)
    if (counts.get(key) !== last.count) throw new Error(`metrics: ${family.name}_count differs from +Inf ${key}`)
  }
}

/** The samples of `name` (a sample name: `x_total`, `x_bucket`, ...) whose labels include `labels`. */
export const samplesOf = (
  families: ReadonlyArray<Family>,
  name: string,
  labels: Readonly<Record<string, string>> = {}
): ReadonlyArray<Sample> =>
  families.flatMap((f) => f.samples).filter((s) =>
    s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v)
  )

/** The sum of the values of `samplesOf(...)` (0 when there is none). */
export const valueOf = (
  families: ReadonlyArray<Family>,
  name: string,
  labels: Readonly<Record<string, string>> = {}
): number => samplesOf(families, name, labels).reduce((sum, s) => sum + s.value, 0)
