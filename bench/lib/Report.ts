/**
 * One row per figure: what was measured, the baseline measured in the same run, their ratio and
 * the target. Each benchmark prints its rows; under `npm run bench` (BENCH_REPORT set to a file)
 * they are also collected so the run ends with one table of every figure.
 */
import * as fs from "node:fs"
import { fmt } from "./Measure.ts"

export interface Row {
  readonly bench: string
  readonly figure: string
  readonly value: number
  readonly unit: string
  /** The baseline's figure in the same unit, when there is one. */
  readonly baseline?: number
  readonly baselineName?: string
  /** value / baseline, or the figure's own ratio (for example a time against a floor). */
  readonly ratio?: number
  /** The target, in words (`ratio >= 0.5`, `p50 < 150 ms`). */
  readonly target?: string
  readonly met?: boolean
  /** How many runs the median was taken over. */
  readonly runs?: number
}

const digits = (n: number) => (Math.abs(n) >= 100 ? 0 : Math.abs(n) >= 10 ? 1 : 2)
const num = (n: number | undefined) => (n === undefined || !Number.isFinite(n) ? "" : fmt(n, digits(n)))

export const record = (row: Row) => {
  const parts = [
    `  ${row.figure}: ${num(row.value)} ${row.unit}`,
    row.baseline !== undefined ? `baseline (${row.baselineName ?? "baseline"}) ${num(row.baseline)} ${row.unit}` : "",
    row.ratio !== undefined ? `ratio ${num(row.ratio)}` : "",
    row.target ? `target ${row.target}${row.met === undefined ? "" : row.met ? " (met)" : " (NOT met)"}` : "",
    row.runs ? `median of ${row.runs}` : ""
  ].filter(Boolean)
  console.log(parts.join("  ·  "))
  const file = process.env.BENCH_REPORT
  if (file) fs.appendFileSync(file, JSON.stringify(row) + "\n")
}

/** Prints the collected rows as one Markdown table (`node bench/lib/Report.ts <file>`). */
export const table = (rows: ReadonlyArray<Row>): string => {
  const header = ["bench", "figure", "value", "baseline", "ratio", "target", "runs"]
  const lines = rows.map((r) => [
    r.bench,
    r.figure,
    `${num(r.value)} ${r.unit}`,
    r.baseline === undefined ? "" : `${num(r.baseline)} ${r.unit} (${r.baselineName ?? "baseline"})`,
    num(r.ratio),
    r.target ? `${r.target}${r.met === undefined ? "" : r.met ? " ✓" : " ✗"}` : "",
    r.runs ? String(r.runs) : ""
  ])
  const all = [header, ...lines]
  const widths = header.map((_, i) => Math.max(...all.map((l) => l[i]!.length)))
  const row = (l: ReadonlyArray<string>) => `| ${l.map((c, i) => c.padEnd(widths[i]!)).join(" | ")} |`
  return [row(header), `| ${widths.map((w) => "-".repeat(w)).join(" | ")} |`, ...lines.map(row)].join("\n")
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const file = process.argv[2]!
  const rows = fs.existsSync(file)
    ? fs.readFileSync(file, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l) as Row)
    : []
  console.log(`\nEvery figure of this run (${new Date().toISOString().slice(0, 10)}):\n`)
  console.log(table(rows))
}
