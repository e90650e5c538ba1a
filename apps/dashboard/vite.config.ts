/**
 * The dashboard's build (scripts/build.ts runs it): `index.html` and `src/` into `dist/`, the
 * files the API serves at `/`. Hashed names under `dist/assets/` (the API caches those for a
 * year); the terminal (xterm.js) is a chunk of its own, loaded when a terminal opens.
 */
import { defineConfig } from "vite"

export default defineConfig({
  base: "/",
  oxc: { jsx: { runtime: "automatic", importSource: "preact" } },
  build: {
    outDir: "dist",
    emptyOutDir: true,
    target: "es2022",
    sourcemap: false,
    reportCompressedSize: false,
    modulePreload: { polyfill: false }
  },
  server: {
    // `vite` (npm run dev in this folder) against the API of `npm start`. The Host header is
    // kept, so the API's CSRF check (Origin against Host) sees one origin, the dev server's.
    proxy: {
      "/v1": { target: "http://127.0.0.1:8080" },
      "/terminal": { target: "ws://127.0.0.1:8080", ws: true }
    }
  }
})
