// The Standard Webhooks signature: HMAC-SHA256 over "{id}.{timestamp}.{body}".
// The key is the UTF-8 bytes of the link's api_key as the merchant wrote it,
// so a Standard Webhooks verifier takes base64(api_key) as its secret.
import { createHmac } from "node:crypto";

export function sign(apiKey: string, webhookId: string, timestampSec: number, body: string): string {
  const mac = createHmac("sha256", Buffer.from(apiKey, "utf8"))
    .update(`${webhookId}.${timestampSec}.${body}`)
    .digest("base64");
  return `v1,${mac}`;
}
