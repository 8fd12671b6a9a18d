import type { FastifyInstance } from "fastify";
import type { GatewayDeps } from "../app.js";

/** The customer's checkout page and pay endpoint (no Client-Id). */
export function registerCheckout(_app: FastifyInstance, _deps: GatewayDeps): void {}
