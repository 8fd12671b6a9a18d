// The customer's checkout: the page at /link/{id} and its pay endpoint. No
// Client-Id: the customer holds only the link id.
import type { FastifyPluginAsync, FastifyRequest } from "fastify";
import type { Static } from "@sinclair/typebox";
import type { Checkout } from "../../proto/gen/paylink/v1/link_service_pb.js";
import type { GatewayDeps } from "../deps.js";
import { route } from "../routing.js";
import { type Pay, ROUTE_SCHEMAS } from "../schemas.js";
import { forwardTrace } from "../trace.js";
import { answerFor, badRequest, httpErrorOf } from "../errors.js";
import { limitFor } from "../rate-limits.js";
import { statusName } from "../../services/shared/names.js";
import { linkStateError, paymentNotFound } from "../../services/shared/rpc-errors.js";
import { sendPage } from "./layout.js";
import { checkoutPage } from "./page.js";
import { judge, schemaDisagreement } from "../request-rules.js";
import { PAY, paymentRequestFromJson, paymentResultToJson } from "./pay-json.js";
import { IDEMPOTENCY_KEY_REPEATED, idempotencyKeyRepeated } from "../link-json.js";
import { statusPage } from "./status-page.js";
import { systemClock } from "../../services/shared/clock.js";

const idOf = (req: FastifyRequest) => (req.params as { id: string }).id;

export const checkout: FastifyPluginAsync<GatewayDeps> = async (app, deps) => {
  const { links } = deps.clients;
  const testMode = deps.paylinkEnv === "test";
  const clock = deps.clock ?? systemClock;

  route(app, "/link/:id", {
    async GET(req, reply) {
      let checkout: Checkout;
      try {
        checkout = (await links.getCheckout({ linkId: idOf(req) })).checkout!;
      } catch (err) {
        // A customer gets a page, never a JSON error body.
        const { status } = answerFor(err, req.log, "checkout page failed");
        return sendPage(reply, status, statusPage(status, { testMode }));
      }
      // The same refusal, and so the same status, as the API's for this link.
      const refused = linkStateError(statusName(checkout.status));
      if (refused) {
        const status = httpErrorOf(refused)!.status;
        return sendPage(reply, status, statusPage(status, { data: checkout.data, testMode }));
      }
      return sendPage(reply, 200, checkoutPage(checkout, { testMode, now: clock.now().getTime() }));
    },
  }, { schema: ROUTE_SCHEMAS.checkoutPage });

  // A link copied with a slash after it is still the link: the page is
  // found again (a JSON 404 would be all the customer saw). Relative, so a
  // CHECKOUT_BASE_URL with a path prefix keeps it; no-store, as the page.
  route(app, "/link/:id/", {
    async GET(req, reply) {
      const query = req.url.indexOf("?");
      const target = `../${encodeURIComponent(idOf(req))}${query === -1 ? "" : req.url.slice(query)}`;
      return reply.header("cache-control", "no-store").redirect(target, 301);
    },
  }, { schema: { GET: { hide: true } } });

  app.register(pay, deps);
};

/** Its own plugin, so that its hook is for the pay path alone. */
const pay: FastifyPluginAsync<GatewayDeps> = async (app, { clients: { links }, rateLimitPay, metrics }) => {
  // In a hook, before the rate limit's and before the body is read: a 429,
  // 413, 415 or "Invalid JSON data" must not be cached either.
  app.addHook("onRequest", async (_req, reply) => {
    reply.header("cache-control", "no-store");
  });

  route(app, "/link/:id/pay", {
    // What became of the attempt with this key: for a page that lost its
    // answer and, having kept no card to send again, can only ask by the key.
    async GET(req, reply) {
      if (idempotencyKeyRepeated(req)) throw badRequest(IDEMPOTENCY_KEY_REPEATED);
      const key = req.headers["idempotency-key"];
      if (typeof key !== "string") throw badRequest("Idempotency-Key header is required");
      const res = await links.getCheckout({ linkId: idOf(req), idempotencyKey: key }, { headers: forwardTrace(req) });
      if (!res.payment) throw paymentNotFound();
      reply.header("idempotent-replayed", "true");
      return reply.send(paymentResultToJson(res.payment));
    },
    async POST(req, reply) {
      // No validate_only to ask: what PAY leaves to the LinkService it
      // refuses below, and anything more is a schema it does not share.
      const refused = judge(req, PAY);
      if (refused) throw schemaDisagreement(req, refused, metrics);
      const request = paymentRequestFromJson(idOf(req), req.body as Static<typeof Pay>);
      // CONTRACT "Retrying a payment": the LinkService checks and keeps it.
      const key = req.headers["idempotency-key"];
      if (typeof key === "string") request.idempotencyKey = key;
      // Longer than other calls: the processor's round trip is inside it,
      // and a customer told "try again" must not have been charged meanwhile.
      const res = await links.completePayment(request, { timeoutMs: 30_000, headers: forwardTrace(req) });
      if (res.replayed) reply.header("idempotent-replayed", "true");
      return reply.send(paymentResultToJson(res));
    },
  }, { ...limitFor("pay", rateLimitPay), schema: ROUTE_SCHEMAS.pay, attachValidation: true });
};
