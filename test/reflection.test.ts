// gRPC server reflection (v1 and v1alpha) and grpc.health.v1 on the
// LinkService port: `buf curl` calls CreateLink knowing nothing but the URL.
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { create, fromBinary } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import { Code, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Health, HealthCheckResponse_ServingStatus } from "../proto/gen/grpc/health/v1/health_pb.js";
import {
  ServerReflection,
  type ServerReflectionRequest,
  ServerReflectionRequestSchema,
} from "../proto/gen/grpc/reflection/v1/reflection_pb.js";
import { type Stack, startStack } from "./support/stack.js";

const BUF = fileURLToPath(new URL("../node_modules/.bin/buf", import.meta.url));
const run = promisify(execFile);

let stack: Stack;
beforeAll(async () => {
  stack = await startStack();
});
afterAll(() => stack?.close());

/** buf curl over gRPC with reflection alone: no --schema, no proto files. */
async function bufCurl(path: string, body: unknown, headers: Record<string, string>, reflectProtocol: "grpc-v1" | "grpc-v1alpha") {
  const args = ["curl", "--protocol", "grpc", "--http2-prior-knowledge", "--reflect-protocol", reflectProtocol, "-d", JSON.stringify(body)];
  for (const [name, value] of Object.entries(headers)) args.push("-H", `${name}: ${value}`);
  // An empty working directory: nothing there buf could mistake for a schema.
  const { stdout } = await run(BUF, [...args, `${stack.linksUrl}${path}`], { cwd: "/tmp", timeout: 30_000 });
  return JSON.parse(stdout);
}

describe("gRPC server reflection", () => {
  it.each(["grpc-v1", "grpc-v1alpha"] as const)("lets buf curl create a link with %s reflection alone", async (protocol) => {
    const link = await bufCurl(
      "/paylink.v1.LinkService/CreateLink",
      { type: "LINK_TYPE_PAYMENT", data: { amount: { value: "1050", currency: "USD" }, description: "Reflected" } },
      await stack.merchantHeaders("client-reflect"),
      protocol,
    );
    expect(link.link).toMatchObject({ clientId: "client-reflect", status: "LINK_STATUS_CREATED", data: { description: "Reflected" } });
    expect(link.link.id).toMatch(/^lnk-/);
  });

  it("lists the services and answers grpc.health.v1 through it", async () => {
    const { stdout } = await run(BUF, ["curl", "--http2-prior-knowledge", "--list-services", stack.linksUrl], { cwd: "/tmp", timeout: 30_000 });
    expect(stdout.split("\n").filter(Boolean).sort()).toEqual(
      [
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
        "grpc.reflection.v1alpha.ServerReflection",
        "paylink.admin.v1.AdminService",
        "paylink.internal.v1.DeliveryService",
        "paylink.internal.v1.LinkBatchService",
        "paylink.v1.LinkService",
      ].sort(),
    );
    const health = await bufCurl("/grpc.health.v1.Health/Check", {}, {}, "grpc-v1");
    expect(health).toEqual({ status: "SERVING" });
  });

  it("lists each service once, the reflection services included (buf curl removes repeats; other clients do not)", async () => {
    const client = createClient(ServerReflection, createGrpcTransport({ baseUrl: stack.linksUrl }));
    async function* one() {
      yield create(ServerReflectionRequestSchema, { messageRequest: { case: "listServices", value: "" } });
    }
    for await (const answer of client.serverReflectionInfo(one())) {
      expect(answer.messageResponse.case).toBe("listServicesResponse");
      const names = answer.messageResponse.case === "listServicesResponse" ? answer.messageResponse.value.service.map((s) => s.name) : [];
      expect(names).toContain("grpc.reflection.v1.ServerReflection");
      expect(names).toEqual([...new Set(names)]);
      return;
    }
    throw new Error("no answer");
  });

  it("finds a file by the name its importers use, and the error details every error carries", async () => {
    const client = createClient(ServerReflection, createGrpcTransport({ baseUrl: stack.linksUrl }));
    async function ask(messageRequest: ServerReflectionRequest["messageRequest"]) {
      async function* one() {
        yield create(ServerReflectionRequestSchema, { messageRequest });
      }
      for await (const answer of client.serverReflectionInfo(one())) return answer.messageResponse;
      throw new Error("no answer");
    }
    const names = (answer: Awaited<ReturnType<typeof ask>>) =>
      answer.case === "fileDescriptorResponse"
        ? answer.value.fileDescriptorProto.map((bytes) => fromBinary(FileDescriptorProtoSchema, bytes).name)
        : answer;

    const linkService = names(await ask({ case: "fileByFilename", value: "paylink/v1/link_service.proto" }));
    expect(linkService).toEqual(expect.arrayContaining(["paylink/v1/link_service.proto", "google/rpc/status.proto"]));
    // Each import a descriptor names is there to be asked for by that name.
    expect(names(await ask({ case: "fileByFilename", value: "google/rpc/status.proto" }))).toEqual(
      expect.arrayContaining(["google/rpc/status.proto"]),
    );
    for (const detail of ["google.rpc.ErrorInfo", "google.rpc.RetryInfo"]) {
      expect(names(await ask({ case: "fileContainingSymbol", value: detail }))).toEqual(
        expect.arrayContaining(["google/rpc/error_details.proto", "google/protobuf/duration.proto"]),
      );
    }
    expect(await ask({ case: "fileByFilename", value: "paylink/v1/link_service" })).toMatchObject({
      case: "errorResponse",
      value: { errorCode: Code.NotFound },
    });
  });

  it("answers for every service it serves, reflection included, and NOT_FOUND for one it does not, as the health protocol says", async () => {
    const health = createClient(Health, createGrpcTransport({ baseUrl: stack.linksUrl }));
    for (const service of ["paylink.v1.LinkService", "grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"]) {
      expect(await health.check({ service })).toMatchObject({ status: HealthCheckResponse_ServingStatus.SERVING });
    }
    await expect(health.check({ service: "nope" })).rejects.toMatchObject({ code: Code.NotFound, rawMessage: "unknown service nope" });
    // Its name comes back cut short: a trailer past 64 KiB is never sent, and the stream was reset instead.
    await expect(health.check({ service: "s".repeat(70_000) })).rejects.toMatchObject({
      code: Code.NotFound,
      rawMessage: `unknown service ${"s".repeat(100)}...`,
    });
  });
});
