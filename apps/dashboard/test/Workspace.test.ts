/**
 * The sandbox page as a workspace, in Debian's chromium against the API with a real agent: the
 * file browser (browse, a path's details, upload, download, make a folder, rename, delete after a
 * confirmation, the API's refusals in its words) in a busybox sandbox, and the notebook on a code
 * context: state kept between cells (`x = 21`, then `x * 2` shows 42), stdout, stderr and a
 * traceback, output streamed before the run ends, interrupt, a dead context restarted, and a
 * matplotlib chart shown as a decoded PNG (its screenshot: .svc/artifacts/dashboard/
 * workspace-chart.png). The chart needs matplotlib: a sandbox of the built-in template `code`,
 * whose root (debian with numpy, pandas, matplotlib and nodejs) is built into the run's image cache
 * (`@svc/testing/ImageCache`) before the agent starts, once per machine, shared with the
 * contexts tests.
 *
 * And the rendering of a run's HTML is safe: hostile markup with a `<script>` shows inside a
 * sandboxed frame of an opaque origin, where the script does not run, and never in the
 * dashboard's own document.
 */
import { expect, layer } from "@effect/vitest"
import { startAgent } from "@svc/agent/testing/Agent"
import { EventLog, Identity, makeHost, serveApi } from "@svc/api/testing/Sandboxes"
import { SecretBox } from "@svc/crypto/SecretBox"
import { CODE_RECIPE, ensureDebianArchive } from "@svc/host/Debian"
import * as Runtime from "@svc/runtime/Runtime"
import { TEST_IMAGE_CACHE_DIR } from "@svc/testing/ImageCache"
import * as TestDatabase from "@svc/testing/TestDatabase"
import * as TestNats from "@svc/testing/TestNats"
import { Context, Duration, Effect, Layer } from "effect"
import * as Fs from "node:fs"
import * as Path from "node:path"
import type { Locator, Page } from "playwright-core"
import {
  acceptNextDialog,
  ARTIFACTS,
  click,
  fill,
  heading,
  navigateTo,
  openBrowser,
  promise,
  row,
  SANDBOX_WAIT_MS,
  screenshot,
  signUp,
  unlabelled
} from "./Browser.support.ts"

class Env extends Context.Service<Env, { readonly base: string }>()("test/dashboard/Workspace/Env") {}

const EnvLayer = Layer.effect(
  Env,
  Effect.gen(function*() {
    yield* Effect.promise(() => ensureDebianArchive(TEST_IMAGE_CACHE_DIR, CODE_RECIPE))
    const base = yield* serveApi
    const host = yield* makeHost
    yield* startAgent(host, {
      region: "local",
      capacity: { cpu: 64, ramMb: 64 * 1024, diskGb: 500 },
      imageCacheDir: TEST_IMAGE_CACHE_DIR
    })
    return { base }
  })
).pipe(
  Layer.provideMerge(
    Layer.mergeAll(
      Runtime.make({ supervisor: { intervalMs: 200, transitionTimeoutMs: 540_000 } }),
      Identity.layer,
      EventLog.layer
    )
  ),
  Layer.provideMerge(Layer.mergeAll(TestDatabase.layerWithUrl, TestNats.layer, SecretBox.layer))
)

/** A call to /v1 from the page, on its session cookie: set-up the pages do not offer. */
const apiInPage = (page: Page, method: string, path: string, body?: unknown) =>
  promise(() =>
    page.evaluate(async ([method, path, body]) => {
      const response = await fetch(path as string, {
        method: method as string,
        headers: body === undefined ? {} : { "content-type": "application/json" },
        ...(body === undefined ? {} : { body: JSON.stringify(body) })
      })
      const text = await response.text()
      return { status: response.status, json: text === "" ? undefined : JSON.parse(text) }
    }, [method, path, body] as const)
  )

/** Creates a sandbox from the Sandboxes page and opens its page once it runs. */
const openNewSandbox = (page: Page, name: string, template: string) =>
  Effect.gen(function*() {
    yield* navigateTo(page, "Sandboxes")
    yield* fill(page, "Name", name)
    yield* promise(() => page.getByLabel("Template", { exact: true }).selectOption(template))
    yield* click(page, "Create sandbox")
    const sandboxRow = row(page, name)
    yield* promise(() => sandboxRow.locator(".badge", { hasText: /^running$/ }).waitFor({ timeout: SANDBOX_WAIT_MS }))
    const id = yield* promise(() => sandboxRow.getAttribute("data-sandbox-id"))
    yield* promise(() => sandboxRow.getByRole("link", { name }).click())
    yield* heading(page, `Sandbox ${name}`)
    return id!
  })

