// npm run test:faults [-- --short] [-- --only=<part of a name>]
// Runs every fault experiment against real processes (dist/), a private
// PostgreSQL and private NATS servers, prints the table, and exits 1 when
// anything was lost or doubled or a bound was missed.
import { buildWhenStale } from "../support/processes.js";
import { EXPERIMENTS, row } from "./experiments.js";
import type { Row } from "./harness.js";

const args = process.argv.slice(2);
const short = args.includes("--short");
const only = args.find((a) => a.startsWith("--only="))?.slice("--only=".length);

buildWhenStale();
const rows: Row[] = [];
const started = Date.now();
for (const experiment of EXPERIMENTS) {
  if (only && !experiment.name.includes(only)) continue;
  process.stderr.write(`\n==> ${experiment.name}${short ? " (short)" : ""}\n`);
  const at = Date.now();
  let result: Row;
  try {
    result = await experiment.run(short);
  } catch (err) {
    result = row(experiment.name, { failures: [`the experiment failed to run: ${err instanceof Error ? err.stack : String(err)}`] });
  }
  rows.push(result);
  process.stderr.write(`    ${result.failures.length ? "FAILED: " + result.failures.join("; ") : "ok"} (${Math.round((Date.now() - at) / 1000)} s)\n`);
}

const ms = (v: number | undefined) => (v === undefined ? "-" : `${(v / 1000).toFixed(2)} s`);
console.log(`\n| experiment | acknowledged | found | lost | duplicates | client-visible errors | recovery | result |`);
console.log(`|---|---|---|---|---|---|---|---|`);
for (const r of rows) {
  console.log(
    `| ${r.experiment} | ${r.acknowledged} | ${r.found} | ${r.lost} | ${r.duplicates} | ${r.clientErrors} | ${ms(r.recoveryMs)} | ${r.failures.length ? "FAIL" : "ok"} |`,
  );
}
console.log(`\n${rows.length} experiments in ${Math.round((Date.now() - started) / 1000)} s${short ? " (short form)" : ""}`);
const failed = rows.filter((r) => r.failures.length);
for (const r of failed) console.log(`FAIL ${r.experiment}: ${r.failures.join("; ")}`);
process.exit(failed.length ? 1 : 0);
