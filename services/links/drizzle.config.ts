import { defineConfig } from "drizzle-kit";

export default defineConfig({
  dialect: "postgresql",
  schema: "./services/links/schema.ts",
  out: "./services/links/migrations",
});
