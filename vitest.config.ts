import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    globalSetup: ["test/support/global-setup.ts"],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // Test files share one machine's Postgres and NATS; two at a time keeps
    // the 2-core CI machine responsive.
    maxWorkers: 2,
  },
});
