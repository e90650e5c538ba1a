#!/usr/bin/env node
/**
 * Rewrites citations of the design documents that live outside the repository (`spec.md 6.4`,
 * `api.md "Webhooks"`, `architecture.md "Data and messages"`, `stack-notes.md`) in code comments
 * to the repository's docs (`docs/contract.md#retries`), and checks that every `docs/...#anchor`
 * cited in a comment names a heading that exists.
 *
 *   node docs/cite-map.mjs            rewrite comment lines under apps, packages, bench, infra
 *   node docs/cite-map.mjs --check    change nothing; exit 1 when an old citation is left in a
 *                                     comment or a cited anchor does not exist
 *   node docs/cite-map.mjs [--check] path...   only these files or folders
 *
 * Only comment lines are touched (`//`, `/*`, ` *` and lines inside a block comment): code and
 * strings (test titles included) are left as they are and only listed by --check. Safe to run
 * again: a rewritten citation is not matched a second time.
 */
import { readdirSync, readFileSync, statSync, writeFileSync } from "node:fs"
import { dirname, join, relative } from "node:path"
import { fileURLToPath } from "node:url"

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..")
const DEFAULT_ROOTS = ["apps", "packages", "bench", "infra"]
const EXTENSIONS = [".ts", ".mts", ".cts", ".js", ".mjs", ".c", ".h"]

// ---------------------------------------------------------------------------------------------
// The mapping

/** spec.md section → anchors (file relative to docs/). */
const SPEC = {
  "1": ["contract.md#overview"],
  "2": ["contract.md#overview"],
  "2.1": ["contract.md#api-keys"],
  "2.2": ["contract.md#sandbox-record"],
  "2.3": ["contract.md#volumes"],
  "2.4": ["contract.md#workers"],
  "2.5": ["contract.md#webhook-record"],
  "2.6": ["contract.md#deliveries"],
  "2.7": ["contract.md#envelope"],
  "3": ["contract.md#overview"],
  "3.1": ["contract.md#key-states"],
  "3.2": ["contract.md#delivery-states"],
  "3.3": ["contract.md#templates"],
  "3.4": ["contract.md#sandbox-states"],
  "4": ["contract.md#overview"],
  "4.1": ["contract.md#who-am-i"],
  "4.2": ["contract.md#who-am-i"],
  "4.3": ["contract.md#api-keys"],
  "4.4": ["contract.md#api-keys"],
  "4.5": ["contract.md#api-keys"],
  "4.6": ["contract.md#volumes"],
  "4.7": ["contract.md#workers"],
  "4.8": ["contract.md#listing-sandboxes"],
  "4.9": ["contract.md#webhooks"],
  "4.10": ["contract.md#overview"],
  "5": ["contract.md#authentication", "contract.md#scopes"],
  "5.1": ["contract.md#credentials"],
  "5.2": ["contract.md#resources-and-actions"],
  "5.3": ["contract.md#scope-tokens"],
  "5.4": ["contract.md#secrets-scopes"],
  "5.5": ["contract.md#single-sandbox-scope"],
  "6": ["contract.md#webhooks"],
  "6.1": ["contract.md#event-kinds"],
  "6.2": ["contract.md#delivery-request"],
  "6.3": ["contract.md#signature"],
  "6.4": ["contract.md#retries"],
  "6.5": ["contract.md#audit-log"],
  "7": ["contract.md#errors"],
  "8": ["contract.md#limits"],
  "9": ["contract.md#versioning"]
}

