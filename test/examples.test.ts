// The client examples a platform team copies: each is generated from proto/
// here (buf + protoc-gen-es; grpcio-tools from PyPI) and run against a
// started LinkService, where it creates a link and reads it back.
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterAll, beforeAll, expect, it } from "vitest";
import { type Stack, startStack } from "./support/stack.js";

const root = fileURLToPath(new URL("..", import.meta.url));
const run = promisify(execFile);
// generate.sh installs grpcio-tools and grpcio into this venv.
const PYTHON = `${root}examples/python/.venv/bin/python`;

let stack: Stack;
let env: NodeJS.ProcessEnv;
beforeAll(async () => {
  stack = await startStack();
  const headers = await stack.merchantHeaders("merchant-examples");
  env = {
    ...process.env,
    CLIENT_ID: "merchant-examples",
    API_KEY: headers.authorization?.replace(/^Bearer /, "") ?? "",
    LINKS_URL: stack.linksUrl,
    LINKS_TARGET: stack.linksUrl.replace("http://", ""),
  };
});
afterAll(() => stack?.close());

function expectCreatedAndRead(stdout: string) {
  const [created, read] = stdout.trim().split("\n").map((line) => JSON.parse(line));
  expect(created).toMatchObject({ status: "LINK_STATUS_CREATED" });
  expect(created.created).toMatch(/^lnk-/);
  expect(read).toEqual({ read: created.created, status: "LINK_STATUS_CREATED", amount: "2550" });
}

it("the TypeScript client (buf + protoc-gen-es, connect-es) creates and reads a link", async () => {
  await run(`${root}node_modules/.bin/buf`, ["generate", "--template", "examples/typescript/buf.gen.yaml"], { cwd: root });
  const { stdout } = await run(`${root}node_modules/.bin/tsx`, ["examples/typescript/client.ts"], { cwd: root, env, timeout: 30_000 });
  expectCreatedAndRead(stdout);
}, 60_000);

it("the Python client (grpcio-tools, grpcio) creates and reads a link, and reads the reason a call was refused", async () => {
  await run("bash", ["examples/python/generate.sh"], { cwd: root, timeout: 120_000 });
  const { stdout } = await run(PYTHON, ["examples/python/client.py"], { cwd: root, env, timeout: 30_000 });
  expectCreatedAndRead(stdout);
  expect(JSON.parse(stdout.trim().split("\n")[2]!)).toEqual({ expired_again: "FAILED_PRECONDITION", reason: "LINK_EXPIRED" });
  // google.rpc is googleapis-common-protos' whole, not a copy generated beside ours that shadows it.
  const probe = "import sys; sys.path.insert(0, 'examples/python/gen'); from google.rpc import error_details_pb2 as e; print(e.__file__, hasattr(e, 'BadRequest'))";
  const { stdout: rpc } = await run(PYTHON, ["-c", probe], { cwd: root });
  expect(rpc).toMatch(/site-packages\/google\/rpc\/error_details_pb2\.py True\n$/);
}, 180_000);
