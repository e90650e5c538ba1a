/**
 * Routing in the browser on the History API: `/sandboxes/sbx_...` is a real URL (the API
 * answers every dashboard path with index.html), links are real links (open in a new tab
 * works), and a plain click navigates without a load.
 */
import type { AnchorHTMLAttributes, ComponentChildren } from "preact"
import { useEffect, useState } from "preact/hooks"

const listeners = new Set<(path: string) => void>()

const current = () => window.location.pathname

let navigated = false

/** Whether the app has moved from the page it was loaded at. */
export const hasNavigated = () => navigated

export const navigate = (to: string, options: { readonly replace?: boolean } = {}) => {
  if (to === current()) return
  navigated = true
  if (options.replace === true) window.history.replaceState(null, "", to)
  else window.history.pushState(null, "", to)
  for (const listener of listeners) listener(current())
}

window.addEventListener("popstate", () => {
  navigated = true
  for (const listener of listeners) listener(current())
})

/** The current path; re-renders on every navigation. */
export const usePath = (): string => {
  const [path, setPath] = useState(current)
  useEffect(() => {
    listeners.add(setPath)
    return () => void listeners.delete(setPath)
  }, [])
  return path
}

/** `match("/sandboxes/:id", "/sandboxes/sbx_1")` → `{id: "sbx_1"}`, or undefined. */
export const match = (pattern: string, path: string): Record<string, string> | undefined => {
  const want = pattern.split("/").filter(Boolean)
  const got = path.split("/").filter(Boolean)
  if (want.length !== got.length) return undefined
  const params: Record<string, string> = {}
  for (let i = 0; i < want.length; i++) {
    if (want[i]!.startsWith(":")) params[want[i]!.slice(1)] = decodeURIComponent(got[i]!)
    else if (want[i] !== got[i]) return undefined
  }
  return params
}

export const Link = (
  props: { readonly href: string; readonly children: ComponentChildren } & AnchorHTMLAttributes<HTMLAnchorElement>
) => {
  const { href, children, ...rest } = props
  const onClick = (event: MouseEvent) => {
    if (event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return
    event.preventDefault()
    navigate(href)
  }
  return <a href={href} onClick={onClick} {...rest}>{children}</a>
}
