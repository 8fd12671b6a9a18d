// A platform team's TypeScript client of the LinkService, on code generated
// from proto/ (buf + protoc-gen-es) and connect-es: creates a link, reads it
// back, prints both as JSON lines. Over gRPC, as any gRPC stack would call it.
//   LINKS_URL   the LinkService (default http://127.0.0.1:50051)
//   CLIENT_ID   the merchant (default merchant-1)
//   API_KEY     its secret key, with PAYLINK_AUTH=api-key
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { LinkService, LinkStatusSchema, LinkType } from "./gen/paylink/v1/link_service_pb.js";

/** The enum value's name as the .proto spells it (LINK_STATUS_CREATED), as other languages print it. */
const statusName = (status: number) => LinkStatusSchema.value[status]?.name;

const headers: Record<string, string> = { "client-id": process.env.CLIENT_ID ?? "merchant-1" };
if (process.env.API_KEY) headers.authorization = `Bearer ${process.env.API_KEY}`;

const client = createClient(LinkService, createGrpcTransport({ baseUrl: process.env.LINKS_URL ?? "http://127.0.0.1:50051" }));

const { link } = await client.createLink(
  {
    type: LinkType.PAYMENT,
    expiresIn: 3600,
    // Integer minor units: 2550 is 25.50 USD.
    data: { amount: { value: 2550n, currency: "USD" }, description: "Order #1001 (TypeScript client)" },
  },
  { headers },
);
console.log(JSON.stringify({ created: link!.id, status: statusName(link!.status) }));

const read = await client.getLink({ id: link!.id }, { headers });
console.log(JSON.stringify({ read: read.link!.id, status: statusName(read.link!.status), amount: String(read.link!.data!.amount!.value) }));