/** api.md section title (as quoted in comments, case-insensitive) → anchors. */
const API = {
  "conventions": ["contract.md#conventions"],
  "errors": ["contract.md#errors"],
  "authentication": ["contract.md#authentication"],
  "sign-up and sessions": ["contract.md#sessions"],
  "who am i": ["contract.md#who-am-i"],
  "api keys": ["contract.md#api-keys"],
  "sandboxes": ["contract.md#sandboxes"],
  "processes": ["contract.md#sandbox-processes"],
  "snapshots, network policy and exposed ports": ["contract.md#snapshots-network-policy-and-exposed-ports"],
  "realtime events": ["contract.md#realtime-events"],
  "terminal": ["contract.md#terminal"],
  "templates": ["contract.md#templates"],
  "volumes": ["contract.md#volumes"],
  "apps": ["contract.md#apps"],
  "secrets": ["contract.md#secrets"],
  "webhooks": ["contract.md#webhooks"],
  "billing, org, audit, workers": ["contract.md#org-and-audit", "contract.md#workers"],
  "billing, org, audit": ["contract.md#org-and-audit"],
  "workers": ["contract.md#workers"],
  "documentation endpoints": ["contract.md"]
}

/** architecture.md section title → anchors. */
const ARCHITECTURE = {
  "the shape in one paragraph": ["architecture.md#overview"],
  "layout": ["architecture.md#packages"],
  "data and messages": ["architecture.md#data-and-messages"],
  "actors on jetstream": ["architecture.md#actors"],
  "host agents and sandboxes": ["architecture.md#host-agents"],
  "webhooks": ["architecture.md#webhook-delivery"],
  "scale beyond one machine": ["architecture.md#scale"],
  "versions": ["architecture.md#versions"]
}

/** Sub-sections: cited beside their parent, they add nothing; three or more siblings are the parent. */
const PARENT = {
  "contract.md#requests-and-responses": "contract.md#conventions",
  "contract.md#identifiers": "contract.md#conventions",
  "contract.md#timestamps": "contract.md#conventions",
  "contract.md#lists": "contract.md#conventions",
  "contract.md#idempotency": "contract.md#conventions",
  "contract.md#credentials": "contract.md#authentication",
  "contract.md#sessions": "contract.md#authentication",
  "contract.md#who-am-i": "contract.md#authentication",
  "contract.md#resources-and-actions": "contract.md#scopes",
  "contract.md#scope-tokens": "contract.md#scopes",
  "contract.md#account-level-routes": "contract.md#scopes",
  "contract.md#secrets-scopes": "contract.md#scopes",
  "contract.md#single-sandbox-scope": "contract.md#scopes",
  "contract.md#key-token": "contract.md#api-keys",
  "contract.md#key-states": "contract.md#api-keys",
  "contract.md#sandbox-record": "contract.md#sandboxes",
  "contract.md#creating-a-sandbox": "contract.md#sandboxes",
  "contract.md#sandbox-states": "contract.md#sandboxes",
  "contract.md#listing-sandboxes": "contract.md#sandboxes",
  "contract.md#exec-and-files": "contract.md#sandboxes",
  "contract.md#webhook-record": "contract.md#webhooks",
  "contract.md#deliveries": "contract.md#webhooks",
  "contract.md#delivery-states": "contract.md#webhooks",
  "contract.md#delivery-request": "contract.md#webhooks",
  "contract.md#signature": "contract.md#webhooks",
  "contract.md#retries": "contract.md#webhooks",
  "contract.md#envelope": "contract.md#events",
  "contract.md#event-kinds": "contract.md#events",
  "contract.md#org": "contract.md#org-and-audit",
  "contract.md#audit-log": "contract.md#org-and-audit"
}

/**
 * Phrases that the generic rule would render badly, rewritten first (in this order). Each is a
 * regex over one comment line and its replacement.
 */
