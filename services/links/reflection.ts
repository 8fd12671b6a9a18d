// gRPC server reflection, v1 and v1alpha (the same messages in two
// packages), answered from the descriptors protoc-gen-es generated: buf
// curl, grpcurl and Postman can call the services with no proto files.
// Each request on the stream gets one answer; an unknown name is an
// error_response (NOT_FOUND), as the protocol says, not a failed stream.
import { createRegistry, type DescFile, type DescService, toBinary } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import { Code, type ServiceImpl } from "@connectrpc/connect";
import * as v1 from "../../proto/gen/grpc/reflection/v1/reflection_pb.js";
import * as v1alpha from "../../proto/gen/grpc/reflection/v1alpha/reflection_pb.js";

/** The services a reflection client is told of, the reflection services themselves included. */
export const reflectionServices = [v1.ServerReflection, v1alpha.ServerReflection] as const;

type Request = v1.ServerReflectionRequest;
type Answer = v1.ServerReflectionResponse["messageResponse"];

export function createReflection(served: DescService[], moreFiles: DescFile[] = []) {
  // Once each, whether or not `served` names the reflection services too.
  const services = [...new Map([...served, ...reflectionServices].map((s) => [s.typeName, s])).values()];
  // By the name a client asks for and a descriptor imports ("paylink/v1/link_service.proto");
  // protobuf-es's DescFile.name leaves off the ".proto".
  const files = new Map<string, DescFile>();
  const collect = (file: DescFile) => {
    if (files.has(file.proto.name)) return;
    files.set(file.proto.name, file);
    file.dependencies.forEach(collect);
  };
  services.forEach((s) => collect(s.file));
  moreFiles.forEach(collect);
  const registry = createRegistry(...files.values());
  const encoded = new Map([...files.entries()].map(([name, f]) => [name, toBinary(FileDescriptorProtoSchema, f.proto)]));

  /** The file and everything it imports, the file first (clients resolve imports from the rest). */
  function withDependencies(file: DescFile): Uint8Array[] {
    const names = new Set<string>();
    const walk = (f: DescFile) => {
      if (names.has(f.proto.name)) return;
      names.add(f.proto.name);
      f.dependencies.forEach(walk);
    };
    walk(file);
    return [...names].map((name) => encoded.get(name)!);
  }

  function fileOfSymbol(symbol: string): DescFile | undefined {
    const desc = registry.get(symbol);
    if (desc) return desc.file;
    // A method: Package.Service.Method.
    const service = registry.getService(symbol.slice(0, symbol.lastIndexOf(".")));
    return service?.methods.some((m) => `${service.typeName}.${m.name}` === symbol) ? service.file : undefined;
  }

  const notFound = (message: string): Answer => ({
    case: "errorResponse",
    value: { errorCode: Code.NotFound, errorMessage: message } as never,
  });
  const filesAnswer = (file: DescFile | undefined, what: string): Answer =>
    file
      ? { case: "fileDescriptorResponse", value: { fileDescriptorProto: withDependencies(file) } as never }
      : notFound(`${what} not found`);

  function answer(req: Request): Answer {
    const m = req.messageRequest;
    switch (m.case) {
      case "listServices":
        return { case: "listServicesResponse", value: { service: services.map((s) => ({ name: s.typeName })) } as never };
      case "fileByFilename":
        return filesAnswer(files.get(m.value), `file ${m.value}`);
      case "fileContainingSymbol":
        return filesAnswer(fileOfSymbol(m.value), `symbol ${m.value}`);
      case "fileContainingExtension": {
        const extendee = registry.getMessage(m.value.containingType);
        const ext = extendee && registry.getExtensionFor(extendee, m.value.extensionNumber);
        return filesAnswer(ext?.file, `extension ${m.value.extensionNumber} of ${m.value.containingType}`);
      }
      case "allExtensionNumbersOfType": {
        const message = registry.getMessage(m.value);
        if (!message) return notFound(`type ${m.value} not found`);
        const numbers = [...files.values()].flatMap((f) => f.extensions.filter((e) => e.extendee.typeName === m.value).map((e) => e.number));
        return { case: "allExtensionNumbersResponse", value: { baseTypeName: m.value, extensionNumber: numbers } as never };
      }
      default:
        return { case: "errorResponse", value: { errorCode: Code.InvalidArgument, errorMessage: "empty request" } as never };
    }
  }

  async function* serverReflectionInfo(requests: AsyncIterable<Request>) {
    for await (const req of requests) {
      yield { validHost: req.host, originalRequest: req, messageResponse: answer(req) };
    }
  }

  return {
    v1: { serverReflectionInfo } satisfies Partial<ServiceImpl<typeof v1.ServerReflection>>,
    // The same messages field for field: v1alpha's answers are v1's.
    v1alpha: { serverReflectionInfo } as unknown as Partial<ServiceImpl<typeof v1alpha.ServerReflection>>,
  };
}
