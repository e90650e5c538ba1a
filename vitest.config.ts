import { defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    include: ["packages/*/test/**/*.test.ts", "apps/*/test/**/*.test.ts", "test/**/*.test.ts"],
    // Real NATS, Postgres and sandboxes: generous limits, files in parallel on 2 cores.
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: "forks",
    maxWorkers: 2,
    globalSetup: ["packages/testing/src/GlobalSetup.ts"],
    reporters: ["default"]
  }
})
