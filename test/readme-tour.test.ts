// The README's five-minute tour, run as a newcomer would run it: its shell
// block, word for word but for the two addresses, against a gateway, a
// LinkService with its relay and a notifier on this file's own NATS and
// database. A README that drifts from what the service answers fails here.
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { afterAll, expect, it } from "vitest";
import { freePort } from "./support/nats.js";
import { startDeliveryStack, usePrivateNatsAndDatabase } from "./support/webhooks.js";

const README = readFileSync(new URL("../README.md", import.meta.url), "utf8");
const env = usePrivateNatsAndDatabase();
const cleanups: (() => Promise<void>)[] = [];
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
});

/** The first shell block after the tour's heading. */
function tourScript(): string {
  const tour = README.slice(README.indexOf("### A five-minute tour"));
  const block = /```sh\n([\s\S]*?)\n```/.exec(tour);
  if (!block) throw new Error("the README has no shell block under '### A five-minute tour'");
  return block[1]!;
}

/** Runs the script in its own process group, so the receiver it leaves in the background goes with it. */
function runScript(script: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn("bash", ["-c", `${script}\nsleep 0.5`], { detached: true, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk: Buffer) => (stdout += chunk));
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk));
    const killGroup = () => {
      try {
        process.kill(-child.pid!, "SIGTERM");
      } catch {
        // the group is gone already
      }
    };
    // The block waits for the delivery: a webhook that never comes must not leave it looping after the test.
    const limit = setTimeout(killGroup, 40_000);
    child.on("error", reject);
    child.on("exit", (code) => {
      clearTimeout(limit);
      killGroup();
      // The receiver's last words (its pipe) may come after bash's exit.
      setTimeout(() => resolve({ code, stdout, stderr }), 200);
    });
  });
}

it("creates a link, pays it, delivers its webhook and shows the payment and the delivery, as the README says", async () => {
  const { webhooks, notifier } = await startDeliveryStack(env, cleanups, { retrySchedule: [1_000] });
  await notifier();
  const receiverPort = await freePort();
  const script = tourScript()
    .replaceAll("http://localhost:8080", webhooks.stack.gatewayUrl)
    .replaceAll("9000", String(receiverPort));
  expect(script).not.toContain("localhost:8080");

  const { code, stdout, stderr } = await runScript(script);
  expect(code, stderr).toBe(0);
  const lines = stdout.trim().split("\n");
  const webhookLine = lines.find((line) => line.startsWith("webhook: "));
  const answers = lines.filter((line) => !line.startsWith("webhook: ")).map((line) => JSON.parse(line));
  expect(answers, stdout).toHaveLength(4);
  const [paid, payment, events, link] = answers;

  expect(paid).toMatchObject({ status: "succeeded", link_id: expect.stringMatching(/^lnk-/) });
  expect(webhookLine, stdout).toBeDefined();
  const [, webhookId, body] = /^webhook: (\S+) (.*)$/.exec(webhookLine!)!;
  expect(JSON.parse(body!)).toEqual({ link_id: paid.link_id, payment_id: paid.payment_id, transaction_id: paid.transaction_id });
  expect(payment).toMatchObject({
    id: paid.payment_id,
    link_id: paid.link_id,
    status: "succeeded",
    payment_method: "card",
    card: { brand: "visa", last4: "4242" },
    amount: { value: 42.5, currency: "USD" },
  });
  expect(events.data).toHaveLength(1);
  expect(events.data[0]).toMatchObject({ id: webhookId, type: "payment.completed", status: "delivered" });
  expect(events.data[0].attempts).toMatchObject([{ number: 1, status_code: 200 }]);
  expect(link).toEqual({ error: "Link has already been used" });
}, 60_000);
