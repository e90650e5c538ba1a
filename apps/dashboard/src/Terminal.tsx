/**
 * A shell in the sandbox: xterm.js on the /terminal WebSocket (docs/contract.md "Terminal").
 * The session cookie and the page's Origin authenticate it (no key in the URL). Binary frames
 * carry the terminal's bytes both ways; `TerminalResize` follows the element's size;
 * `TerminalExit` ends it (the API's schemas, @svc/domain/Api/Terminal). Types only here, as in
 * wire.ts: the schemas would bring effect into this chunk; the server checks what it receives.
 * Its own chunk: loaded only when a terminal opens.
 */
import { FitAddon } from "@xterm/addon-fit"
import { Terminal as XTerm } from "@xterm/xterm"
// oxlint-disable-next-line import/no-unassigned-import -- the terminal's stylesheet, bundled into this chunk's CSS
import "@xterm/xterm/css/xterm.css"
import type { TerminalExit, TerminalResize } from "@svc/domain/Api/Terminal"
import { useEffect, useRef, useState } from "preact/hooks"

/** The exit message, or undefined for any other text (ignored, as the server ignores unknown ones). */
const exitOf = (text: string): TerminalExit | undefined => {
  try {
    const message: unknown = JSON.parse(text)
    return typeof message === "object" && message !== null && "type" in message && message.type === "exit" &&
        "code" in message && Number.isInteger(message.code)
      ? { type: "exit", code: message.code as number }
      : undefined
  } catch {
    return undefined
  }
}

const Terminal = (props: { readonly sandboxId: string; readonly onClose: () => void }) => {
  const element = useRef<HTMLDivElement>(null)
  const close = useRef<HTMLButtonElement>(null)
  const [status, setStatus] = useState("Connecting…")
  useEffect(() => {
    const term = new XTerm({ cursorBlink: true, convertEol: false, fontSize: 14, screenReaderMode: true })
    const fit = new FitAddon()
    term.loadAddon(fit)
    // The terminal takes every key, Tab included: Shift+Escape gives the focus back to the page.
    term.attachCustomKeyEventHandler((event) => {
      if (event.type === "keydown" && event.key === "Escape" && event.shiftKey) {
        close.current?.focus()
        return false
      }
      return true
    })
    term.open(element.current!)
    fit.fit()
    const url = new URL("/terminal", window.location.href)
    url.protocol = url.protocol === "https:" ? "wss:" : "ws:"
    url.searchParams.set("sandbox_id", props.sandboxId)
    url.searchParams.set("cols", String(term.cols))
    url.searchParams.set("rows", String(term.rows))
    const ws = new WebSocket(url)
    ws.binaryType = "arraybuffer"
    const encoder = new TextEncoder()
    ws.onopen = () => {
      setStatus("Connected")
      term.focus()
    }
    ws.onmessage = (message) => {
      if (typeof message.data === "string") {
        const exit = exitOf(message.data)
        if (exit !== undefined) setStatus(`The shell exited with code ${exit.code}`)
      } else term.write(new Uint8Array(message.data as ArrayBuffer))
    }
    ws.onclose = (event) =>
      setStatus((s) =>
        s.startsWith("The shell exited")
          ? s
          : event.code === 4401
          ? "Closed: the session ended"
          : `Closed${event.reason ? `: ${event.reason}` : ""}`
      )
    const input = term.onData((data) => {
      if (ws.readyState === WebSocket.OPEN) ws.send(encoder.encode(data))
    })
    const resize = term.onResize(({ cols, rows }) => {
      if (ws.readyState === WebSocket.OPEN) {
        ws.send(JSON.stringify({ type: "resize", cols, rows } satisfies TerminalResize))
      }
    })
    const observer = new ResizeObserver(() => fit.fit())
    observer.observe(element.current!)
    return () => {
      observer.disconnect()
      input.dispose()
      resize.dispose()
      ws.close()
      term.dispose()
    }
  }, [props.sandboxId])
  return (
    <div>
      <p role="status">{status}</p>
      <div class="terminal" ref={element} aria-label="Terminal" />
      <p class="muted">The terminal takes every key while focused; Shift+Escape leaves it.</p>
      <button type="button" ref={close} onClick={props.onClose}>Close the terminal</button>
    </div>
  )
}

export default Terminal