const PHRASES = [
  [/Not in api\.md's table \(it lets routes add codes\)/g, "Added to docs/contract.md#errors (routes may add codes)"],
  [/Not in api\.md's table:/g, "Added to docs/contract.md#errors:"],
  [/Not in api\.md:/g, "Added to docs/contract.md#errors:"],
  [/in the order of api\.md's table/g, "in the order of docs/contract.md#errors"],
  [/Errors of this area beyond api\.md's table/g, "Errors of this area added to docs/contract.md#errors"],
  [/api\.md's error table/g, "docs/contract.md#errors"],
  [/api\.md's table/g, "docs/contract.md#errors"],
  [
    /\(api\.md "Authentication"; the table names no code, this one is ours\)/g,
    "(docs/contract.md#authentication; the code is ours, docs/contract.md#errors)"
  ],
  [/the headers api\.md asks for/g, "the headers docs/contract.md#errors asks for"],
  [/the error body of api\.md/g, "the error body of docs/contract.md#errors"],
  [/the error shape of api\.md/g, "the error shape of docs/contract.md#errors"],
  [/shapes of api\.md\b/g, "shapes of docs/contract.md#errors"],
  [/\(api\.md: /g, "(docs/contract.md#errors: "],
  [/\(api\.md `timeout_s`\)/g, "(`timeout_s`, docs/contract.md#creating-a-sandbox)"],
  [/spec\.md 6\.2,? plus api\.md's `?x-svc-delivery-id`?/g, "docs/contract.md#delivery-request"],
  [/\(spec\.md 2\.5, api\.md$/g, "(docs/contract.md#webhook-record, #errors:"],
  [/\(spec\.md 2\.2's exact names;/g, "(the exact names of docs/contract.md#sandbox-record;"],
  [/the spec\.md 2\.2 record/g, "the record of docs/contract.md#sandbox-record"],
  [/keeps spec\.md's exact field names/g, "keeps the exact field names of docs/contract.md#sandbox-record"],
  [/Bounds spec\.md leaves open,/g, "Bounds of docs/contract.md#creating-a-sandbox,"],
  [
    /Decisions beyond spec\.md \(documented in the README\):/g,
    "Decisions beyond the design (docs/contract.md#scope-tokens):"
  ],
  [
    /\(spec: "confines the key to one sandbox"\)/g,
    "(docs/contract.md#scope-tokens: \"confines the key to one sandbox\")"
  ],
  [/`apikey\.revoked` \(spec\.md\)/g, "`apikey.revoked` (docs/contract.md#key-states)"],
  [/\(5\.3 lists auth, billing/g, "(docs/contract.md#account-level-routes: auth, billing"],
  [/the scope grammar of spec\.md\b/g, "the scope grammar of docs/contract.md#scopes"],
  [/\(architecture\.md: Effect\b/g, "(docs/architecture.md#overview: Effect"]
]

// ---------------------------------------------------------------------------------------------
// The generic rule: one or more adjacent citations become one list of anchors

const NUM = String.raw`\d+(?:\.\d+)?`
const NUMLIST = String.raw`${NUM}(?:(?:, | to | and )${NUM}(?!\d|\.\d))*`
const QUOTED = String.raw`"[^"]+"(?:, "[^"]+")*`
const ITEM = new RegExp(
  [
    String.raw`(?<!docs/)spec\.md(?: section)? (?<spec>${NUMLIST})(?!\d|\.\d)`,
    String.raw`(?<!docs/)api\.md(?:'s)? (?<api>${QUOTED})`,
    String.raw`(?<!docs/)architecture\.md(?:'s)? (?<arch>${QUOTED})`,
    String.raw`(?<notes>stack-notes(?:\.md)?)`,
    String.raw`(?<!docs/)(?<bare>spec|api|architecture)\.md(?![#\w])`
  ].join("|"),
  "g"
)
const SEPARATOR = /^(?:\s*[;,]\s*|\s+(?:and|plus)\s+)$/

const quoted = (s) => [...s.matchAll(/"([^"]+)"/g)].map((m) => m[1])

const expandNumbers = (list) => {
  const out = []
  for (const part of list.split(/, | and /)) {
    const range = part.split(" to ")
    if (range.length === 1) {
      out.push(range[0])
      continue
    }
    const [from, to] = range
    const [major, a] = from.split(".").map(Number)
    const [major2, b] = to.split(".").map(Number)
    if (major !== major2 || a === undefined || b === undefined) out.push(from, to)
    else for (let i = a; i <= b; i++) out.push(`${major}.${i}`)
  }
  return out
}

const lookup = (table, key, what) => {
  const anchors = table[key.toLowerCase()]
  if (anchors === undefined) throw new Error(`no mapping for ${what} ${JSON.stringify(key)}`)
  return anchors
}

/** Anchors of one matched citation; a bare file name is the file itself. */
const anchorsOf = (groups) => {
  if (groups.spec !== undefined) return expandNumbers(groups.spec).flatMap((n) => lookup(SPEC, n, "spec.md section"))
  if (groups.api !== undefined) return quoted(groups.api).flatMap((t) => lookup(API, t, "api.md section"))
  if (groups.arch !== undefined) {
    return quoted(groups.arch).flatMap((t) => lookup(ARCHITECTURE, t, "architecture.md section"))
  }
  if (groups.notes !== undefined) return ["architecture.md#nats-facts"]
  return [groups.bare === "architecture" ? "architecture.md" : "contract.md"]
}

const fileOf = (anchor) => anchor.split("#")[0]

/** Dedupes, drops bare files when one of their anchors is cited, and folds sub-sections into parents. */
const simplify = (anchors) => {
  let list = [...new Set(anchors)]
  list = list.filter((a) => a.includes("#") || !list.some((b) => b.includes("#") && fileOf(b) === a))
  const siblings = new Map()
  for (const a of list) {
    const p = PARENT[a]
    if (p !== undefined) siblings.set(p, (siblings.get(p) ?? 0) + 1)
  }
  list = list.map((a) => (PARENT[a] !== undefined && siblings.get(PARENT[a]) >= 3 ? PARENT[a] : a))
  list = [...new Set(list)]
  return list.filter((a) => PARENT[a] === undefined || !list.includes(PARENT[a]))
}

/** `docs/contract.md#a, #b; docs/architecture.md#c` */
const render = (anchors) => {
  const byFile = new Map()
  for (const a of anchors) {
    const [file, anchor] = a.split("#")
    if (!byFile.has(file)) byFile.set(file, [])
    if (anchor !== undefined) byFile.get(file).push(anchor)
  }
  return [...byFile].map(([file, names]) =>
    names.length === 0 ? `docs/${file}` : `docs/${file}#${names[0]}` + names.slice(1).map((n) => `, #${n}`).join("")
  ).join("; ")
}

const rewriteCitations = (text) => {
  const matches = [...text.matchAll(ITEM)]
  if (matches.length === 0) return text
  const groups = []
  for (const m of matches) {
    const last = groups.at(-1)
    if (last !== undefined && SEPARATOR.test(text.slice(last.end, m.index))) {
      last.end = m.index + m[0].length
      last.anchors.push(...anchorsOf(m.groups))
    } else {
      groups.push({ start: m.index, end: m.index + m[0].length, anchors: anchorsOf(m.groups) })
    }
  }
  let out = ""
  let at = 0
  for (const g of groups) {
    out += text.slice(at, g.start) + render(simplify(g.anchors))
    at = g.end
  }
  return out + text.slice(at)
}

const rewriteLine = (line) => {
  let out = line
  for (const [pattern, replacement] of PHRASES) out = out.replace(pattern, replacement)
  return rewriteCitations(out)
}

// ---------------------------------------------------------------------------------------------
// Comment lines

/** Marks each line of a source file as a comment line or not (block comments tracked across lines). */
const commentLines = (lines) => {
  const marks = []
  let inBlock = false
  for (const line of lines) {
    const t = line.trimStart()
    if (inBlock) {
      marks.push(true)
      if (line.includes("*/")) inBlock = false
    } else if (t.startsWith("//")) {
      marks.push(true)
    } else if (t.startsWith("/*")) {
      marks.push(true)
      inBlock = !t.slice(2).includes("*/")
    } else {
      marks.push(false)
      const open = line.lastIndexOf("/*")
      if (open !== -1 && !line.slice(open).includes("*/") && !/["'`]/.test(line.slice(open))) inBlock = true
    }
  }
  return marks
}

// ---------------------------------------------------------------------------------------------
// Layout: a citation split over two lines is joined first; a line the rewrite made too long is
// wrapped at WIDTH (the comments' width), carrying its last words into the next line of its
// paragraph, or a new line

const WIDTH = 100
const COMMENT = /^(\s*)(\/\*\*|\/\*|\*|\/\/)( ?)(.*)$/
const BULLET = /^(?:[-•]|\d+\.)\s+/

const parseComment = (line) => {
  const m = COMMENT.exec(line)
  if (m === null) return undefined
  const [, indent, marker, space, content] = m
  const cont = marker === "//" ? `${indent}// ` : marker === "*" ? `${indent}* ` : `${indent} * `
  return { indent, marker, head: indent + marker + space, cont, content }
}

/** `(spec.md 2.5, 4.9;⏎ * api.md "Webhooks"). More` → the second citation joins the first line. */
const joinSplitCitations = (lines, marks) => {
  for (let i = 0; i + 1 < lines.length; i++) {
    if (!marks[i] || !marks[i + 1]) continue
    const last = [...lines[i].matchAll(ITEM)].at(-1)
    if (last === undefined || !/^[;,]$/.test(lines[i].slice(last.index + last[0].length).trimEnd())) continue
    const next = parseComment(lines[i + 1])
    if (next === undefined || next.marker === "/**" || next.marker === "/*") continue
    const body = next.content.trimStart()
    const first = new RegExp(ITEM.source, "y").exec(body)
    if (first === null) continue
    const taken = first[0] + /^[)\].,;:]*/.exec(body.slice(first[0].length))[0]
    const rest = body.slice(taken.length).trimStart()
    if (rest === "") continue
    lines[i] = `${lines[i].trimEnd()} ${taken}`
    lines[i + 1] = next.cont + next.content.slice(0, next.content.length - body.length) + rest
  }
}

const wrap = (lines, limits) => {
  for (let i = 0; i < lines.length; i++) {
    if (lines[i].length <= limits[i]) continue
    const c = parseComment(lines[i])
    if (c === undefined || c.content.trimStart().startsWith("|")) continue
    if ((c.marker === "/**" || c.marker === "/*") && c.content.endsWith("*/")) {
      // A one-line doc comment grows into a block; its text is wrapped on the next round.
      lines.splice(i, 1, c.indent + c.marker, `${c.indent} * ${c.content.slice(0, -2).trimEnd()}`, `${c.indent} */`)
      limits.splice(i, 1, Infinity, WIDTH, Infinity)
      continue
    }
    const lead = /^\s*/.exec(c.content)[0]
    const bullet = BULLET.exec(c.content.slice(lead.length))
    const textIndent = lead + (bullet ? " ".repeat(bullet[0].length) : "")
    const minCut = c.head.length + textIndent.length + (bullet ? 0 : 0) + 1
    let cut = lines[i].lastIndexOf(" ", limits[i])
    while (cut > minCut && lines[i][cut - 1] === " ") cut--
    if (cut <= minCut) continue
    const carry = lines[i].slice(cut).trim()
    lines[i] = lines[i].slice(0, cut).trimEnd()
    const n = parseComment(lines[i + 1] ?? "")
    const nextText = n?.content.slice(textIndent.length)
    const continues = n !== undefined && n.marker !== "/**" && n.marker !== "/*" && n.indent === c.indent &&
      n.head === c.cont && n.content.startsWith(textIndent) && nextText !== "" && !/^\s/.test(nextText) &&
      !BULLET.test(nextText) && !nextText.startsWith("|") && !nextText.startsWith("*/") && !nextText.startsWith("@")
    if (continues) {
      lines[i + 1] = `${c.cont}${textIndent}${carry} ${nextText}`
      limits[i + 1] = Math.max(limits[i + 1], WIDTH)
    } else {
      lines.splice(i + 1, 0, `${c.cont}${textIndent}${carry}`)
      limits.splice(i + 1, 0, WIDTH)
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Anchors that exist

const slug = (heading) => heading.trim().toLowerCase().replace(/[^\p{L}\p{N}\s-]/gu, "").replace(/\s/g, "-")

const anchorsIn = (file) => {
  const text = readFileSync(join(ROOT, "docs", file), "utf8")
  const set = new Set()
  let fence = false
  for (const line of text.split("\n")) {
    if (line.startsWith("```")) fence = !fence
    const m = !fence && /^#{1,6}\s+(.*)$/.exec(line)
    if (m) set.add(slug(m[1]))
  }
  return set
}

const DOCS = new Map()
const knownAnchor = (file, anchor) => {
  if (!DOCS.has(file)) {
    try {
      DOCS.set(file, anchorsIn(file))
    } catch {
      DOCS.set(file, null)
    }
  }
  const set = DOCS.get(file)
  return set !== null && (anchor === undefined || set.has(anchor))
}

/** Every `docs/<file>#anchor` and following `, #anchor` of a line. */
const citedAnchors = (line) => {
  const out = []
  for (const m of line.matchAll(/docs\/([\w.-]+\.md)((?:#[\w-]+)?(?:, #[\w-]+)*)/g)) {
    const names = [...m[2].matchAll(/#([\w-]+)/g)].map((n) => n[1])
    if (names.length === 0) out.push({ file: m[1], anchor: undefined })
    for (const n of names) out.push({ file: m[1], anchor: n })
  }
  return out
}

const OLD = /(?<!docs\/)(?:spec|api|architecture)\.md|stack-notes/

// ---------------------------------------------------------------------------------------------
// Files

const walk = (path, out) => {
  const st = statSync(path)
  if (st.isDirectory()) {
    for (const name of readdirSync(path)) {
      if (name === "node_modules" || name.startsWith(".")) continue
      walk(join(path, name), out)
    }
  } else if (EXTENSIONS.some((e) => path.endsWith(e))) {
    out.push(path)
  }
  return out
}

const main = () => {
  const args = process.argv.slice(2)
  const check = args.includes("--check")
  const paths = args.filter((a) => !a.startsWith("--"))
  const roots = paths.length > 0 ? paths : DEFAULT_ROOTS.map((r) => join(ROOT, r))
  const files = roots.flatMap((r) => walk(r, []))
  let changedLines = 0
  let changedFiles = 0
  const problems = []
  const notes = []
  for (const file of files) {
    const text = readFileSync(file, "utf8")
    const original = text.split("\n")
    const marks = commentLines(original)
    const lines = [...original]
    if (!check) joinSplitCitations(lines, marks)
    let changed = false
    for (let i = 0; i < lines.length; i++) {
      const where = `${relative(ROOT, file)}:${i + 1}`
      if (!marks[i]) {
        if (OLD.test(lines[i])) notes.push(`${where}: not a comment, left as it is: ${lines[i].trim()}`)
        continue
      }
      const next = check ? lines[i] : rewriteLine(lines[i])
      if (next !== original[i]) {
        changed = true
        changedLines++
      }
      lines[i] = next
      if (OLD.test(next)) problems.push(`${where}: old citation left: ${next.trim()}`)
      for (const { file: doc, anchor } of citedAnchors(next)) {
        if (!knownAnchor(doc, anchor)) {
          problems.push(`${where}: no such section: docs/${doc}${anchor ? "#" + anchor : ""}`)
        }
      }
    }
    if (changed) {
      const limits = original.map((l) => Math.max(WIDTH, l.length))
      wrap(lines, limits)
      changedFiles++
      writeFileSync(file, lines.join("\n"))
    }
  }
  if (!check) console.log(`rewrote ${changedLines} comment lines in ${changedFiles} files`)
  for (const n of notes) console.log(n)
  for (const p of problems) console.error(p)
  if (problems.length > 0) process.exit(1)
}

main()
