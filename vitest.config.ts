import { defineConfig } from "vitest/config"
import Sequencer from "./packages/testing/src/Sequencer.ts"

export default defineConfig({
  test: {
    include: ["packages/*/test/**/*.test.ts", "apps/*/test/**/*.test.ts", "test/**/*.test.ts"],
    // Real NATS, Postgres and sandboxes, CLI processes started one after another: generous
    // limits (a limit only bounds a hang; nothing here asserts speed), files in parallel on 2 cores.
    testTimeout: 180_000,
    hookTimeout: 120_000,
    pool: "forks",
    maxWorkers: 2,
    globalSetup: ["packages/testing/src/GlobalSetup.ts"],
    // Files that need a built image root last, the roots built meanwhile (Sequencer.ts).
    sequence: { sequencer: Sequencer },
    reporters: ["default"]
  }
})