const cellCode = (page: Page, n: number) => page.getByLabel(new RegExp(`^Cell ${n}\\b`))
const cellOutput = (page: Page, n: number) => page.getByRole("region", { name: `Output of cell ${n}`, exact: true })

/** Types `code` into cell `n` and runs it with its button, waiting for the run to end. */
const runCell = (page: Page, n: number, code: string) =>
  Effect.gen(function*() {
    yield* promise(() => cellCode(page, n).fill(code))
    yield* click(page, `Run cell ${n}`)
    // The run ended: the cell's line says how long it took (or an error says why it did not run).
    yield* promise(() =>
      cellOutput(page, n).getByText(/^Ran in \d+ ms|^Ended early|\(\w+\)$/).waitFor({ timeout: SANDBOX_WAIT_MS })
    )
    return cellOutput(page, n)
  })

/** The element's image once the browser decoded it (the page's element: DOM types are not this project's). */
const decodedImage = (image: Locator) =>
  promise(() =>
    image.evaluate(async (img: any) => {
      await img.decode()
      return { src: img.src.slice(0, 22), width: img.naturalWidth, height: img.naturalHeight, alt: img.alt }
    }) as Promise<{ src: string; width: number; height: number; alt: string }>
  )

/** A value that draws itself as a PNG (120 x 80, a gradient), made with the standard library only. */
const DRAWN_PNG = `import struct, zlib
class Drawn:
    def _repr_png_(self):
        w, h = 120, 80
        rows = b"".join(b"\\x00" + b"".join(bytes((x * 2, y * 3, 160)) for x in range(w)) for y in range(h))
        def chunk(kind, data):
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        header = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
        return b"\\x89PNG\\r\\n\\x1a\\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
Drawn()`

