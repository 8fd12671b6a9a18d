// The merchant's REST API under /v1: JSON in, LinkService calls, JSON out.
import { Readable } from "node:stream";
import type { FastifyPluginAsync, FastifyReply, FastifyRequest, RequestPayload } from "fastify";
import type { Static } from "@sinclair/typebox";
import { create } from "@bufbuild/protobuf";
import {
  type Link,
  LinkStatus,
  ListLinksRequestSchema,
} from "../proto/gen/paylink/v1/link_service_pb.js";
import { asCaller, caller, hasClientId, markIdentified } from "./caller.js";
import type { GatewayDeps } from "./deps.js";
import { headerCount, route } from "./routing.js";
import { ROUTE_SCHEMAS } from "./schemas.js";
import { clientLimits, limitFor } from "./rate-limits.js";
import { statusFromName, statusName } from "../services/shared/names.js";
import { clientIdRepeated, clientIdRequired, LIMIT_RANGE, linkStateError, STATUS_VALUES } from "../services/shared/rpc-errors.js";
import { badRequest, INVALID_JSON } from "./errors.js";
import { linkEventToJson, paymentToJson } from "./event-json.js";
import { CREATE_LINK, createLinkRequestFromJson, isObject, linkToJson } from "./link-json.js";
import { judge, quoted, type RequestRules, schemaDisagreement, unknownField } from "./request-rules.js";

type ListQuery = Static<typeof ROUTE_SCHEMAS.links.GET.querystring>;

/** GET /v1/links: the gateway words the query's schema failures; the range and the cursor are the LinkService's. */
const LIST_LINKS: RequestRules = {
  part: "querystring",
  places: [
    { at: "", words: { additionalProperties: (_path, e) => unknownParameter(String(e.params.additionalProperty)) } },
    // A value given twice arrives as an array.
    { at: "/limit", words: { type: "limit must be given once", pattern: LIMIT_RANGE } },
    { at: "/starting_after", words: { type: "starting_after must be given once" } },
    { at: "/status", words: { type: "status must be given once", enum: STATUS_VALUES } },
  ],
};

// `?=x` names a parameter with no name, which the message would leave blank.
const unknownParameter = (name: string) =>
  name === "" ? "Query parameter names must not be empty" : `Unknown query parameter ${quoted(name)}`;

/**
 * The routes that take no query refuse one, as the list refuses a name it
 * does not know: `POST /v1/links?expires_in=60` had made a 12-hour link
 * without a word, a typo silently changing what the merchant got.
 */
function refuseQuery(req: FastifyRequest): void {
  for (const name in req.query as Record<string, unknown>) throw badRequest(unknownParameter(name));
}

