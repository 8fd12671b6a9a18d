// npm run admin -- keys create --client <id> | keys list --client <id> | keys revoke <key id>
// Talks to the AdminService at LINKS_URL with ADMIN_TOKEN; prints JSON.
import { type Timestamp, timestampDate } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { AdminService, type ApiKey } from "../../proto/gen/paylink/admin/v1/admin_service_pb.js";
import { ConfigError, loadConfig } from "../shared/config.js";

const USAGE = `usage:
  npm run admin -- keys create --client <client id>
  npm run admin -- keys list --client <client id>
  npm run admin -- keys revoke <key id>
environment: LINKS_URL (default http://127.0.0.1:$LINKS_PORT), ADMIN_TOKEN (required)`;

class UsageError extends Error {}

const HELP = new Set(["help", "--help", "-h"]);

async function main(argv: string[]): Promise<unknown> {
  // Before the configuration: an operator asking how to use it has not set
  // ADMIN_TOKEN yet. Only in a command's place: `--client help` is a client id.
  if (HELP.has(argv[0] ?? "") || (argv[0] === "keys" && HELP.has(argv[1] ?? ""))) {
    console.log(USAGE);
    process.exit(0);
  }
  if (argv.length === 0) throw new UsageError("a command is required");
  const config = loadConfig();
  if (!config.adminToken) throw new ConfigError("ADMIN_TOKEN must be set to reach the admin service");
  const admin = createClient(
    AdminService,
    createGrpcTransport({ baseUrl: config.linksUrl, defaultTimeoutMs: 10_000 }),
  );
  const callOptions = { headers: { authorization: `Bearer ${config.adminToken}` } };
  const [group, command, ...rest] = argv;
  if (group !== "keys") throw new UsageError(`unknown command ${group ?? "(none)"}`);
  switch (command) {
    case "create": {
      const { apiKey, secret } = await admin.createApiKey({ clientId: clientFlag(rest) }, callOptions);
      const { id, client_id, last4, created_at } = keyToJson(apiKey!);
      return { id, client_id, secret, last4, created_at };
    }
    case "list": {
      const { apiKeys } = await admin.listApiKeys({ clientId: clientFlag(rest) }, callOptions);
      return apiKeys.map(keyToJson);
    }
    case "revoke": {
      if (rest.length !== 1) throw new UsageError("keys revoke takes one key id");
      const { apiKey } = await admin.revokeApiKey({ id: rest[0]! }, callOptions);
      return keyToJson(apiKey!);
    }
    default:
      throw new UsageError(`unknown command keys ${command ?? "(none)"}`);
  }
}

function clientFlag(args: string[]): string {
  if (args.length !== 2 || args[0] !== "--client") throw new UsageError("expected --client <client id>");
  return args[1]!;
}

const iso = (ts: Timestamp | undefined) => (ts ? timestampDate(ts).toISOString() : null);

function keyToJson(key: ApiKey) {
  return {
    id: key.id,
    client_id: key.clientId,
    last4: key.last4,
    created_at: iso(key.createdAt),
    last_used_at: iso(key.lastUsedAt),
    revoked_at: iso(key.revokedAt),
  };
}

try {
  console.log(JSON.stringify(await main(process.argv.slice(2))));
} catch (err) {
  if (err instanceof UsageError) console.error(`${err.message}\n${USAGE}`);
  else if (err instanceof ConfigError) console.error(`admin: configuration error: ${err.message}`);
  else if (err instanceof ConnectError) console.error(`admin: ${err.code === Code.Unimplemented ? "the admin service is off (ADMIN_TOKEN is not set on the LinkService)" : err.rawMessage}`);
  else console.error(err);
  process.exit(1);
}
