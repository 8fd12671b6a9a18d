// The LinkService holds a bounded number of calls open at once, over every
// session: calls whose callers never send their message (and set no
// deadline) had piled up over a few connections until the heap ran out.
// Past the bound a new call gets UNAVAILABLE at once; once calls end, it
// takes calls again.
import http2 from "node:http2";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, expect, it } from "vitest";
import { LinkService } from "../proto/gen/paylink/v1/link_service_pb.js";
import { waitFor } from "./support/nats.js";
import { api, type Stack, startStack, validLink } from "./support/stack.js";

let stack: Stack;
beforeAll(async () => {
  stack = await startStack();
});
afterAll(() => stack?.close());

it("answers UNAVAILABLE past its bound of open calls, counted over every session, and takes calls again once they end", async () => {
  const id = (await api(stack, "POST", "/v1/links", { clientId: "client-a", body: validLink() })).body.id;
  const links = await stack.startLinksCopy({ maxOpenCalls: 20, sessionCloseGraceMs: 300 });
  const url = `http://127.0.0.1:${links.port}`;
  // Two sessions of 10 calls that never send their message.
  const holders = [http2.connect(url), http2.connect(url)];
  const headers = await stack.merchantHeaders("client-a");
  const client = createClient(LinkService, createGrpcTransport({ baseUrl: url }));
  let outcome: unknown;
  const got = async (refused: boolean) => {
    outcome = await client.getLink({ id }, { headers, timeoutMs: 2_000 }).catch((e: unknown) => ConnectError.from(e));
    return outcome instanceof ConnectError === refused;
  };
  try {
    const held = holders.flatMap((session) => {
      session.on("error", () => {});
      return Array.from({ length: 10 }, () => {
        const stream = session.request(
          { ":method": "POST", ":path": "/paylink.v1.LinkService/GetLink", "content-type": "application/grpc", te: "trailers", ...headers },
          { endStream: false },
        );
        stream.on("error", () => {});
        return stream;
      });
    });
    await waitFor(() => got(true), 3_000, () => "every call was still answered");
    expect((outcome as ConnectError).code).toBe(Code.Unavailable);
    for (const stream of held) stream.close(http2.constants.NGHTTP2_CANCEL);
    await waitFor(() => got(false), 3_000, () => `still refused: ${(outcome as ConnectError).message}`);
    expect((outcome as { link?: { id: string } }).link!.id).toBe(id);
  } finally {
    for (const session of holders) session.destroy();
    await links.close();
  }
});
