// The signature layout checked by an independent Standard Webhooks verifier,
// including a key that is not ASCII (the key is its UTF-8 bytes).
import { Webhook } from "standardwebhooks";
import { expect, it } from "vitest";
import { sign } from "../services/notifier/signature.js";

const body = JSON.stringify({ link_id: "lnk-1", payment_id: "pay-1", transaction_id: "txn-1" });

it.each(["sk_test_secret", "clé-секрет-鍵"])("verifies with base64(api_key) as the secret: %s", (apiKey) => {
  const id = "0b7c4a8e-5a36-4e0e-9f3f-3f6f8b8f1c11";
  const timestamp = Math.floor(Date.now() / 1000);
  const headers = {
    "webhook-id": id,
    "webhook-timestamp": String(timestamp),
    "webhook-signature": sign(apiKey, id, timestamp, body),
  };
  const verifier = new Webhook(Buffer.from(apiKey, "utf8").toString("base64"));
  expect(verifier.verify(body, headers)).toStrictEqual(JSON.parse(body));
  expect(() => new Webhook(Buffer.from("other", "utf8").toString("base64")).verify(body, headers)).toThrow();
  expect(() => verifier.verify(body, { ...headers, "webhook-id": "another-id" })).toThrow();
});