/** Registered with prefix /v1. */
export const rest: FastifyPluginAsync<GatewayDeps> = async (v1, { clients, auth, rateLimitClient, metrics }) => {
  const { links } = clients;
  const perClient = clientLimits(auth);
  if (rateLimitClient) perClient.register(v1);
  const limited = limitFor("client", rateLimitClient, perClient.key);

  // Check 1 of the contract, before the body is read or parsed.
  v1.addHook("onRequest", async (req, reply) => {
    // Answers carry links, and links carry metadata.api_key: no cache may keep one.
    reply.header("cache-control", "no-store");
    if (!hasClientId(req)) throw clientIdRequired();
    // Node joins repeated headers with ", ", which would name a third client.
    if (headerCount(req, "client-id") > 1) throw clientIdRepeated();
    markIdentified(req);
    // An empty body is no body, whatever its label: POST .../expire
    // needs none, and check 2 is for POSTs that carry one.
    const length = req.headers["content-length"];
    if ((length === undefined || length === "0") && !req.headers["transfer-encoding"]) {
      delete req.headers["content-type"];
    }
  });

  route(v1, "/links", {
    async POST(req, reply) {
      refuseQuery(req);
      const refused = judge(req, CREATE_LINK);
      const key = req.headers["idempotency-key"];
      const request = createLinkRequestFromJson(req.body as Static<typeof ROUTE_SCHEMAS.links.POST.body>, typeof key === "string" ? key : undefined);
      if (refused) {
        // A rule the LinkService words: it checks the request and creates nothing.
        request.validateOnly = true;
        await clients.createLink(caller(req), request);
        throw schemaDisagreement(req, refused, metrics);
      }
      const res = await clients.createLink(caller(req), request);
      if (res.replayed) reply.header("idempotent-replayed", "true");
      return sendLink(reply.code(201).header("location", `/v1/links/${res.link!.id}`), res.link!);
    },
    async GET(req, reply) {
      const refused = judge(req, LIST_LINKS);
      if (refused) throw schemaDisagreement(req, refused, metrics);
      const query = req.query as ListQuery;
      const res = await links.listLinks(
        create(ListLinksRequestSchema, {
          // The LinkService judges the range, and that starting_after names one of the caller's links.
          limit: query.limit === undefined ? undefined : Number(query.limit),
          startingAfter: query.starting_after,
          status: query.status === undefined ? LinkStatus.UNSPECIFIED : statusFromName(query.status),
        }),
        asCaller(req),
      );
      return reply.send({ data: res.links.map(linkToJson), has_more: res.hasMore });
    },
  }, { ...limited, schema: ROUTE_SCHEMAS.links, attachValidation: true });

  route(v1, "/links/:id", {
    async GET(req, reply) {
      refuseQuery(req);
      const { link } = await clients.getLink(caller(req), idOf(req));
      // REST shows only payable links here; used and expired ones are
      // the contract's 409 and 410 (the list and gRPC still show them).
      const refused = linkStateError(statusName(link!.status));
      if (refused) throw refused;
      return sendLink(reply, link!);
    },
  }, { ...limited, schema: ROUTE_SCHEMAS.link });

  route(v1, "/links/:id/expire", {
    async POST(req, reply) {
      refuseQuery(req);
      refuseAnyField(req);
      const { link } = await links.expireLink({ id: idOf(req) }, asCaller(req));
      return sendLink(reply, link!);
    },
  }, { ...limited, preParsing: emptyChunkedIsNoBody, schema: ROUTE_SCHEMAS.expire });

  // The link's sub-resources answer in any link status (404 and 403 only).
  route(v1, "/links/:id/payment", {
    async GET(req, reply) {
      refuseQuery(req);
      const { payment } = await links.getPayment({ linkId: idOf(req) }, asCaller(req));
      return reply.send(paymentToJson(payment!));
    },
  }, { ...limited, schema: ROUTE_SCHEMAS.payment });

  route(v1, "/links/:id/events", {
    async GET(req, reply) {
      refuseQuery(req);
      const { events } = await links.listLinkEvents({ linkId: idOf(req) }, asCaller(req));
      return reply.send({ data: events.map(linkEventToJson) });
    },
  }, { ...limited, schema: ROUTE_SCHEMAS.events });

  route(v1, "/links/:id/events/:eventId/redeliver", {
    async POST(req, reply) {
      refuseQuery(req);
      refuseAnyField(req);
      const { eventId } = req.params as { eventId: string };
      const { event } = await links.redeliverEvent({ linkId: idOf(req), eventId }, asCaller(req));
      return reply.code(202).send(linkEventToJson(event!));
    },
  }, { ...limited, preParsing: emptyChunkedIsNoBody, schema: ROUTE_SCHEMAS.redeliver });
};

const idOf = (req: FastifyRequest) => (req.params as { id: string }).id;

/**
 * POSTs that need no body take none, or an empty JSON object. A field is
 * refused, as create refuses one it does not know: `{"expires_in": 3600}`
 * sent to expire, by a merchant hoping to extend a link, had ended it at once
 * (a review).
 */
function refuseAnyField(req: FastifyRequest): void {
  if (req.body === undefined) return;
  if (!isObject(req.body)) throw badRequest(INVALID_JSON);
  for (const field in req.body) throw badRequest(unknownField(field));
}

/**
 * A chunked body that turns out to be empty is no body, like one of length
 * 0: POST .../expire needs none, whatever its Content-Type says.
 */
async function emptyChunkedIsNoBody(req: FastifyRequest, _reply: FastifyReply, payload: RequestPayload) {
  if (req.headers["transfer-encoding"] === undefined) return payload;
  const chunks = payload[Symbol.asyncIterator]();
  const first = await chunks.next();
  if (first.done) {
    delete req.headers["content-type"];
    delete req.headers["transfer-encoding"];
    return payload;
  }
  return Readable.from(
    (async function* () {
      yield first.value;
      for (let next = await chunks.next(); !next.done; next = await chunks.next()) yield next.value;
    })(),
    { objectMode: false },
  );
}

function sendLink(reply: FastifyReply, link: Link): FastifyReply {
  return reply.type("application/json; charset=utf-8").send(linkToJson(link));
}
