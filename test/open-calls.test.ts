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
import { api, type Stack, startStack, validLink } from "./support/stack.js";

let stack: Stack;
beforeAll(async () => {
  stack = await startStack();
});
afterAll(() => stack?.close());

/** Tries `call` every 50 ms until `settled` says its outcome is the one awaited, for up to 3 s. */
async function until<T>(call: () => Promise<T>, settled: (outcome: T | ConnectError) => boolean): Promise<T | ConnectError> {
  const end = Date.now() + 3_000;
  for (;;) {
    const outcome = await call().catch((e: unknown) => ConnectError.from(e));
    if (settled(outcome) || Date.now() > end) return outcome;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

it("answers UNAVAILABLE past its bound of open calls, counted over every session, and takes calls again once they end", async () => {
  const id = (await api(stack, "POST", "/v1/links", { clientId: "client-a", body: validLink() })).body.id;
  const links = await stack.startLinksCopy({ maxOpenCalls: 20, sessionCloseGraceMs: 300 });
  const url = `http://127.0.0.1:${links.port}`;
  // Two sessions of 10 calls that never send their message.
  const holders = [http2.connect(url), http2.connect(url)];
  const headers = await stack.merchantHeaders("client-a");
  const client = createClient(LinkService, createGrpcTransport({ baseUrl: url }));
  const get = () => client.getLink({ id }, { headers, timeoutMs: 2_000 });
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
    const refused = await until(get, (o) => o instanceof ConnectError);
    expect(refused instanceof ConnectError && refused.code).toBe(Code.Unavailable);
    for (const stream of held) stream.close(http2.constants.NGHTTP2_CANCEL);
    const answered = await until(get, (o) => !(o instanceof ConnectError));
    expect(answered instanceof ConnectError ? answered.message : answered.link!.id).toBe(id);
  } finally {
    for (const session of holders) session.destroy();
    await links.close();
  }
});
