/**
 * A shell in the sandbox: xterm.js on the /terminal WebSocket (docs/contract.md "Terminal").
 * The session cookie and the page's Origin authenticate it (no key in the URL). Binary frames
 * carry the terminal's bytes both ways; `{type: "resize"}` follows the element's size;
 * `{type: "exit", code}` ends it. Its own chunk: loaded only when a terminal opens.
 */
import { FitAddon } from "@xterm/addon-fit"
import { Terminal as XTerm } from "@xterm/xterm"
// oxlint-disable-next-line import/no-unassigned-import -- the terminal's stylesheet, bundled into this chunk's CSS
import "@xterm/xterm/css/xterm.css"
import { useEffect, useRef, useState } from "preact/hooks"

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
        const control = JSON.parse(message.data) as { type?: string; code?: number }
        if (control.type === "exit") setStatus(`The shell exited with code ${control.code}`)
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
      if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "resize", cols, rows }))
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
