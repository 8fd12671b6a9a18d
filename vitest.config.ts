import { defineConfig } from "vitest/config";
import { isDriverNullSocketWrite } from "./services/links/driver-guard.js";

// The REST contract runs twice: in the spec's client-id mode, with every
// other suite, and again with PAYLINK_AUTH=api-key, where the stack gives
// each client a secret key and sends it (test/support/stack.ts).
const REST_CONTRACT = [
  "test/create-link.test.ts",
  "test/get-link.test.ts",
  "test/merchant-ops.test.ts",
  "test/http-edges.test.ts",
  "test/checkout.test.ts",
  "test/payments.test.ts",
  "test/hardening.test.ts",
  "test/malformed-input.test.ts",
  "test/rate-limits.test.ts",
];

export default defineConfig({
  test: {
    globalSetup: ["test/support/global-setup.ts"],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // Test files share one machine's Postgres and NATS; two at a time keeps
    // the 2-core CI machine responsive.
    maxWorkers: 2,
    // The postgres.js bug the LinkService survives (driver-guard.ts) reaches
    // the suite's own pools and probes too, when a test stops PostgreSQL
    // under them: thrown from a timer, after their queries already failed.
    onUnhandledError: (error) => !isDriverNullSocketWrite(error),
    projects: [
      { extends: true, test: { name: "client-id", include: ["test/**/*.test.ts"] } },
      { extends: true, test: { name: "api-key", include: REST_CONTRACT, env: { PAYLINK_AUTH: "api-key" } } },
    ],
  },
});