// The first run on a machine builds the debian and code roots (a few minutes): not the default.
layer(EnvLayer, { excludeTestServices: true, timeout: 900_000 })("the sandbox as a workspace in chromium", (it) => {
  it.effect(
    "files: browse, details, upload, download, mkdir, rename, delete; the notebook: state, output, interrupt, restart, a chart",
    () =>
      Effect.gen(function*() {
        const { base } = yield* Env
        const { page, pageErrors, policyViolations } = yield* openBrowser("workspace")
        yield* signUp(page, base, {
          email: `ws-${Date.now()}@example.com`,
          password: "correct horse battery staple",
          org: "Workspace E2E"
        })

        // ---- Files, in a busybox sandbox.
        const filesId = yield* openNewSandbox(page, "ws-files", "base")
        const files = page.getByRole("region", { name: "Files" })
        yield* promise(() => files.getByRole("table", { name: "Files in /" }).getByText("tmp/").waitFor())
        yield* fill(page, "Path", "/tmp")
        yield* click(page, "Go")
        const table = page.getByRole("table", { name: "Files in /tmp" })
        yield* promise(() => table.waitFor())

        // A folder made, opened (the breadcrumb follows).
        yield* fill(page, "New folder name", "work")
        yield* click(page, "Make folder")
        yield* promise(() => page.getByRole("status").filter({ hasText: "Made the folder /tmp/work" }).waitFor())
        yield* promise(() => table.getByRole("button", { name: "Open folder /tmp/work" }).click())
        const work = page.getByRole("table", { name: "Files in /tmp/work" })
        yield* promise(() => work.getByText("This folder is empty.").waitFor())
        expect(
          yield* promise(() =>
            page.getByRole("navigation", { name: "Folder path" }).getByRole("button").allTextContents()
          )
        ).toEqual(["/", "tmp", "work"])

        // A file uploaded into it, listed with its size.
        const content = "hello, workspace\n"
        yield* promise(() =>
          page.getByLabel("Upload files into /tmp/work").setInputFiles({
            name: "hello.txt",
            mimeType: "text/plain",
            buffer: Buffer.from(content)
          })
        )
        yield* promise(() => page.getByRole("status").filter({ hasText: "Uploaded /tmp/work/hello.txt" }).waitFor())
        const helloRow = row(page, "hello.txt")
        yield* promise(() => helloRow.getByRole("cell", { name: "17 B" }).waitFor())
        yield* screenshot(page, "workspace-01-uploaded")

        // Downloaded: the same bytes.
        const [download] = yield* promise(() =>
          Promise.all([
            page.waitForEvent("download"),
            helloRow.getByRole("link", { name: "Download hello.txt" }).click()
          ])
        )
        expect(download.suggestedFilename()).toBe("hello.txt")
        expect(Fs.readFileSync((yield* promise(() => download.path()))!, "utf8")).toBe(content)

        // Renamed; its details (stat) through the path field.
        yield* promise(() => helloRow.getByRole("button", { name: "Rename hello.txt" }).click())
        yield* fill(page, "New path of hello.txt", "greeting.txt")
        yield* click(page, "Move")
        yield* promise(() =>
          page.getByRole("status").filter({ hasText: "Moved /tmp/work/hello.txt to /tmp/work/greeting.txt" }).waitFor()
        )
        yield* promise(() => row(page, "greeting.txt").waitFor())
        expect(yield* promise(() => row(page, "hello.txt").count())).toBe(0)
        yield* fill(page, "Path", "/tmp/work/greeting.txt")
        yield* click(page, "Go")
        const details = page.getByRole("region", { name: "Details of /tmp/work/greeting.txt" })
        yield* promise(() => details.getByText("17 B (17 bytes)").waitFor())
        expect(yield* promise(() => details.textContent())).toMatch(/Typefile.*Mode0644/)

        // The API's refusals, in its words: a path that is not there, a folder over a file.
        yield* fill(page, "Path", "/tmp/work/nope")
        yield* click(page, "Go")
        const alert = files.getByRole("alert")
        yield* promise(() => alert.waitFor())
        expect(yield* promise(() => alert.textContent())).toMatch(/\(not_found\)$/)
        yield* fill(page, "New folder name", "greeting.txt")
        yield* click(page, "Make folder")
        yield* promise(() => alert.filter({ hasText: "(conflict)" }).waitFor())
        yield* screenshot(page, "workspace-02-refused")

        // The folder download points at the contract's archive route.
        yield* promise(() => page.getByRole("button", { name: "Open folder /tmp", exact: true }).first().click())
        yield* promise(() => table.waitFor())
        const archive = yield* promise(() =>
          row(page, "work/").getByRole("link", { name: "Download work (tar.gz)" }).getAttribute("href")
        )
        expect(archive).toBe(`/v1/sandboxes/${filesId}/files/archive?path=%2Ftmp%2Fwork&format=tar.gz`)

        // Deleted after a confirmation (refused once: still there), with what it holds.
        page.once("dialog", (dialog) => void dialog.dismiss())
        yield* promise(() => row(page, "work/").getByRole("button", { name: "Delete work" }).click())
        expect(yield* promise(() => row(page, "work/").count())).toBe(1)
        acceptNextDialog(page)
        yield* promise(() => row(page, "work/").getByRole("button", { name: "Delete work" }).click())
        yield* promise(() => page.getByRole("status").filter({ hasText: "Deleted /tmp/work" }).waitFor())
        yield* promise(() => row(page, "work/").waitFor({ state: "detached" }))
        const gone = yield* apiInPage(page, "GET", `/v1/sandboxes/${filesId}/files/stat?path=%2Ftmp%2Fwork`)
        expect(gone.status).toBe(404)

        // The notebook in a sandbox without python3: the API's 409 naming what is missing.
        yield* runCell(page, 1, "1 + 1")
        expect(yield* promise(() => cellOutput(page, 1).getByRole("alert").textContent())).toBe(
          "This sandbox's image has no python3: a python context needs it (conflict)"
        )
        expect(yield* unlabelled(page)).toEqual([])
        yield* screenshot(page, "workspace-03-files")

        // ---- The notebook, in a debian sandbox (python3).
        const notebookId = yield* openNewSandbox(page, "ws-notebook", "debian")
        yield* promise(() =>
          page.getByRole("status").filter({ hasText: "the first run starts a python interpreter" }).waitFor()
        )

        // State between cells; Shift+Enter runs the first and opens the next.
        yield* promise(() => cellCode(page, 1).fill("x = 21"))
        yield* promise(() => cellCode(page, 1).press("Shift+Enter"))
        yield* promise(() => cellCode(page, 2).waitFor())
        yield* promise(() => page.getByRole("status").filter({ hasText: /Context ctx_\w+ \(python\): idle/ }).waitFor())
        const answer = yield* runCell(page, 2, "x * 2")
        expect(yield* promise(() => answer.getByLabel("Result 1 of cell 2 (text/plain)").textContent())).toBe("42")

        // stdout, stderr and an error with its traceback, each shown as such.
        const failing = yield* runCell(
          page,
          3,
          "import sys\nprint('to out')\nprint('to err', file=sys.stderr)\n\ndef f():\n    return 1 / 0\nf()"
        )
        expect(yield* promise(() => failing.getByLabel("stdout of cell 3").textContent())).toBe("to out\n")
        expect(yield* promise(() => failing.getByLabel("stderr of cell 3").textContent())).toBe("to err\n")
        const error = yield* promise(() => failing.getByRole("group", { name: "Error of cell 3" }).textContent())
        expect(error).toMatch(/^ZeroDivisionError: division by zero\n/)
        expect(error).toMatch(/line 6, in f/)

        // An image a value draws (`_repr_png_`, a PNG made here without any library), decoded.
        const drawn = yield* runCell(page, 4, DRAWN_PNG)
        const drawnImage = drawn.locator("img[data-kind='image/png']")
        yield* promise(() => drawnImage.waitFor())
        expect(yield* decodedImage(drawnImage)).toMatchObject({
          src: "data:image/png;base64,",
          width: 120,
          height: 80,
          alt: "Result 2 of cell 4 (image/png)"
        })
        yield* screenshot(page, "workspace-04-notebook")

        // Output as it comes: the first line shows while the run goes on; then interrupted.
        yield* promise(() =>
          cellCode(page, 5).fill("import time\nprint('started', flush=True)\ntime.sleep(120)\nprint('never')")
        )
        yield* click(page, "Run cell 5")
        yield* promise(() => cellOutput(page, 5).getByLabel("stdout of cell 5").getByText("started").waitFor())
        expect(yield* promise(() => cellOutput(page, 5).getByRole("status").textContent())).toBe("Running…")
        yield* click(page, "Interrupt cell 5")
        yield* promise(() =>
          cellOutput(page, 5).getByRole("group", { name: "Error of cell 5" }).getByText(/^KeyboardInterrupt/).waitFor()
        )
        expect(yield* promise(() => cellOutput(page, 5).textContent())).not.toContain("never")
        // x lives on after the interrupt.
        const still = yield* runCell(page, 6, "x")
        expect(yield* promise(() => still.getByLabel("Result 1 of cell 6 (text/plain)").textContent())).toBe("21")

        // The interpreter ends: the context is dead; a restart is a new, empty one.
        const before = yield* promise(() =>
          page.getByRole("status").filter({ hasText: /Context ctx_\w+/ }).textContent()
        )
        yield* runCell(page, 7, "import os\nos._exit(1)")
        const dead = page.getByRole("region", { name: "Notebook" }).getByRole("alert").filter({ hasText: "is dead" })
        yield* promise(() => dead.waitFor())
        expect(yield* promise(() => page.getByRole("button", { name: "Run cell 8" }).isDisabled())).toBe(true)
        yield* screenshot(page, "workspace-05-dead")
        yield* click(page, "Restart the context")
        yield* promise(() => page.getByRole("status").filter({ hasText: /Context ctx_\w+ \(python\): idle/ }).waitFor())
        expect(yield* promise(() => page.getByRole("status").filter({ hasText: /Context ctx_\w+/ }).textContent())).not
          .toBe(before)
        const fresh = yield* runCell(page, 8, "x")
        expect(yield* promise(() => fresh.getByRole("group", { name: "Error of cell 8" }).textContent())).toMatch(
          /^NameError: name 'x' is not defined/
        )
        expect(yield* unlabelled(page)).toEqual([])

        // ---- A matplotlib chart, in a sandbox of the built-in template `code`.
        const plotsId = yield* openNewSandbox(page, "ws-plots", "code")
        // A chart: matplotlib's figure as a PNG image, decoded by the browser.
        const chart = yield* runCell(
          page,
          1,
          "import matplotlib.pyplot as plt\nplt.plot([1, 4, 2, 8], marker='o')\nplt.title('workspace e2e')"
        )
        const image = chart.locator("img[data-kind='image/png']")
        yield* promise(() => image.waitFor())
        const decoded = yield* decodedImage(image)
        expect(decoded.src).toBe("data:image/png;base64,")
        expect(decoded.width).toBeGreaterThan(100)
        expect(decoded.height).toBeGreaterThan(100)
        expect(decoded.alt).toMatch(/^Result \d+ of cell 1 \(image\/png\)$/)
        const chartFile = Path.join(ARTIFACTS, "workspace-chart.png")
        yield* promise(() => image.screenshot({ path: chartFile }))
        expect(Fs.readFileSync(chartFile).subarray(0, 8)).toEqual(Buffer.from([137, 80, 78, 71, 13, 10, 26, 10]))
        yield* screenshot(page, "workspace-06-chart")

        for (const id of [filesId, notebookId, plotsId]) {
          expect((yield* apiInPage(page, "DELETE", `/v1/sandboxes/${id}`)).status).toBe(202)
        }
        expect(pageErrors).toEqual([])
        expect(policyViolations).toEqual([])
      }).pipe(Effect.scoped),
    Duration.toMillis(Duration.minutes(25))
  )

  it.effect(
    "a run's HTML shows in a sandboxed frame: its script does not run, the dashboard's page is untouched",
    () =>
      Effect.gen(function*() {
        const { base } = yield* Env
        const { page, pageErrors, policyViolations } = yield* openBrowser("workspace-html")
        yield* signUp(page, base, {
          email: `ws-html-${Date.now()}@example.com`,
          password: "correct horse battery staple",
          org: "Workspace HTML"
        })
        const id = yield* openNewSandbox(page, "ws-html", "debian")
        // Hostile markup: a script that would mark its own document, reach for the dashboard's page
        // and call the API on the session's cookie.
        const hostile = "<p id='inside'>hello-html</p><script>" +
          "document.getElementById('inside').textContent = 'script-ran';" +
          "try { window.top.__pwned = 1; window.top.document.title = 'pwned' } catch (e) {}" +
          "fetch('/v1/sandboxes', {method: 'POST', credentials: 'include', headers: {'content-type': 'application/json'}," +
          " body: '{\"name\": \"from-the-frame\"}'})" +
          "</script>"
        const output = yield* runCell(
          page,
          1,
          `class Hostile:\n    def _repr_html_(self):\n        return ${JSON.stringify(hostile)}\nHostile()`
        )
        const frameElement = output.locator("iframe[data-kind='text/html']")
        yield* promise(() => frameElement.waitFor())
        expect(yield* promise(() => frameElement.getAttribute("sandbox"))).toBe("")
        const frame = (yield* promise(() => frameElement.elementHandle()))!
        const content = (yield* promise(() => frame.contentFrame()))!
        yield* promise(() => content.getByText("hello-html").waitFor())
        expect(yield* promise(() => content.locator("#inside").textContent())).toBe("hello-html")
        // An opaque origin: nothing of the dashboard's.
        expect(yield* promise(() => content.evaluate("window.origin"))).toBe("null")
        // A text value that looks like markup is text.
        const text = yield* runCell(page, 2, `"<img src=x onerror='window.top.__pwned = 2'>"`)
        expect(yield* promise(() => text.getByLabel("Result 1 of cell 2 (text/plain)").textContent())).toBe(
          `"<img src=x onerror='window.top.__pwned = 2'>"`
        )
        yield* Effect.sleep(Duration.millis(500))
        expect(yield* promise(() => page.evaluate("window.__pwned"))).toBeUndefined()
        expect(yield* promise(() => page.title())).not.toContain("pwned")
        expect(yield* promise(() => page.locator("#inside, main img[src='x']").count())).toBe(0)
        const sandboxes = yield* apiInPage(page, "GET", "/v1/sandboxes")
        expect(sandboxes.json.rows.map((s: { name: string }) => s.name)).toEqual(["ws-html"])
        yield* screenshot(page, "workspace-07-html")
        expect((yield* apiInPage(page, "DELETE", `/v1/sandboxes/${id}`)).status).toBe(202)
        expect(pageErrors).toEqual([])
        expect(policyViolations).toEqual([])
      }).pipe(Effect.scoped),
    Duration.toMillis(Duration.minutes(12))
  )
})
